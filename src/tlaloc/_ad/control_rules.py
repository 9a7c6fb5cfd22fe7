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
from .._prims.broadcasting import cast_like, float_cast, zeros_like
from .._prims.elementwise import add
from .reverse import add_cotangents, vjp_graph
from .symbolic_zeros import ZERO, foldable_zero_ys, inline_zeros


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
        joined = [o.aval for o in node.outputs]       # a branch's own output may be narrower
        vt, _ = vjp_graph(tb, ct_mask=mask, wrt=wrt, with_primal=False, name="branch_vjp", bar_avals=joined)
        vf, _ = vjp_graph(fb, ct_mask=mask, wrt=wrt, with_primal=False, name="branch_vjp", bar_avals=joined)
        bars = cond_p.bind(pred, *ops, *[g for g in gs if g is not None], true_branch=vt, false_branch=vf)
        it = iter(bars)
        return [None] + [_primal_dtype(next(it), x) if w else None for w, x in zip(wrt, ops)]

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
    _, reached = vjp_graph(body, with_primal=False, zeros_for_missing=False)
    # carries always get a cotangent slot (they flow between iterations); consts and
    # xs only when a cotangent can reach them
    wrt = [k >= n_lead and (k < n_lead + n_carry or reached[k]) for k in range(n_in)]
    G, _ = vjp_graph(body, wrt=wrt, with_primal=True, zeros_for_missing=True, name=body.name + "_vjp")
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
    return fwd_body, bwd, residuals, kinds, wrt


def _backward_body(bwd: Graph, residuals, kinds, wrt, n_lead: int, n_carry: int, n_consts: int,
                   n_ys: int, body_inputs, name: str, ys_zero=None):
    """The body of the backward loop.

    Inputs: ``(i, *carry_bar, *const_bar_acc, *consts, *xs_k, *res_k, *ys_bar_k)`` where
    ``const_bar_acc`` holds only the constants a cotangent reaches.
    Outputs: ``(*carry_bar_prev, *const_bar_acc', *x_bar_k)`` (x_bar only for reached xs).
    ``body_inputs`` are the forward body's inputs (``n_lead`` leading ones, then
    carry, consts, xs); ``wrt`` marks which of them have a cotangent output in ``bwd``.
    ``ys_zero[k]``: the cotangent of stacked output ``k`` is a symbolic zero, and it has
    no ``ys_bar_k`` input (see ``symbolic_zeros.py``).
    """
    carry_vars = body_inputs[n_lead:n_lead + n_carry]
    const_vars = body_inputs[n_lead + n_carry:n_lead + n_carry + n_consts]
    x_vars = body_inputs[n_lead + n_carry + n_consts:]
    const_mask = wrt[n_lead + n_carry:n_lead + n_carry + n_consts]
    b = Builder(name=name)
    with b.active():
        from .._core.aval import AbstractValue
        import numpy as np
        i = b.new_input(AbstractValue(np.dtype(np.int64), (), weak=True), "i")
        carry_bar = [b.new_input(v.aval, f"{v.hint}_bar") for v in carry_vars]
        const_acc = [b.new_input(v.aval, f"{v.hint}_bar") for v, m in zip(const_vars, const_mask) if m]
        consts = [b.new_input(v.aval, v.hint) for v in const_vars]
        xs = [b.new_input(v.aval, v.hint) for v in x_vars]
        res = [b.new_input(r.aval, r.hint) for r, k in zip(residuals, kinds) if k[0] == "stack"]
        ys_zero = ys_zero or [False] * n_ys
        ys_bar = [ZERO if z else b.new_input(_unknown(), "y_bar") for z in ys_zero]
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
        bars = iter(inline_zeros(bwd, res_args + carry_bar + ys_bar))
        new_carry = [next(bars) for _ in carry_vars]
        const_bars = [next(bars) for m in const_mask if m]
        x_bars = list(bars)
        acc = [add_cotangents(a, c) for a, c in zip(const_acc, const_bars)]
        g = b.finish(new_carry + acc + x_bars)
    return dce(g)


def _name_stacks(stacks, residuals, kinds):
    stacked = [r for r, k in zip(residuals, kinds) if k[0] == "stack"]
    for s, r in zip(stacks, stacked):
        if _is_value(s):
            s.var.hint = f"{r.hint or 'res'}_stack"


def _name_bars(values, like):
    for v, x in zip(values, like):
        if _is_value(v) and _is_value(x) and x.var.hint:
            v.var.hint = f"{x.var.hint}_bar"


def _unknown():
    from .._core.aval import UNKNOWN
    return UNKNOWN


def _primal_dtype(g, primal):
    """``g`` in ``primal``'s float dtype: a carry that enters a loop as float32 and leaves
    it float64 (NumPy promoted it on the first trip) has a float64 loop cotangent, but the
    cotangent of the float32 value that entered is float32. A no-op where the dtypes match
    (the cast folds away once they are known)."""
    if type(g) is not Value or type(primal) is not Value:
        return g
    gd, pd = g.aval.dtype, primal.aval.dtype
    if gd is not None and pd is not None and float_cast(gd, pd) is None:
        return g
    return cast_like(g, primal)


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
    fwd_body, bwd, residuals, kinds, wrt = _loop_vjp_parts(body, 1, n_carry, n_consts, n_xs)
    outs = for_range_p.bind(start, stop, step, *ins[3:], body=fwd_body, n_carry=n_carry,
                            n_consts=n_consts, n_xs=n_xs, reverse=p["reverse"])
    primal_outs = tuple(outs[:n_carry + n_ys])
    stacks = list(outs[n_carry + n_ys:])
    _name_stacks(stacks, residuals, kinds)

    def backward(gs):
        return _reverse_loop(bwd, residuals, kinds, wrt, 1, body.inputs, gs[:n_carry], gs[n_carry:],
                             primal_outs[:n_carry], primal_outs[n_carry:], carry0, consts, xs, stacks,
                             (start, stop, step), not p["reverse"], body.name, lead=3)

    return primal_outs, backward


def _reverse_loop(bwd, residuals, kinds, wrt, n_lead, body_inputs, carry_gs, ys_gs, carry_final, ys_final,
                  carry0, consts, xs, stacks, bounds, reverse, name, lead):
    """Emit the backward loop; returns the cotangents of the loop node's inputs."""
    n_carry, n_consts, n_ys = len(carry0), len(consts), len(ys_final)
    const_mask = wrt[n_lead + n_carry:n_lead + n_carry + n_consts]
    x_mask = wrt[n_lead + n_carry + n_consts:]
    carry_bar = _zeros_if_none(carry_gs, carry_final)
    n_in = len(bwd.inputs) - n_ys
    ys_zero = foldable_zero_ys(bwd, n_in, ys_gs)
    ys_bar = [zeros_like(y) if g is None else g for g, y, z in zip(ys_gs, ys_final, ys_zero) if not z]
    bbody = _backward_body(bwd, residuals, kinds, wrt, n_lead, n_carry, n_consts, n_ys, body_inputs,
                           name + "_bwd", ys_zero)
    const_acc = [zeros_like(c) for c, m in zip(consts, const_mask) if m]
    n_acc = len(const_acc)
    r = for_range_p.bind(*bounds, *carry_bar, *const_acc, *consts, *xs, *stacks, *ys_bar,
                         body=bbody, n_carry=n_carry + n_acc, n_consts=n_consts,
                         n_xs=len(xs) + len(stacks) + len(ys_bar), reverse=reverse)
    carry0_bar = [_primal_dtype(g, c) for g, c in zip(r[:n_carry], carry0)]
    acc_it = iter(r[n_carry:n_carry + n_acc])
    const_bars = [next(acc_it) if m else None for m in const_mask]
    x_it = iter(r[n_carry + n_acc:])
    x_bars = [next(x_it) if m else None for m in x_mask]
    _name_bars(carry0_bar, carry0)
    _name_bars(const_bars, consts)
    return [None] * lead + carry0_bar + const_bars + x_bars


for_range_p.reverse_rule = _for_reverse


def _while_reverse(node, ins):
    p = dict(node.params)
    n_carry, n_consts = p["n_carry"], p["n_consts"]
    body, cond = p["body"], p["cond"]
    n_ys = len(body.outputs) - n_carry
    carry0 = ins[:n_carry]
    consts = ins[n_carry:]
    fwd_body, bwd, residuals, kinds, wrt = _loop_vjp_parts(body, 0, n_carry, n_consts, 0)
    outs = while_loop_p.bind(*ins, cond=cond, body=fwd_body, n_carry=n_carry, n_consts=n_consts,
                             max_trips=p["max_trips"])
    trips = outs[n_carry]
    primal_outs = tuple(outs[:n_carry]) + (trips,) + tuple(outs[n_carry + 1:n_carry + 1 + n_ys])
    stacks = list(outs[n_carry + 1 + n_ys:])
    _name_stacks(stacks, residuals, kinds)

    def backward(gs):
        # the backward loop is a for_range: give the body a leading (unused) index
        from .._core.aval import AbstractValue
        import numpy as np
        idx = Var(AbstractValue(np.dtype(np.int64), (), weak=True), "k")
        return _reverse_loop(bwd, residuals, kinds, [False] + list(wrt), 1, (idx,) + tuple(body.inputs),
                             gs[:n_carry], gs[n_carry + 1:], primal_outs[:n_carry], primal_outs[n_carry + 1:],
                             carry0, consts, [], stacks, (0, trips, 1), True, body.name, lead=0)

    return primal_outs, backward


while_loop_p.reverse_rule = _while_reverse
