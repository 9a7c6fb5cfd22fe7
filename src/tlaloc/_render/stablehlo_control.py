"""StableHLO lowerings of structured control flow.

* ``cond`` → ``stablehlo.if`` (operands are used from the enclosing scope); for IREE,
  a ``cond`` whose branches hold no ``while`` runs both and selects (see ``_cond_as_select``).
* ``for_range`` → ``stablehlo.while`` over an i64 trip counter ``k``: the loop
  index is ``start + k·step`` (``k`` runs down for ``reverse``), ``xs`` are
  read with ``dynamic_slice`` at ``k`` and ``ys`` written into preallocated
  stacks with ``dynamic_update_slice``. The trip count is a constant when the
  bounds are, else computed at run time.
* ``while_loop`` → ``stablehlo.while`` carrying the trip count. With
  ``max_trips`` the loop also stops at the bound and the program returns a
  flag that makes the runtime raise if the condition still held (never a
  silent stop). A bound ``tl.jit`` chose itself (``GrowingBound``) reports
  ``RESIDUALS_FULL`` instead, and ``tl.jit`` reruns with a larger one.
"""
from __future__ import annotations

from .._core.control import RESIDUALS_FULL, GrowingBound
from .._core.graph import Literal
from .stablehlo import BOOL, I64, out_aval


def _may_check(graph) -> bool:
    """True when lowering ``graph`` may add run-time checks: a ``while`` with a bound, or a
    ``for`` with stacks (its trip count may be known only at run time). A check's flag
    lives in the region that computes it, so the loop or branch around such a region
    carries the number of the first failing check out of it (``_fold_checks``)."""
    for n in graph.nodes:
        name = n.prim.name
        if name == "while_loop" and n.params["max_trips"] is not None:
            return True
        if name == "for_range" and len(n.outputs) > n.params["n_carry"]:
            return True
        if any(_may_check(r) for r in n.regions()):
            return True
    return False


def _fold_checks(em, start, prev):
    """The checks added since ``em.checks[start]`` (inside a region) as one i64, taken out
    of ``em.checks``: ``prev`` where it is nonzero (an earlier trip failed), else the
    1-based number of the first flag that is set, else 0. Returns (code, messages)."""
    new = em.checks[start:]
    del em.checks[start:]
    code = em.const(0, I64, ())
    for k in reversed(range(len(new))):
        code = em.select(em.convert(new[k][0], BOOL), em.const(k + 1, I64, ()), code)
    kept = em.compare("NE", prev, em.const(0, I64, ()))
    return em.select(kept, prev, code), [m for _, m in new]


def _relay_checks(em, code, messages):
    """Checks in the enclosing scope, one per message folded by ``_fold_checks``."""
    for k, m in enumerate(messages):
        em.check(em.compare("EQ", code, em.const(k + 1, I64, ())), m)


def _cond(em, node, pred, *ops):
    p = em.value(pred, BOOL, ())
    types = [out_aval(node, k) for k in range(len(node.outputs))]
    branches = (node.params["true_branch"], node.params["false_branch"])
    checked = any(_may_check(b) for b in branches)
    if em.backend == "iree" and not checked and all(_selectable(b) for b in branches):
        return _cond_as_select(em, node, p, ops, types)
    regions, messages = [], []
    for branch in branches:
        with em.region() as (_, lines):
            start = len(em.checks)
            outs = em.lower_graph(branch, list(ops))
            rets = [em.value(o, dt, sh) for o, (dt, sh) in zip(outs, types)]
            if checked:         # branch k's checks are numbered after the other branch's
                code, ms = _fold_checks(em, start, em.const(0, I64, ()))
                nz = em.compare("NE", code, em.const(0, I64, ()))
                rets.append(em.select(nz, em.binary("stablehlo.add", code, em.const(len(messages), I64, ())),
                                      code))
                messages += ms
            em.ret(rets)
        regions.append(lines)
    res = em.op("stablehlo.if", [p], types + [(I64, ())] * checked, regions=regions)
    if checked:
        _relay_checks(em, res[-1], messages)
        return res[:-1]
    return res


def _selectable(graph) -> bool:
    """True when running ``graph`` unconditionally is harmless: no ``while`` (which might
    not stop when its guard is false) or ``for`` with bounds known only at run time (which
    might run long), and no integer division (which could trap on a zero divisor)."""
    import numpy as np
    for n in graph.nodes:
        name = n.prim.name
        if name == "while_loop" or (name == "for_range" and not all(isinstance(a, Literal) for a in n.inputs[:3])):
            return False
        if name in ("divide", "floor_divide", "remainder") and \
                any(np.dtype(o.aval.dtype).kind in "iu" for o in n.outputs):
            return False
        if not all(_selectable(r) for r in n.regions()):
            return False
    return True


def _cond_as_select(em, node, p, ops, types):
    """``cond`` for IREE: both branches, then a ``select`` per output. IREE 3.13's runtime
    fails on some ``stablehlo.if`` nests inside ``stablehlo.while`` ("indirect buffer
    reference slot 0 is out range ... copy_buffer"); code without ``if`` avoids them. A
    ``for`` in a branch then runs whatever the predicate (its trip count is finite; the
    index it reads is clamped), and its result is dropped by the select."""
    sides = []
    for branch in (node.params["true_branch"], node.params["false_branch"]):
        outs = em.lower_graph(branch, list(ops))
        sides.append([em.value(o, dt, sh) for o, (dt, sh) in zip(outs, types)])
    return [em.select(p, t, f) for t, f in zip(*sides)]


def _i64(em, x):
    return em.value(x, I64, ())


def _non_negative_range(start, stop, step) -> bool:
    """Whether every index of ``range(start, stop, step)`` is >= 0 (static bounds)."""
    if not all(isinstance(v, Literal) for v in (start, stop, step)):
        return False
    a, b, s = (int(v.value) for v in (start, stop, step))
    return a >= 0 if s > 0 else (a >= 0 and b >= -1)


def _trip_count(em, start, stop, step):
    if all(isinstance(v, Literal) for v in (start, stop, step)):
        n = len(range(int(start.value), int(stop.value), int(step.value)))
        return em.const(n, I64, ()), n
    a, b, s = _i64(em, start), _i64(em, stop), _i64(em, step)
    zero, one = em.const(0, I64, ()), em.const(1, I64, ())

    def count(d, stride):          # ceil(max(d, 0) / stride) for stride > 0
        d = em.binary("stablehlo.maximum", d, zero)
        return em.binary("stablehlo.divide",
                         em.binary("stablehlo.subtract", em.binary("stablehlo.add", d, stride), one), stride)
    up = count(em.binary("stablehlo.subtract", b, a), s)
    neg_s = em.unary("stablehlo.negate", s)
    down = count(em.binary("stablehlo.subtract", a, b), neg_s)
    if isinstance(step, Literal):
        return (up if int(step.value) > 0 else down), None
    return em.select(em.compare("GT", s, zero), up, down), None


def _take_row(em, x, k):
    """``x[k]`` for a stacked array ``x`` and an i64 scalar ``k``."""
    zero = em.const(0, I64, ())
    sizes = (1,) + x.shape[1:]
    row = em.op("stablehlo.dynamic_slice", [x, k] + [zero] * (len(x.shape) - 1), (x.dtype, sizes),
                attrs={"slice_sizes": "array<i64: " + ", ".join(str(d) for d in sizes) + ">"})
    return em.reshape(row, x.shape[1:])


def _put_row(em, buf, y, k):
    zero = em.const(0, I64, ())
    row = em.reshape(em.value(y, buf.dtype, buf.shape[1:]), (1,) + buf.shape[1:])
    return em.op("stablehlo.dynamic_update_slice", [buf, row, k] + [zero] * (len(buf.shape) - 1),
                 (buf.dtype, buf.shape))


def _next_state(em, outs, carry_t, bufs, row):
    """A loop body's results ``outs`` as the next state: the new carry in the carry's declared
    types, and each stacked output buffer in ``bufs`` with the body's output written at ``row``."""
    nc = len(carry_t)
    new_carry = [em.value(o, dt, sh) for o, (dt, sh) in zip(outs[:nc], carry_t)]
    return new_carry, [_put_row(em, b, y, row) for b, y in zip(bufs, outs[nc:])]


def _end_body(em, rets, checked, start, code):
    """Returns ``rets`` from a loop body; when ``checked``, the body's checks since ``start`` are
    folded into the carried check ``code`` and appended. The folded messages, or None."""
    messages = None
    if checked:
        code, messages = _fold_checks(em, start, code)
        rets = rets + [code]
    em.ret(rets)
    return messages


def _emit_while(em, state, types, regions, messages):
    """``stablehlo.while`` over ``state``; after a checked body (``messages`` not None) the carried
    check code is relayed as checks of the enclosing scope and dropped from the results."""
    res = em.op("stablehlo.while", state, types, regions=regions)
    if messages is None:
        return res
    _relay_checks(em, res[-1], messages)
    return res[:-1]


def _for_range(em, node, start, stop, step, *ops):
    p = node.params
    nc, nk = p["n_carry"], p["n_consts"]
    carry_t = [out_aval(node, k) for k in range(nc)]
    ys_t = [out_aval(node, k) for k in range(nc, len(node.outputs))]
    n, static_n = _trip_count(em, start, stop, step)
    if ys_t and static_n is None:
        em.check(em.compare("GT", n, em.const(ys_t[0][1][0], I64, ())),
                 "a for loop ran more trips than its stacks hold (the stacks take the length of the "
                 "arrays the loop iterates over)")
    first, stride = _i64(em, start), _i64(em, step)
    non_negative = _non_negative_range(start, stop, step)
    consts = [em.value(c) for c in ops[nc:nc + nk]]
    xs = [em.value(x) for x in ops[nc + nk:]]
    state = [em.const(0, I64, ())] + [em.value(c, dt, sh) for c, (dt, sh) in zip(ops[:nc], carry_t)]
    state += [em.const(0, dt, sh) for dt, sh in ys_t]
    types = [(I64, ())] + carry_t + ys_t
    checked = _may_check(p["body"])
    if checked:                      # the first failing check of the body, carried out
        state, types = state + [em.const(0, I64, ())], types + [(I64, ())]
    with em.region(types) as (args, cond_lines):
        em.ret([em.compare("LT", args[0], n)])
    with em.region(types) as (args, body_lines):
        k, carry, bufs = args[0], args[1:1 + nc], args[1 + nc:1 + nc + len(ys_t)]
        one = em.const(1, I64, ())
        kk = em.binary("stablehlo.subtract", em.binary("stablehlo.subtract", n, one), k) if p["reverse"] else k
        i = em.binary("stablehlo.add", first, em.binary("stablehlo.multiply", kk, stride))
        if non_negative:
            em.non_negative.add(i.name)
        rows = [_take_row(em, x, kk) for x in xs]
        start = len(em.checks)
        outs = em.lower_graph(p["body"], [i] + list(carry) + consts + rows)
        new_carry, new_bufs = _next_state(em, outs, carry_t, bufs, kk)
        rets = [em.binary("stablehlo.add", k, one)] + new_carry + new_bufs
        messages = _end_body(em, rets, checked, start, args[-1])
    return _emit_while(em, state, types, [cond_lines, body_lines], messages)[1:]


def _while_loop(em, node, *ops):
    p = node.params
    nc, nk, bound = p["n_carry"], p["n_consts"], p["max_trips"]
    carry_t = [out_aval(node, k) for k in range(nc)]
    ys_t = [out_aval(node, k) for k in range(nc + 1, len(node.outputs))]
    consts = [em.value(c) for c in ops[nc:nc + nk]]
    state = [em.value(c, dt, sh) for c, (dt, sh) in zip(ops[:nc], carry_t)] + [em.const(0, I64, ())]
    state += [em.const(0, dt, sh) for dt, sh in ys_t]
    types = carry_t + [(I64, ())] + ys_t
    checked = _may_check(p["body"])
    if checked:                      # the first failing check of the body, carried out
        state, types = state + [em.const(0, I64, ())], types + [(I64, ())]

    def holds(carry):
        return em.value(em.lower_graph(p["cond"], list(carry) + consts)[0], BOOL, ())

    with em.region(types) as (args, cond_lines):
        go = holds(args[:nc])
        if bound is not None:
            go = em.binary("stablehlo.and", go, em.compare("LT", args[nc], em.const(bound, I64, ())))
        em.ret([go])
    with em.region(types) as (args, body_lines):
        carry, trips, bufs = args[:nc], args[nc], args[nc + 1:nc + 1 + len(ys_t)]
        start = len(em.checks)
        outs = em.lower_graph(p["body"], list(carry) + consts)
        new_carry, new_bufs = _next_state(em, outs, carry_t, bufs, trips)
        rets = new_carry + [em.binary("stablehlo.add", trips, em.const(1, I64, ()))] + new_bufs
        messages = _end_body(em, rets, checked, start, args[-1])
    res = _emit_while(em, state, types, [cond_lines, body_lines], messages)
    if bound is not None:
        at_bound = em.compare("EQ", res[nc], em.const(bound, I64, ()))
        if isinstance(bound, GrowingBound):      # tl.jit's own capacity: it grows and reruns
            message = (f"{RESIDUALS_FULL} of {int(bound)} trips (a call of tl.jit(f) grows it and runs again; "
                       f"a program compiled ahead of time cannot: declare tl.while_loop(..., max_trips=N))")
        else:
            message = f"while loop ran past its declared bound max_trips={bound}; raise the bound"
        em.check(em.binary("stablehlo.and", at_bound, holds(res[:nc])), message)
    return res


LOWERINGS = {"cond": _cond, "for_range": _for_range, "while_loop": _while_loop}
