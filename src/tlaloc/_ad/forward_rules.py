"""Forward-mode rules for structured control flow.

Tangents ride along with the primal values: a ``cond`` gets branches that
also return tangents; a loop carries ``(carry, carry_dot)`` and stacks
``(ys, ys_dot)``. Which carries have a tangent is found by iterating the body
to a fixed point (a carry that starts at a constant can pick up a tangent).
"""
from __future__ import annotations

from .._core.builder import Builder, Value
from .._core.control import cond_p, for_range_p, while_loop_p
from .._core.graph import Graph
from .._core.passes import dce, inline
from .._prims.broadcasting import zeros_like
from .forward import _dot_hint, forward_tangents


def _has(t) -> bool:
    return t is not None


# -- cond -------------------------------------------------------------------------

def _branch_jvp(branch: Graph, op_mask, out_mask, name):
    """Branch graph (ops, op tangents where op_mask) -> (outs, out tangents where out_mask)."""
    b = Builder(name=name)
    with b.active():
        ins = [b.new_input(v.aval, v.hint) for v in branch.inputs]
        tans = [b.new_input(v.aval, _dot_hint(v)) if m else None for v, m in zip(branch.inputs, op_mask)]
        outs, touts = forward_tangents(branch, ins, tans)
        res = list(outs)
        for o, t, m in zip(outs, touts, out_mask):
            if m:
                res.append(t if t is not None else zeros_like(o))
        return dce(b.finish(res)), [t is not None for t in touts]


def _cond_forward(node, ins, tins):
    p = dict(node.params)
    pred, ops, op_tans = ins[0], ins[1:], tins[1:]
    op_mask = [_has(t) for t in op_tans]
    if not any(op_mask):
        outs = cond_p.bind(*ins, **p)
        return tuple(outs), (None,) * len(outs)
    n_out = len(p["true_branch"].outputs)
    _, mt = _branch_jvp(p["true_branch"], op_mask, [False] * n_out, "branch_jvp")
    _, mf = _branch_jvp(p["false_branch"], op_mask, [False] * n_out, "branch_jvp")
    out_mask = [a or b for a, b in zip(mt, mf)]
    gt, _ = _branch_jvp(p["true_branch"], op_mask, out_mask, "branch_jvp")
    gf, _ = _branch_jvp(p["false_branch"], op_mask, out_mask, "branch_jvp")
    res = cond_p.bind(pred, *ops, *[t for t in op_tans if t is not None], true_branch=gt, false_branch=gf)
    outs, rest = tuple(res[:n_out]), iter(res[n_out:])
    touts = tuple(next(rest) if m else None for m in out_mask)
    return outs, touts


cond_p.forward_rule = _cond_forward


# -- loops ----------------------------------------------------------------------------

def _loop_body_jvp(body: Graph, n_lead, n_carry, n_consts, carry_mask, const_mask, x_mask, ys_mask, name):
    """Body (lead, carry, consts, xs) -> (carry, ys)  becomes
    (lead, carry, carry_dot, consts, const_dot, xs, x_dot) -> (carry, carry_dot, ys, ys_dot);
    returns (graph, carry_out_mask, ys_out_mask) of tangents that are non-zero."""
    n_xs = len(body.inputs) - n_lead - n_carry - n_consts
    segs = [body.inputs[:n_lead], body.inputs[n_lead:n_lead + n_carry],
            body.inputs[n_lead + n_carry:n_lead + n_carry + n_consts], body.inputs[n_lead + n_carry + n_consts:]]
    b = Builder(name=name)
    with b.active():
        lead = [b.new_input(v.aval, v.hint) for v in segs[0]]
        carry = [b.new_input(v.aval, v.hint) for v in segs[1]]
        carry_dot = [b.new_input(v.aval, _dot_hint(v)) if m else None for v, m in zip(segs[1], carry_mask)]
        consts = [b.new_input(v.aval, v.hint) for v in segs[2]]
        const_dot = [b.new_input(v.aval, _dot_hint(v)) if m else None for v, m in zip(segs[2], const_mask)]
        xs = [b.new_input(v.aval, v.hint) for v in segs[3]]
        x_dot = [b.new_input(v.aval, _dot_hint(v)) if m else None for v, m in zip(segs[3], x_mask)]
        outs, touts = forward_tangents(body, lead + carry + consts + xs,
                                       [None] * n_lead + carry_dot + const_dot + x_dot)
        c_out, y_out = outs[:n_carry], outs[n_carry:]
        ct_out, yt_out = touts[:n_carry], touts[n_carry:]
        res = list(c_out)
        res += [t if t is not None else zeros_like(o) for o, t, m in zip(c_out, ct_out, carry_mask) if m]
        res += list(y_out)
        res += [t if t is not None else zeros_like(o) for o, t, m in zip(y_out, yt_out, ys_mask) if m]
        g = dce(b.finish(res))
    return g, [t is not None for t in ct_out], [t is not None for t in yt_out]


def _fixed_point(body, n_lead, n_carry, n_consts, carry_mask, const_mask, x_mask, n_ys, name):
    for _ in range(n_carry + 2):
        _, c_out, y_out = _loop_body_jvp(body, n_lead, n_carry, n_consts, carry_mask, const_mask, x_mask,
                                         [False] * n_ys, name)
        new = [a or b for a, b in zip(carry_mask, c_out)]
        if new == carry_mask:
            g, _, y_out = _loop_body_jvp(body, n_lead, n_carry, n_consts, carry_mask, const_mask, x_mask,
                                         y_out, name)
            return g, carry_mask, y_out
        carry_mask = new
    raise AssertionError("tangent mask did not converge")


def _zeros_for(vals, tans, mask):
    return [t if t is not None else zeros_like(v) for v, t, m in zip(vals, tans, mask) if m]


def _split_outputs(res, n_carry, carry_mask, n_ys, ys_mask, extra=0):
    it = iter(res)
    carry = [next(it) for _ in range(n_carry)]
    carry_dot = [next(it) if m else None for m in carry_mask]
    head = [next(it) for _ in range(extra)]
    ys = [next(it) for _ in range(n_ys)]
    ys_dot = [next(it) if m else None for m in ys_mask]
    return carry, carry_dot, head, ys, ys_dot


def _for_forward(node, ins, tins):
    p = dict(node.params)
    n_carry, n_consts, n_xs = p["n_carry"], p["n_consts"], p["n_xs"]
    body = p["body"]
    n_ys = len(body.outputs) - n_carry
    carry, consts, xs = ins[3:3 + n_carry], ins[3 + n_carry:3 + n_carry + n_consts], ins[3 + n_carry + n_consts:]
    ct, kt, xt = tins[3:3 + n_carry], tins[3 + n_carry:3 + n_carry + n_consts], tins[3 + n_carry + n_consts:]
    carry_mask, const_mask, x_mask = [_has(t) for t in ct], [_has(t) for t in kt], [_has(t) for t in xt]
    if not (any(carry_mask) or any(const_mask) or any(x_mask)):
        outs = for_range_p.bind(*ins, **p)
        return tuple(outs), (None,) * len(outs)
    g, carry_mask, ys_mask = _fixed_point(body, 1, n_carry, n_consts, carry_mask, const_mask, x_mask, n_ys,
                                          body.name + "_jvp")
    n_cd, n_kd, n_xd = sum(carry_mask), sum(const_mask), sum(x_mask)
    res = for_range_p.bind(*ins[:3], *carry, *_zeros_for(carry, ct, carry_mask), *consts,
                           *[t for t in kt if t is not None], *xs, *[t for t in xt if t is not None],
                           body=g, n_carry=n_carry + n_cd, n_consts=n_consts + n_kd, n_xs=n_xs + n_xd,
                           reverse=p["reverse"])
    c, cd, _, ys, yd = _split_outputs(res, n_carry, carry_mask, n_ys, ys_mask)
    return tuple(c) + tuple(ys), tuple(cd) + tuple(yd)


for_range_p.forward_rule = _for_forward


def _while_forward(node, ins, tins):
    p = dict(node.params)
    n_carry, n_consts = p["n_carry"], p["n_consts"]
    body, cond = p["body"], p["cond"]
    n_ys = len(body.outputs) - n_carry
    carry, consts = ins[:n_carry], ins[n_carry:]
    ct, kt = tins[:n_carry], tins[n_carry:]
    carry_mask, const_mask = [_has(t) for t in ct], [_has(t) for t in kt]
    if not (any(carry_mask) or any(const_mask)):
        outs = while_loop_p.bind(*ins, **p)
        return tuple(outs), (None,) * len(outs)
    g, carry_mask, ys_mask = _fixed_point(body, 0, n_carry, n_consts, carry_mask, const_mask, [], n_ys,
                                          body.name + "_jvp")
    # the condition reads only the primal carry and constants
    b = Builder(name="while_cond")
    with b.active():
        c_in = [b.new_input(v.aval, v.hint) for v in cond.inputs[:n_carry]]
        _ = [b.new_input(v.aval, _dot_hint(v)) for v, m in zip(cond.inputs[:n_carry], carry_mask) if m]
        k_in = [b.new_input(v.aval, v.hint) for v in cond.inputs[n_carry:]]
        _ = [b.new_input(v.aval, _dot_hint(v)) for v, m in zip(cond.inputs[n_carry:], const_mask) if m]
        new_cond = b.finish(inline(cond, c_in + k_in))
    n_cd, n_kd = sum(carry_mask), sum(const_mask)
    res = while_loop_p.bind(*carry, *_zeros_for(carry, ct, carry_mask), *consts,
                            *[t for t in kt if t is not None], cond=new_cond, body=g,
                            n_carry=n_carry + n_cd, n_consts=n_consts + n_kd, max_trips=p["max_trips"])
    c, cd, head, ys, yd = _split_outputs(res, n_carry, carry_mask, n_ys, ys_mask, extra=1)
    return tuple(c) + tuple(head) + tuple(ys), tuple(cd) + (None,) + tuple(yd)


while_loop_p.forward_rule = _while_forward
