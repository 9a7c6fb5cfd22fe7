"""Structured control flow primitives. Each holds closed regions (``Graph``s).

``cond(pred, *operands, true_branch, false_branch)``
    Runs one branch on ``operands``; both branches return the same number of
    values. ``pred`` must be a scalar.

``for_range(start, stop, step, *carry, *consts, *xs, body, n_carry, n_consts, n_xs, reverse)``
    A loop over ``range(start, stop, step)``. ``body(i, *carry, *consts, *x_k)``
    returns ``(*carry, *y_k)``; ``x_k`` is element ``k`` (the iteration count,
    not ``i``) of each stacked input, and the outputs are the final carry and
    one stack per ``y``. With ``reverse=True`` the iterations run last to first.

``while_loop(*carry, *consts, cond, body, n_carry, n_consts, max_trips)``
    ``cond(*carry, *consts) -> pred``; ``body(*carry, *consts) -> (*carry, *y)``.
    Outputs: ``(*carry, trip_count, *y stacks)``. ``max_trips`` bounds the trip
    count for compiled back ends (exceeding it is an error, never a silent stop).
    Without it, compiled code sizes the ``y`` stacks itself (``GrowingBound``).

Stacks are Python lists of per-iteration arrays in the eager interpreter and
the rendered code (no copies); compiled back ends use arrays with a leading
iteration axis.

``UNDEF`` marks a value that a path never assigns (a variable set in only one
branch); reading it is an error.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, TlalocError
from .aval import AbstractValue
from .graph import Graph, Literal
from .interpreter import eval_graph
from .primitive import Primitive


class _Undef:
    def __repr__(self):
        return "UNDEF"

    def __reduce__(self):
        return "UNDEF"


UNDEF = _Undef()


#: The start of the run-time error of a reverse-mode ``while`` that filled the residual
#: stacks ``tl.jit`` sized for it (``GrowingBound``); ``tl.jit`` catches it and runs again.
RESIDUALS_FULL = "while loop filled its residual stack"


class GrowingBound(int):
    """A ``max_trips`` that ``tl.jit`` chose for a reverse-mode ``while`` declared without
    one: the capacity (rows) of the stacks of residuals its forward sweep keeps.

    Compiled code stops at the capacity only to report ``RESIDUALS_FULL`` (never a
    silent stop); ``tl.jit`` then compiles again with twice the capacity and reruns
    (``tlaloc._jit.residuals``). StableHLO shapes are static, so growth happens on the
    host between runs, not inside one."""


def undef_literal() -> Literal:
    return Literal(None, AbstractValue())


def join_aval(a: AbstractValue, b: AbstractValue) -> AbstractValue:
    """The most precise aval that covers both ``a`` and ``b``.

    (dtypes are compared with explicit ``None`` checks: NumPy's ``dtype == None``
    is True for float64.)"""
    if a == b and (a.dtype is None) == (b.dtype is None):
        return a
    if a.dtype is None or b.dtype is None:
        dtype = None
    elif a.dtype == b.dtype:
        dtype = a.dtype
    elif a.weak:
        dtype = b.dtype
    elif b.weak:
        dtype = a.dtype
    else:
        dtype = None
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        shape = None
    else:
        shape = tuple(x if x == y else None for x, y in zip(a.shape, b.shape))
    names = a.names if a.names == b.names else None
    return AbstractValue(dtype, shape, names, weak=a.weak and b.weak)


def _scalar_pred(pred, what):
    p = np.asarray(pred)
    if p.shape != ():
        raise ShapeError(f"{what}: the condition must be a scalar, got an array of shape {p.shape}; "
                         f"reduce it (.any()/.all()) or use tnp.where for elementwise choice")
    return bool(p)


# -- cond --------------------------------------------------------------------------

def _cond_impl(pred, *ops, true_branch, false_branch):
    branch = true_branch if _scalar_pred(pred, "if") else false_branch
    return tuple(eval_graph(branch, *ops))


def _cond_shape(pred, *ops, true_branch, false_branch):
    return tuple(join_aval(a.aval, b.aval).shape for a, b in zip(true_branch.outputs, false_branch.outputs))


def _cond_dtype(pred, *ops, true_branch, false_branch):
    return tuple(join_aval(a.aval, b.aval).dtype for a, b in zip(true_branch.outputs, false_branch.outputs))


cond_p = Primitive("cond", impl=_cond_impl, hlo="stablehlo.case", multiple_results=True,
                   shape_rule=_cond_shape, dtype_rule=_cond_dtype)


# -- for_range ---------------------------------------------------------------------

def _for_impl(start, stop, step, *ops, body, n_carry, n_consts, n_xs, reverse):
    carry = list(ops[:n_carry])
    consts = ops[n_carry:n_carry + n_consts]
    xs = ops[n_carry + n_consts:]
    rng = range(int(start), int(stop), int(step))
    n_ys = len(body.outputs) - n_carry
    ys = [[None] * len(rng) for _ in range(n_ys)]
    order = range(len(rng) - 1, -1, -1) if reverse else range(len(rng))
    for k in order:
        outs = eval_graph(body, rng[k], *carry, *consts, *(x[k] for x in xs))
        carry = outs[:n_carry]
        for j in range(n_ys):
            ys[j][k] = outs[n_carry + j]
    return tuple(carry) + tuple(ys)


def _for_avals(start, stop, step, *ops, body, n_carry, **_):
    outs = [o.aval for o in body.outputs]
    carry = [join_aval(o, i) for o, i in zip(outs[:n_carry], ops[:n_carry])]
    ys = [AbstractValue(a.dtype, None if a.shape is None else (None,) + tuple(a.shape)) for a in outs[n_carry:]]
    return carry + ys


for_range_p = Primitive("for_range", impl=_for_impl, hlo="stablehlo.while", multiple_results=True,
                        shape_rule=lambda *a, **p: tuple(x.shape for x in _for_avals(*a, **p)),
                        dtype_rule=lambda *a, **p: tuple(x.dtype for x in _for_avals(*a, **p)))


# -- while_loop ------------------------------------------------------------------------

def _while_impl(*ops, cond, body, n_carry, n_consts, max_trips):
    carry = list(ops[:n_carry])
    consts = ops[n_carry:]
    n_ys = len(body.outputs) - n_carry
    ys = [[] for _ in range(n_ys)]
    trips = 0
    while _scalar_pred(eval_graph(cond, *carry, *consts)[0], "while"):
        if max_trips is not None and trips >= max_trips:
            raise TlalocError(f"while loop ran past its declared bound max_trips={max_trips}; "
                              f"raise the bound")
        outs = eval_graph(body, *carry, *consts)
        carry = outs[:n_carry]
        for j in range(n_ys):
            ys[j].append(outs[n_carry + j])
        trips += 1
    return tuple(carry) + (trips,) + tuple(ys)


def _while_avals(*ops, cond, body, n_carry, **_):
    outs = [o.aval for o in body.outputs]
    carry = [join_aval(o, i) for o, i in zip(outs[:n_carry], ops[:n_carry])]
    ys = [AbstractValue(a.dtype, None if a.shape is None else (None,) + tuple(a.shape)) for a in outs[n_carry:]]
    return carry + [AbstractValue(np.dtype(np.int64), ())] + ys


while_loop_p = Primitive("while_loop", impl=_while_impl, hlo="stablehlo.while", multiple_results=True,
                         shape_rule=lambda *a, **p: tuple(x.shape for x in _while_avals(*a, **p)),
                         dtype_rule=lambda *a, **p: tuple(x.dtype for x in _while_avals(*a, **p)))


def regions_of(node) -> list[Graph]:
    return [v for v in node.params.values() if isinstance(v, Graph)]


# -- stacks as arrays ------------------------------------------------------------------

stack_ys_p = Primitive("stack_ys", impl=lambda ys: np.stack(ys) if isinstance(ys, list) else np.asarray(ys),
                       hlo=None, shape_rule=lambda ys: ys.shape, dtype_rule=lambda ys: ys.dtype)
stack_ys_p.vjp = lambda g, ys, out: (g,)
stack_ys_p.jvp = lambda t, ys, out: t[0]
stack_ys_p.__doc__ = "A loop's stacked outputs (a list per iteration in eager mode) as one array."
