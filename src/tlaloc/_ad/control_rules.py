"""Reverse-mode rules for structured control flow.

* ``cond``: the forward sweep runs the original ``cond``; the backward sweep is
  a ``cond`` on the same predicate whose branches are the VJPs of the original
  branches (each recomputes its branch's forward values, so no residuals of the
  branch not taken are needed).
* ``for_range``: the forward loop also returns, per iteration, the residuals
  its backward body needs (stacked); the backward sweep is a ``for_range`` over
  the same range in the opposite direction, carrying the carry cotangents and
  accumulating the cotangents of loop constants.
* ``while_loop``: as ``for_range``; the forward loop counts its trips and the
  backward sweep is a reversed ``for_range`` over that count.
"""
from __future__ import annotations

from .._core.builder import Builder, Value
from .._core.control import cond_p, for_range_p, while_loop_p
from .._core.graph import Graph, Literal, Var
from .._core.passes import dce, inline, split
from .._prims.broadcasting import zeros_like
from .._prims.elementwise import add
from .reverse import vjp_graph


def _is_value(x) -> bool:
    return type(x) is Value


# -- cond ---------------------------------------------------------------------------

def _cond_reverse(node, ins):
    p = dict(node.params)
    outs = cond_p.bind(*ins, **p)
    pred, ops = ins[0], ins[1:]

    def backward(gs):
        mask = [g is not None for g in gs]
        tb, fb = p["true_branch"], p["false_branch"]
        _, reach_t = vjp_graph(tb, ct_mask=mask, with_primal=False)
        _, reach_f = vjp_graph(fb, ct_mask=mask, with_primal=False)
        wrt = [(rt or rf) and _is_value(x) for rt, rf, x in zip(reach_t, reach_f, ops)]
        if not any(wrt):
            return [None] * len(ins)
        vt, _ = vjp_graph(tb, ct_mask=mask, wrt=wrt, with_primal=False, name="branch_vjp")
        vf, _ = vjp_graph(fb, ct_mask=mask, wrt=wrt, with_primal=False, name="branch_vjp")
        bars = cond_p.bind(pred, *ops, *[g for g in gs if g is not None], true_branch=vt, false_branch=vf)
        it = iter(bars)
        return [None] + [next(it) if w else None for w in wrt]

    return tuple(outs), backward


cond_p.reverse_rule = _cond_reverse


# -- loops ---------------------------------------------------------------------------

def _loop_vjp_parts(body: Graph, n_lead: int, n_carry: int, n_consts: int, n_xs: int):
    """Split the body's VJP into forward and backward bodies.

    Body inputs: ``n_lead`` leading inputs (the index ``i`` for for_range), carry,
    consts, x slices. Body outputs: carry, ys.
    Returns (fwd body, bwd graph, residual classification).
    """
    n_in = len(body.inputs)
    n_out = len(body.outputs)
    G, reached = vjp_graph(body, wrt=[k >= n_lead for k in range(n_in)], with_primal=True,
                           zeros_for_missing=True, name=body.name + "_vjp")
    fwd, bwd, residuals = split(G, n_in, n_out)
    prim_in = G.inputs[:n_in]
    lead = {v.id for v in prim_in[:n_lead]}
    consts = {v.id: k for k, v in enumerate(prim_in[n_lead + n_carry:n_lead + n_carry + n_consts])}
    xs = {v.id: k for k, v in enumerate(prim_in[n_lead + n_carry + n_consts:])}
    kinds = []
    for r in residuals:
        if r.id in lead:
            kinds.append(("lead", None))
        elif r.id in consts:
            kinds.append(("const", consts[r.id]))
        elif r.id in xs:
            kinds.append(("x", xs[r.id]))
        else:
            kinds.append(("stack", None))
    # the forward body returns the stacked residuals as extra ys
    stacked = [r for r, k in zip(residuals, kinds) if k[0] == "stack"]
    fwd_body = dce(Graph(fwd.inputs, fwd.nodes, tuple(fwd.outputs[:n_out]) + tuple(stacked), body.name + "_fwd"))
    return fwd_body, bwd, residuals, kinds


def _backward_body(bwd: Graph, residuals, kinds, n_lead_bwd: int, n_carry: int, n_consts: int,
                   n_xs: int, n_ys: int, body_inputs, name: str):
    """The body of the backward loop.

    Inputs: ``(i, *carry_bar, *const_bar_acc, *consts, *xs_k, *res_k, *ys_bar_k)``.
    Outputs: ``(*carry_bar_prev, *const_bar_acc', *x_bar_k)``.
    """
    b = Builder(name=name)
    with b.active():
        i = b.new_input(body_inputs[0].aval, "i") if n_lead_bwd else None
        carry_bar = [b.new_input(v.aval, f"{v.hint}_bar") for v in body_inputs[n_lead_bwd:n_lead_bwd + n_carry]]
        const_vars = body_inputs[n_lead_bwd + n_carry:n_lead_bwd + n_carry + n_consts]
        const_acc = [b.new_input(v.aval, f"{v.hint}_bar") for v in const_vars]
        consts = [b.new_input(v.aval, v.hint) for v in const_vars]
        xs = [b.new_input(v.aval, v.hint) for v in body_inputs[n_lead_bwd + n_carry + n_consts:]]
        res = [b.new_input(r.aval, r.hint) for r, k in zip(residuals, kinds) if k[0] == "stack"]
        ys_bar = [b.new_input(None or _unknown(), "y_bar") for _ in range(n_ys)]
        it = iter(res)
        res_args = []
        for r, (kind, k) in zip(residuals, kinds):
            if kind == "lead":
                res_args.append(i)
            elif kind == "const":
                res_args.append(consts[k])
            elif kind == "x":
                res_args.append(xs[k])
            else:
                res_args.append(next(it))
        bars = inline(bwd, res_args + carry_bar + ys_bar)
        # bwd outputs: cotangents of (carry, consts, xs) inputs of the body
        new_carry = bars[:n_carry]
        const_bars = bars[n_carry:n_carry + n_consts]
        x_bars = bars[n_carry + n_consts:]
        acc = [add(a, c) for a, c in zip(const_acc, const_bars)]
        g = b.finish(list(new_carry) + acc + list(x_bars))
    return g


def _unknown():
    from .._core.aval import UNKNOWN
    return UNKNOWN


def _zeros_if_none(gs, like):
    return [g if g is not None else zeros_like(x) for g, x in zip(gs, like)]


def _for_reverse(node, ins):
    p = dict(node.params)
    n_carry, n_consts, n_xs = p["n_carry"], p["n_consts"], p["n_xs"]
    body = p["body"]
    n_ys = len(body.outputs) - n_carry
    start, stop, step = ins[:3]
    carry0 = ins[3:3 + n_carry]
    consts = ins[3 + n_carry:3 + n_carry + n_consts]
    xs = ins[3 + n_carry + n_consts:]
    fwd_body, bwd, residuals, kinds = _loop_vjp_parts(body, 1, n_carry, n_consts, n_xs)
    outs = for_range_p.bind(start, stop, step, *ins[3:], body=fwd_body, n_carry=n_carry,
                            n_consts=n_consts, n_xs=n_xs, reverse=p["reverse"])
    primal_outs = tuple(outs[:n_carry + n_ys])
    stacks = list(outs[n_carry + n_ys:])

    def backward(gs):
        carry_bar = _zeros_if_none(gs[:n_carry], primal_outs[:n_carry])
        ys_bar = _zeros_if_none(gs[n_carry:], primal_outs[n_carry:])
        bbody = _backward_body(bwd, residuals, kinds, 1, n_carry, n_consts, n_xs, n_ys, body.inputs,
                               body.name + "_bwd")
        const_acc = [zeros_like(c) for c in consts]
        r = for_range_p.bind(start, stop, step, *carry_bar, *const_acc, *consts, *xs, *stacks, *ys_bar,
                             body=bbody, n_carry=n_carry + n_consts, n_consts=n_consts,
                             n_xs=n_xs + len(stacks) + n_ys, reverse=not p["reverse"])
        carry0_bar = r[:n_carry]
        const_bars = r[n_carry:n_carry + n_consts]
        x_bars = r[n_carry + n_consts:]
        return [None, None, None] + list(carry0_bar) + list(const_bars) + list(x_bars)

    return primal_outs, backward


for_range_p.reverse_rule = _for_reverse


def _while_reverse(node, ins):
    p = dict(node.params)
    n_carry, n_consts = p["n_carry"], p["n_consts"]
    body, cond = p["body"], p["cond"]
    n_ys = len(body.outputs) - n_carry
    carry0 = ins[:n_carry]
    consts = ins[n_carry:]
    fwd_body, bwd, residuals, kinds = _loop_vjp_parts(body, 0, n_carry, n_consts, 0)
    outs = while_loop_p.bind(*ins, cond=cond, body=fwd_body, n_carry=n_carry, n_consts=n_consts,
                             max_trips=p["max_trips"])
    trips = outs[n_carry]
    primal_outs = tuple(outs[:n_carry]) + (trips,) + tuple(outs[n_carry + 1:n_carry + 1 + n_ys])
    stacks = list(outs[n_carry + 1 + n_ys:])

    def backward(gs):
        carry_bar = _zeros_if_none(gs[:n_carry], primal_outs[:n_carry])
        ys_bar = _zeros_if_none(gs[n_carry + 1:], primal_outs[n_carry + 1:])
        # the backward body gets a (dummy) leading index from for_range
        from .._core.aval import AbstractValue
        import numpy as np
        idx = Var(AbstractValue(np.dtype(np.int64), ()), "k")
        inputs_with_index = (idx,) + tuple(body.inputs)
        bbody0 = _backward_body(bwd, residuals, kinds, 1, n_carry, n_consts, 0, n_ys, inputs_with_index,
                                body.name + "_bwd")
        const_acc = [zeros_like(c) for c in consts]
        r = for_range_p.bind(0, trips, 1, *carry_bar, *const_acc, *consts, *stacks, *ys_bar,
                             body=bbody0, n_carry=n_carry + n_consts, n_consts=n_consts,
                             n_xs=len(stacks) + n_ys, reverse=True)
        return list(r[:n_carry]) + list(r[n_carry:n_carry + n_consts])

    return primal_outs, backward


while_loop_p.reverse_rule = _while_reverse
