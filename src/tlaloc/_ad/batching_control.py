"""Batching rules for structured control flow: ``cond``, ``for_range``, ``while_loop``.

* ``cond`` with an unbatched predicate stays a ``cond`` whose branches are
  batched (an output batched in either branch is batched in both). With a
  batched predicate every example may take its own branch: both branches run
  on the whole batch and ``select`` picks each example's result. The branch not
  taken may compute inf/NaN; ``select`` drops it, and its VJP sends the not
  taken side an exact zero, so gradients stay exact. (It must still be safe to
  *run*: an index that is out of range on the path not taken raises.)
* ``for_range`` batches its body; carries that become batched in the body are
  batched from the start (a fixed point over the carries' batch dims and
  shapes). Stacks stay per-iteration lists, each entry batched at 0. Bounds
  that differ per example run the longest trip count; an example's iterations
  past its own count leave its carries unchanged (``select``).
* ``while_loop`` with an unbatched predicate stays a loop with a batched body.
  With a batched predicate it runs while any example is active and freezes
  finished examples' carries with ``select``: the loop runs the maximum trip
  count, and the ``trips`` output is each example's own count (a reverse sweep
  over it then replays exactly that example's iterations).
"""
from __future__ import annotations

import numpy as np

from .._core.aval import AbstractValue
from .._core.control import cond_p, for_range_p, undef_literal, while_loop_p
from .._prims import elementwise as _ew
from .._prims import reductions as _red
from .._prims import shape_ops as _sh
from .._prims.selection import select_p
from ..errors import ShapeError
from .batching import (as_constant, aval_of, axis_size, batch_inline, batched, batched_aval, build_region, emit,
                       example_rank, expand_after_batch, is_value, moveaxis, region, shape, to_front,
                       unbatched_aval)
from .batching_rules import elementwise

_select = elementwise(select_p)
_I64 = np.dtype(np.int64)
_INDEX = AbstractValue(_I64, (), weak=True)      # a Python int, as in the interpreter


def _choose(pred, t, dt, f, df):
    """``where(pred, t, f)`` per example, for a predicate batched at 0."""
    if t is None:
        return f, df
    if f is None or (t is f and dt == df):
        return t, dt
    return _select([pred, t, f], [0, dt, df])


def _scalar_pred(pred, d, what):
    if example_rank(pred, d) != 0:
        raise ShapeError(f"{what}: the condition must be a scalar per example, got one of rank "
                         f"{example_rank(pred, d)}; reduce it (.any()/.all()) or use tnp.where")
    return to_front(pred, d)


def _dtype_of(*avals):
    """The dtype a constant takes next to values of ``avals`` (the first strong one)."""
    return next((a.dtype for a in avals if a.dtype is not None and not a.weak), None)


# -- cond ---------------------------------------------------------------------------------------

def _cond(args, dims, *, true_branch, false_branch):
    (pred, *ops), (dp, *dops) = args, dims
    if dp is not None:                  # each example takes its own branch: run both, choose
        pred = _scalar_pred(pred, dp, "if")
        tp = batch_inline(true_branch, ops, dops)
        fp = batch_inline(false_branch, ops, dops)
        outs = [_choose(pred, t, dt, f, df) for (t, dt), (f, df) in zip(tp, fp)]
        return tuple(o for o, _ in outs), tuple(d for _, d in outs)
    avals = [aval_of(x) for x in ops]
    undef = [x is None for x in ops]              # undefined on entry stays undefined inside
    tb, td = region(true_branch, avals, dops, undef=undef)
    fb, fd = region(false_branch, avals, dops, undef=undef)
    want = [0 if (a is not None or b is not None) else None for a, b in zip(td, fd)]
    dtypes = [_dtype_of(a.aval, b.aval) for a, b in zip(tb.outputs, fb.outputs)]
    if td != want:
        tb, _ = region(true_branch, avals, dops, want=want, undef=undef, dtypes=dtypes)
    if fd != want:
        fb, _ = region(false_branch, avals, dops, want=want, undef=undef, dtypes=dtypes)
    outs = cond_p.bind(pred, *(undef_literal() if x is None else x for x in ops), true_branch=tb,
                       false_branch=fb)
    return tuple(outs), tuple(want)


cond_p.batch = _cond


# -- loop carries --------------------------------------------------------------------------------

def _merge(a: AbstractValue, b: AbstractValue) -> AbstractValue:
    """Per-example carry aval ``a`` updated with what the body returns (``b``)."""
    if b.shape is None:
        shape_ = a.shape
    elif a.shape is None or len(a.shape) != len(b.shape):
        shape_ = b.shape
    else:
        shape_ = tuple(y if type(y) is int else x for x, y in zip(a.shape, b.shape))
    dtype = b.dtype if b.dtype is not None else a.dtype
    return AbstractValue(dtype, None if shape_ is None else tuple(shape_), weak=dtype is None and a.weak)


def _fixpoint(trial, carry, cdims, first_guess, batch_all=False):
    """Batch dims and per-example avals of the carries, stable through the body.

    ``trial(cdims, cavals) -> (out carry dims, out carry avals (per example), batch_all)``;
    ``first_guess`` are the carries' avals in the graph being batched.
    """
    cavals = [_merge(unbatched_aval(aval_of(c), d), h) for c, d, h in zip(carry, cdims, first_guess)]
    cdims = [0 if (d is not None or batch_all) else None for d in cdims]
    for _ in range(8):
        od, oavals, force = trial(cdims, cavals)
        new_dims = [0 if (c is not None or o is not None or force) else None for c, o in zip(cdims, od)]
        new_avals = [_merge(a, o) for a, o in zip(cavals, oavals)]
        if new_dims == cdims and new_avals == cavals:
            return cdims, cavals
        cdims, cavals = new_dims, new_avals
    raise ShapeError("vmap: a loop's carried values change shape from one iteration to the next; "
                     "give them their final shape before the loop")


def _undefined(carry, cavals) -> set:
    """Carries undefined before the loop whose shape is not known yet: a trial
    runs the body with them undefined (a select keeps the defined side), which
    tells their shape."""
    return {k for k, (c, a) in enumerate(zip(carry, cavals)) if c is None and a.shape is None}


def _carry_init(c, dc, want, cav):
    """The initial carry, batched as the body expects and shaped like its carry."""
    target = None if cav.shape is None or any(type(s) is not int for s in cav.shape) else tuple(cav.shape)
    if c is None:                               # undefined before the loop (set inside)
        if want is None:
            return undef_literal()
        if target is None:
            raise ShapeError("vmap: a loop variable assigned only inside the loop has no known shape")
        return emit(_sh.broadcast_to_p, np.zeros((), cav.dtype or np.float64), shape=(axis_size(),) + target)
    if not is_value(c) and cav.dtype is not None:
        c = np.asarray(c, dtype=cav.dtype)          # a weak scalar takes the carry's dtype
    if want is None:
        if target is not None and tuple(np.shape(c) if not is_value(c) else shape(c)) != target:
            return emit(_sh.broadcast_to_p, c, shape=target)
        return c
    if dc is None:
        full = (axis_size(),) + (target if target is not None else tuple(np.shape(c) if not is_value(c)
                                                                         else shape(c)))
        return emit(_sh.broadcast_to_p, c, shape=full)
    c = to_front(c, dc)
    if target is not None and shape(c)[1:] != target:
        c = expand_after_batch(c, len(target) - example_rank(c, 0))
        c = _sh.broadcast_to(c, (axis_size(),) + target)
    return c


def _prep_xs(xs, xdims):
    """Stacked inputs with the iteration axis first; their element avals and batch dims."""
    out, avals, dims = [], [], []
    for x, d in zip(xs, xdims):
        if d == 0:
            x, d = moveaxis(x, 0, 1), 1
        a = aval_of(x)
        out.append(x)
        avals.append(AbstractValue(a.dtype, None if a.shape is None else tuple(a.shape[1:])))
        dims.append(None if d is None else d - 1)
    return out, avals, dims


def _stack_dims(dims):
    return [None if d is None else 1 for d in dims]


def _want_ys(dims):
    return [None if d is None else 0 for d in dims]


# -- for_range ------------------------------------------------------------------------------------

def _for(args, dims, *, body, n_carry, n_consts, n_xs, reverse):
    bounds, bdims = list(args[:3]), list(dims[:3])
    carry, cdims = list(args[3:3 + n_carry]), list(dims[3:3 + n_carry])
    consts = [to_front(c, d) for c, d in zip(args[3 + n_carry:3 + n_carry + n_consts],
                                             dims[3 + n_carry:3 + n_carry + n_consts])]
    kdims = [None if d is None else 0 for d in dims[3 + n_carry:3 + n_carry + n_consts]]
    xs, xavals, xdims = _prep_xs(args[3 + n_carry + n_consts:], dims[3 + n_carry + n_consts:])
    masked = any(d is not None for d in bdims)
    if masked:       # bounds differ per example: run the longest range, mask the rest
        # (int constants as 0-d int64 arrays: a weak Python int would be typed as a float)
        start, stop, step = (to_front(b, d) if is_value(b) else np.asarray(b, _I64) for b, d in zip(bounds, bdims))
        span = _ew.add(_ew.subtract(stop, start), as_constant(_ew.subtract(step, _ew.sign(step))))
        length = _ew.maximum(_ew.floordiv_p.bind(span, step), np.asarray(0, _I64))   # len(range(start, stop, step))
        extra = [start, step, length]
        i_dim = 0 if (bdims[0] is not None or bdims[2] is not None) else None
        bounds = [0, _red.reduce_max(length), 1]
    else:
        extra = []
    k_avals = [aval_of(c) for c in consts] + [aval_of(e) for e in extra]
    first_guess = [o.aval for o in body.outputs[:n_carry]]      # the carries' avals for one example
    n_ys = len(body.outputs) - n_carry

    def body_fn(cd, undef):
        def fn(ins):
            ins = [None if k - 1 in undef else v for k, v in enumerate(ins)]
            i, cs = ins[0], ins[1:1 + n_carry]
            ks = ins[1 + n_carry:1 + n_carry + n_consts]
            xs_in = ins[1 + n_carry + n_consts + len(extra):]
            if not masked:
                return batch_inline(body, ins, [None] + cd + kdims + xdims)
            st, sp, ln = ins[1 + n_carry + n_consts:1 + n_carry + n_consts + 3]
            idx = _ew.add(st, _ew.multiply(i, sp))
            active = _ew.lt_p.bind(i, ln)
            pairs = batch_inline(body, [idx] + cs + ks + xs_in, [i_dim] + cd + kdims + xdims)
            new = [_choose(active, o, do, c, 0) for (o, do), c in zip(pairs[:n_carry], cs)]
            return new + pairs[n_carry:]
        return fn

    def build(cd, cavals, want=None, trial=False):
        in_avals = [_INDEX] + [batched_aval(a, d) for a, d in zip(cavals, cd)] + k_avals + xavals
        undef = _undefined(carry, cavals) if trial else set()
        hints = [v.hint for v in body.inputs[:1 + n_carry + n_consts]] + ["start", "step", "trips"][
            :len(extra)] + [v.hint for v in body.inputs[1 + n_carry + n_consts:]]
        dtypes = [a.dtype for a in cavals] + [None] * n_ys
        return build_region(in_avals, hints, body_fn(cd, undef), want, body.name, dtypes)

    def trial(cd, cavals):
        g, od = build(cd, cavals, trial=True)
        return od[:n_carry], [unbatched_aval(o.aval, d) for o, d in zip(g.outputs[:n_carry], od)], False

    cdims, cavals = _fixpoint(trial, carry, cdims, first_guess, batch_all=masked)
    _, od = build(cdims, cavals)
    want = cdims + _want_ys(od[n_carry:])
    g, od = build(cdims, cavals, want)
    init = [_carry_init(c, d, w, a) for c, d, w, a in zip(carry, dims[3:3 + n_carry], cdims, cavals)]
    outs = for_range_p.bind(*bounds, *init, *consts, *extra, *xs, body=g, n_carry=n_carry,
                            n_consts=n_consts + len(extra), n_xs=n_xs, reverse=reverse)
    return tuple(outs), tuple(cdims + _stack_dims(od[n_carry:n_carry + n_ys]))


for_range_p.batch = _for


# -- while_loop ------------------------------------------------------------------------------------

def _while(args, dims, *, cond, body, n_carry, n_consts, max_trips):
    carry, cdims = list(args[:n_carry]), list(dims[:n_carry])
    consts = [to_front(c, d) for c, d in zip(args[n_carry:], dims[n_carry:])]
    kdims = [None if d is None else 0 for d in dims[n_carry:]]
    k_avals = [aval_of(c) for c in consts]
    first_guess = [o.aval for o in body.outputs[:n_carry]]
    n_ys = len(body.outputs) - n_carry
    state = {}

    def c_avals(cd, cavals):
        return [batched_aval(a, d) for a, d in zip(cavals, cd)]

    def trial(cd, cavals):
        undef = _undefined(carry, cavals)
        undef = [k in undef for k in range(n_carry)] + [False] * len(consts)
        _, pd = region(cond, c_avals(cd, cavals) + k_avals, cd + kdims, undef=undef)
        g, od = region(body, c_avals(cd, cavals) + k_avals, cd + kdims, undef=undef)
        state["pred_batched"] = pd[0] is not None
        return od[:n_carry], [unbatched_aval(o.aval, d) for o, d in zip(g.outputs[:n_carry], od)], \
            pd[0] is not None

    cdims, cavals = _fixpoint(trial, carry, cdims, first_guess)
    avals = c_avals(cdims, cavals) + k_avals
    init = [_carry_init(c, d, w, a) for c, d, w, a in zip(carry, dims[:n_carry], cdims, cavals)]
    _, od = region(body, avals, cdims + kdims)
    ys_want = _want_ys(od[n_carry:])
    if not state["pred_batched"]:
        cg, _ = region(cond, avals, cdims + kdims)
        bg, od = region(body, avals, cdims + kdims, want=cdims + ys_want,
                        dtypes=[a.dtype for a in cavals] + [None] * n_ys)
        outs = while_loop_p.bind(*init, *consts, cond=cg, body=bg, n_carry=n_carry, n_consts=n_consts,
                                 max_trips=max_trips)
        return tuple(outs), tuple(cdims + [None] + _stack_dims(od[n_carry:]))
    return _masked_while(cond, body, init, consts, kdims, avals, ys_want, n_carry, max_trips, n_ys)


def _masked_while(cond, body, init, consts, kdims, avals, ys_want, n_carry, max_trips, n_ys):
    """Run while any example is active; finished examples keep their carries."""
    n = axis_size()
    zeros = [0] * n_carry
    (p0, d0), = batch_inline(cond, init + consts, zeros + kdims)
    active0 = batched(p0, d0)
    trips0 = emit(_sh.broadcast_to_p, np.zeros((), _I64), shape=(n,))
    flags = [AbstractValue(np.dtype(bool), (n,)), AbstractValue(_I64, (n,))]
    in_avals = avals[:n_carry] + flags + avals[n_carry:]
    hints = [v.hint for v in body.inputs[:n_carry]] + ["active", "trips"] + \
        [v.hint for v in body.inputs[n_carry:]]

    def cond_fn(ins):
        return [(_red.reduce_any_p.bind(ins[n_carry], axes=None, keepdims=False), None)]

    def body_fn(ins):
        cs, (active, trips), ks = ins[:n_carry], ins[n_carry:n_carry + 2], ins[n_carry + 2:]
        pairs = batch_inline(body, cs + ks, zeros + kdims)
        new = [_choose(active, o, do, c, 0) for (o, do), c in zip(pairs[:n_carry], cs)]
        new = [(batched(v, d), 0) for v, d in new]
        trips = _ew.add(trips, _ew.convert(active, _I64))
        (p, dp), = batch_inline(cond, [v for v, _ in new] + ks, zeros + kdims)
        active = _ew.and_p.bind(active, to_front(p, dp))
        return new + [(active, 0), (trips, 0)] + pairs[n_carry:]

    cg, _ = build_region(in_avals, hints, cond_fn, name=cond.name)
    bg, od = build_region(in_avals, hints, body_fn, want=[0] * (n_carry + 2) + ys_want, name=body.name)
    outs = while_loop_p.bind(*init, active0, trips0, *consts, cond=cg, body=bg, n_carry=n_carry + 2,
                             n_consts=len(consts), max_trips=max_trips)
    # outputs: carries, active, per-example trips, the loop's own trip count, stacks
    results = list(outs[:n_carry]) + [outs[n_carry + 1]] + list(outs[n_carry + 3:])
    return tuple(results), tuple([0] * n_carry + [0] + _stack_dims(od[n_carry + 2:]))


while_loop_p.batch = _while
