"""Specialising structured control flow: ``cond``, ``for_range``, ``while_loop``.

* ``cond`` on a constant predicate inlines the branch it picks. Otherwise
  both branches are specialised with the constant operands folded in; each
  output gets the type both branches agree on (a Python scalar adopts the
  other side's dtype; ``UNDEF`` becomes zeros of the other side's type).
* Loops iterate their carry avals to a fixed point: the body is specialised
  with the carry avals, and each carry joins its start with what the body
  returns (a Python-scalar start adopts the body's dtype). A ``for_range``
  whose carry changes shape in the first trip (``acc = 0.0`` then
  ``acc = acc + row``) with a static trip count peels that trip; other shape
  changes are refused.
* A ``for_range`` whose bounds are constants has a static trip count, which
  becomes the leading dim of its ``ys`` stacks. Without one, the stacks take
  the length of the ``xs`` they iterate over, or are refused.
* A ``while_loop`` with ``ys`` (the stacks a reverse sweep keeps) has stacks of
  ``max_trips`` rows. Without ``max_trips``, the capacity set by ``while_capacity``
  (``tl.jit`` sets it, and grows it when a run fills it; ``GrowingBound``) or, where
  none is set, a refusal.
"""
from __future__ import annotations

import contextlib
import contextvars

import numpy as np

from .. import dtypes as _dt
from ..errors import NoRuleError, ShapeError, TlalocError
from .aval import AbstractValue
from .builder import Builder, Value, current_builder
from .control import UNDEF, GrowingBound, _scalar_pred, cond_p, for_range_p, undef_literal, while_loop_p
from .graph import Node, Var
from .specialize import Static, aval, coerce, emit, is_static, register, run

_MAX_ROUNDS = 8
_CAPACITY = contextvars.ContextVar("while_capacity", default=None)
WHILE_NEEDS_BOUND = ("reverse-mode while loop needs a bound: use tl.while_loop(..., max_trips=N) "
                     "or a for over range with a static bound")


@contextlib.contextmanager
def while_capacity(rows):
    """Within: a reverse-mode ``while`` without ``max_trips`` keeps ``rows`` trips of
    residuals (``GrowingBound(rows)``); ``None`` refuses it (``WHILE_NEEDS_BOUND``)."""
    token = _CAPACITY.set(rows)
    try:
        yield
    finally:
        _CAPACITY.reset(token)


# -- regions ----------------------------------------------------------------------------

class _Region:
    """A region being specialised: its builder and its (uncoerced) outputs."""

    def __init__(self, graph, specs, name=None):
        self.graph = graph
        self.b = Builder(name=name or graph.name)
        with self.b.active():
            ins = [s.value if isinstance(s, Static) else self.b.new_input(s, v.hint)
                   for v, s in zip(graph.inputs, specs)]
            self.outs = run(graph, ins)

    def out_avals(self):
        return [aval(o) for o in self.outs]

    def finish(self, targets, what):
        with self.b.active():
            if all(t.is_concrete for t in targets):
                outs = [coerce(o, t, what(k)) for k, (o, t) in enumerate(zip(self.outs, targets))]
            else:       # a round of a loop's fixed point: only the avals matter
                outs = [undef_literal() if o is UNDEF else o for o in self.outs]
            return self.b.finish(outs, self.graph.name)


def _spec_of(x):
    """A region input spec for operand ``x``: a constant is folded in."""
    return Static(x) if is_static(x) or x is UNDEF else x.aval


def _add_node(prim, ins, out_avals, params, hints=None):
    b = current_builder()
    outs = tuple(Var(a, (hints[k] if hints else None)) for k, a in enumerate(out_avals))
    b.add_node(Node(prim, tuple(b.atom(x) for x in ins), outs, params, b.loc))
    return tuple(Value(o, b) for o in outs)


def _hint(graph, k):
    outs = graph.outputs
    v = outs[k] if k < len(outs) else None
    return getattr(v, "hint", None)


# -- joining avals ------------------------------------------------------------------------

def _same(a, b) -> bool:
    """Aval equality that does not let NumPy read ``None`` as float64."""
    if a is None or b is None:
        return a is b
    return ((a.dtype is None) == (b.dtype is None) and (a.dtype is None or a.dtype == b.dtype)
            and a.shape == b.shape and a.weak == b.weak)


def _join_dtype(a: AbstractValue, b: AbstractValue, what: str):
    if a.dtype is None or b.dtype is None:
        return a.dtype if b.dtype is None else b.dtype
    if a.dtype == b.dtype:
        return a.dtype
    if a.weak and b.weak:
        return np.result_type(a.dtype, b.dtype)
    if a.weak:
        return b.dtype
    if b.weak:
        return a.dtype
    _dt.check_float_mix(what, {"one path": a.dtype, "the other path": b.dtype})
    return np.result_type(a.dtype, b.dtype)


def _join(a, b, what):
    """Join the avals of two paths; returns ``(aval, shape_changed)``."""
    if a is None or (a.shape is None and a.dtype is None):
        return b, False
    if b is None or (b.shape is None and b.dtype is None):
        return a, False
    dt = _join_dtype(a, b, what)
    weak = a.weak and b.weak
    if a.shape is None or b.shape is None:
        return AbstractValue(dt, None, weak=weak), False
    if tuple(a.shape) == tuple(b.shape):
        return AbstractValue(dt, tuple(a.shape), weak=weak), False
    return AbstractValue(dt, tuple(b.shape), weak=weak), True


def _settle(av: AbstractValue, start, what):
    """The carry avals after the fixed point. A carry that is a Python scalar on every
    path (a counter ``n = n + 1.0``) stays weak, as in the interpreter: after the loop
    it adopts the dtype of the arrays it meets (``s + n`` is float32 for float32 ``s``)."""
    if av is None:
        raise TlalocError(f"{what} is never assigned a value")
    if av.dtype is None and is_static(start):
        return av.with_(dtype=np.asarray(start).dtype, weak=False)
    return av


# -- cond --------------------------------------------------------------------------------

@register("cond")
def _cond(pred, *ops, true_branch, false_branch):
    if is_static(pred):
        branch = true_branch if _scalar_pred(pred, "if") else false_branch
        return tuple(run(branch, list(ops)))
    if pred.aval.shape not in (None, ()):
        raise ShapeError(f"if: the condition must be a scalar, got an array of shape {tuple(pred.aval.shape)}; "
                         f"reduce it (.any()/.all()) or use tnp.where for elementwise choice")
    specs = [_spec_of(x) for x in ops]
    regions = [_Region(true_branch, specs), _Region(false_branch, specs)]
    ta, fa = regions[0].out_avals(), regions[1].out_avals()
    targets, keep = [], []
    for k, (a, b) in enumerate(zip(ta, fa)):
        what = f"`{_hint(true_branch, k) or f'output {k}'}` (assigned in an if on an array)"
        if a is None and b is None:
            keep.append(False)
            continue
        j, changed = _join(a, b, what)
        if changed:
            raise ShapeError(f"{what} has shape {tuple(a.shape)} in one branch and {tuple(b.shape)} in the "
                             f"other; compiled code needs one shape (e.g. use np.zeros_like(...) instead of 0.0)")
        if j.dtype is None:
            vals = [o for o in (regions[0].outs[k], regions[1].outs[k]) if is_static(o)]
            j = j.with_(dtype=np.result_type(*vals) if vals else None)
        keep.append(True)
        targets.append(j)          # weak when every path gives a Python scalar (see ``_settle``)
    for r in regions:
        r.outs = [o for o, kk in zip(r.outs, keep) if kk]
    graphs = [r.finish(targets, lambda k: f"output {k} of an if") for r in regions]
    operands = [x for x in ops if not (is_static(x) or x is UNDEF)]
    outs = iter(_add_node(cond_p, [pred] + operands, targets,
                          {"true_branch": graphs[0], "false_branch": graphs[1]}))
    return tuple(next(outs) if kk else UNDEF for kk in keep)


# -- loops --------------------------------------------------------------------------------

def _slice_aval(x):
    a = x.aval if type(x) is Value else AbstractValue(np.asarray(x).dtype, np.shape(x))
    if not a.shape:
        raise ShapeError("a for loop over stacked inputs needs arrays with a leading axis")
    return AbstractValue(a.dtype, tuple(a.shape[1:]), weak=a.weak)      # a row of a stack of Python scalars


def _stacked(y: AbstractValue, n) -> AbstractValue:
    """The aval of a loop's stack of ``y`` (``n`` rows). A stack of Python scalars (a
    residual like ``i + 1``) stays weak, so a backward sweep reading its rows computes
    ``g * (i + 1)`` in ``g``'s dtype, as the interpreter does with the Python int."""
    n = n if n is None else int(n)          # a GrowingBound is a plain size in a shape
    return AbstractValue(y.dtype, (n,) + tuple(y.shape), weak=y.weak and not y.shape)


def _stack_row(y: AbstractValue) -> AbstractValue:
    return y.with_(weak=y.weak and not y.shape)


def _carry_start(x):
    """The aval a carry starts with; a Python scalar is weak (it adopts the body's dtype)."""
    if x is UNDEF:
        return None
    if is_static(x):
        weak = isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)
        return AbstractValue(np.asarray(x).dtype, np.shape(x), weak=weak)
    return x.aval


def _fixed_point(body, lead_specs, starts, const_specs, x_specs, n_carry, what, on_change):
    """Iterate the carry avals; returns (region, carry avals).

    ``on_change(k, before, after)`` is called when carry ``k`` changes shape;
    it returns True to accept the change (the caller peels) or raises.
    """
    avals = [_carry_start(x) for x in starts]
    for _ in range(_MAX_ROUNDS):
        specs = lead_specs + [a if a is not None else AbstractValue() for a in avals] + const_specs + x_specs
        region = _Region(body, specs)
        outs = region.out_avals()[:n_carry]
        new = []
        for k, (a, o) in enumerate(zip(avals, outs)):
            j, changed = _join(a, o, what(k))
            if changed:
                on_change(k, a, o)
                return None, None
            new.append(j)
        if all(_same(x, y) for x, y in zip(new, avals)):
            break
        avals = new
    else:
        raise TlalocError(f"{what(0)}: the loop's variable types did not settle after {_MAX_ROUNDS} rounds")
    settled = [_settle(a, s, what(k)) for k, (a, s) in enumerate(zip(avals, starts))]
    if not all(_same(x, y) for x, y in zip(settled, avals)):
        specs = lead_specs + settled + const_specs + x_specs
        region = _Region(body, specs)
    return region, settled


class _Peel(Exception):
    pass


@register("for_range")
def _for_range(start, stop, step, *ops, body, n_carry, n_consts, n_xs, reverse):
    carry0 = list(ops[:n_carry])
    consts = list(ops[n_carry:n_carry + n_consts])
    xs = list(ops[n_carry + n_consts:])
    static = all(is_static(v) for v in (start, stop, step))
    trips = len(range(int(start), int(stop), int(step))) if static else None
    names = [_hint(body, k) for k in range(n_carry)]

    def what(k):
        return f"loop variable `{names[k] or k}`" if k < len(names) else "a loop variable"

    def on_change(k, before, after):
        if trips:
            raise _Peel()
        raise ShapeError(f"{what(k)} changes shape from {tuple(before.shape)} to {tuple(after.shape)} in the "
                         f"loop; compiled loops need one shape (start it with its final shape, e.g. "
                         f"np.zeros_like(...))")

    index = AbstractValue(np.dtype(np.int64), (), weak=True)     # a Python int, as in the interpreter
    const_specs = [_spec_of(c) for c in consts]
    x_specs = [_slice_aval(x) for x in xs]
    if trips == 0:
        # no trip runs: the carries come out as they went in, the stacks are empty
        if len(body.outputs) == n_carry:
            return tuple(carry0)
        try:
            first = _Region(body, [index] + [a or AbstractValue() for a in map(_carry_start, carry0)]
                            + const_specs + x_specs)
            ys = [(tuple(y.shape), y.dtype) for y in first.out_avals()[n_carry:]]
        except TlalocError:        # the body cannot even be typed on empty inputs: nothing reads the rows
            ys = [((), np.dtype(np.float64))] * (len(body.outputs) - n_carry)
        return tuple(carry0) + tuple(np.zeros((0,) + s, d) for s, d in ys)
    try:
        region, avals = _fixed_point(body, [index], carry0, const_specs, x_specs, n_carry, what, on_change)
    except _Peel:
        return _peel_first_trip(start, stop, step, carry0, consts, xs, body, n_carry, trips, reverse)
    ys_avals = region.out_avals()[n_carry:]
    bound = trips if static else min((np.shape(x)[0] if is_static(x) else x.aval.shape[0] for x in xs),
                                     default=None)
    if ys_avals and bound is None:
        raise NoRuleError("a for loop whose trip count is only known at run time cannot stack per-iteration "
                          "values in compiled code; " + WHILE_NEEDS_BOUND)
    targets = [a for a in avals]
    for k, y in enumerate(ys_avals):
        if y is None or y.dtype is None:
            raise TlalocError(f"a value stacked by the loop (output {n_carry + k}) has no type")
        if y.shape is None:
            raise NoRuleError("a value that the loop keeps from each trip changes shape from one trip to the "
                              "next (e.g. x[:i + 1]), so a stack of them has no shape; write it with a fixed "
                              "shape (np.where(np.arange(n) <= i, x, 0))")
        targets.append(_stack_row(y))
    graph = region.finish(targets, lambda k: what(k) if k < n_carry else f"stacked value {k - n_carry}")
    starts = [coerce(x, a, what(k)) for k, (x, a) in enumerate(zip(carry0, avals))]
    vconsts = [c for c in consts if not (is_static(c) or c is UNDEF)]
    out_avals = avals + [_stacked(y, bound) for y in targets[n_carry:]]
    params = {"body": graph, "n_carry": n_carry, "n_consts": len(vconsts), "n_xs": n_xs, "reverse": reverse}
    return _add_node(for_range_p, [start, stop, step] + starts + vconsts + xs, out_avals, params,
                     hints=names + [None] * len(ys_avals))


def _peel_first_trip(start, stop, step, carry0, consts, xs, body, n_carry, trips, reverse):
    """Run the first executed trip inline, then loop over the rest (exact: the
    carry enters the loop with the shape the body gives it)."""
    start, stop, step = int(start), int(stop), int(step)
    rng = range(start, stop, step)
    k0 = trips - 1 if reverse else 0
    x0 = [emit("getitem", x, spec=(("i", k0),)) for x in xs]
    first = run(body, [np.int64(rng[k0])] + carry0 + consts + x0)
    carry1, ys0 = first[:n_carry], first[n_carry:]
    if reverse:
        rest_rng = rng[:-1]
        rest_xs = [emit("getitem", x, spec=(("s", None, trips - 1, None),)) for x in xs]
    else:
        rest_rng = rng[1:]
        rest_xs = [emit("getitem", x, spec=(("s", 1, None, None),)) for x in xs]
    rest_stop = rest_rng.stop if len(rest_rng) else rest_rng.start
    rest = emit("for_range", np.int64(rest_rng.start), np.int64(rest_stop), np.int64(step),
                *carry1, *consts, *rest_xs, body=body, n_carry=n_carry, n_consts=len(consts),
                n_xs=len(xs), reverse=reverse)
    carry, stacks = list(rest[:n_carry]), list(rest[n_carry:])
    for y, s in zip(ys0, stacks):
        if aval(y).shape != aval(s).shape[1:]:
            raise ShapeError(f"a loop variable starts with shape {aval(carry0[0]).shape if carry0 else ()} and "
                             f"changes shape in the first trip, and the derivative keeps a value of each "
                             f"trip; compiled code needs one shape: start the variable with its final shape "
                             f"(e.g. np.zeros_like(...) instead of 0.0)")
        one = emit("expand_dims", y, axis=(0,))
        stacked = emit("concatenate", s, one, axis=0) if reverse else emit("concatenate", one, s, axis=0)
        carry.append(stacked)
    return tuple(carry)


@register("while_loop")
def _while_loop(*ops, cond, body, n_carry, n_consts, max_trips):
    carry0 = list(ops[:n_carry])
    consts = list(ops[n_carry:])
    names = [_hint(body, k) for k in range(n_carry)]

    def what(k):
        return f"loop variable `{names[k] or k}`" if k < len(names) else "a loop variable"

    def on_change(k, before, after):
        raise ShapeError(f"{what(k)} changes shape from {tuple(before.shape)} to {tuple(after.shape)} in a "
                         f"while loop; compiled loops need one shape (start it with its final shape, e.g. "
                         f"np.zeros_like(...))")

    const_specs = [_spec_of(c) for c in consts]
    region, avals = _fixed_point(body, [], carry0, const_specs, [], n_carry, what, on_change)
    ys_avals = region.out_avals()[n_carry:]
    if ys_avals and max_trips is None:
        if _CAPACITY.get() is None:
            raise NoRuleError(WHILE_NEEDS_BOUND)
        max_trips = GrowingBound(_CAPACITY.get())
    targets = list(avals) + [_stack_row(y) for y in ys_avals]
    body_g = region.finish(targets, lambda k: what(k) if k < n_carry else f"stacked value {k - n_carry}")
    cond_r = _Region(cond, list(avals) + const_specs)
    with cond_r.b.active():
        p = cond_r.outs[0]
        pa = aval(p)
        if pa is None or (pa.shape not in (None, ()) ):
            raise ShapeError(f"while: the condition must be a scalar, got shape {None if pa is None else pa.shape}")
        if pa.dtype != np.dtype(bool):
            p = emit("not_equal", p, 0) if not is_static(p) else np.bool_(p)
        cond_g = cond_r.b.finish([p], cond.name)
    starts = [coerce(x, a, what(k)) for k, (x, a) in enumerate(zip(carry0, avals))]
    vconsts = [c for c in consts if not (is_static(c) or c is UNDEF)]
    # the cond region takes every const the body takes: rebuild both on the value consts only
    out_avals = list(avals) + [AbstractValue(np.dtype(np.int64), ())]
    out_avals += [_stacked(y, max_trips) for y in targets[n_carry:]]
    params = {"cond": cond_g, "body": body_g, "n_carry": n_carry, "n_consts": len(vconsts),
              "max_trips": max_trips}
    return _add_node(while_loop_p, starts + vconsts, out_avals, params,
                     hints=names + ["trips"] + [None] * len(ys_avals))


# -- custom-rule calls (tlaloc._ad.custom): the body, inline -----------------------------------------
# Compiled code has no custom node; the rule was used by the transforms that ran before compiling.

@register("custom_vjp_call", "custom_jvp_call", "custom_vjp_jvp_call")
def _custom_call(*ins, fun, n_args, n_closure, **_):
    return tuple(run(fun, list(ins[:n_args + n_closure[0]])))


@register("custom_vjp_rule")
def _custom_rule_half(*ins, body, **_):
    return tuple(run(body, list(ins)))
