"""``tlaloc.numpy`` reductions: sum, prod, max/min, mean, var/std, arg-extrema, running sums and
products, any/all, and the stabilised logsumexp, softmax and log_softmax.

``axis`` is None (every axis), an int or a tuple of ints; ``keepdims`` keeps reduced axes
as size 1; a ``dtype`` converts before and after, as NumPy widens small integers.
"""
from __future__ import annotations

import builtins as _builtins

from .._prims import broadcasting as _bc
from .._prims import misc as _misc
from .._prims import reductions as _red
from .._prims import shape_ops as _sh
from . import add, astype, divide, exp, isfinite, log, multiply, ravel, sqrt, stop_gradient, subtract, where


def _axes(axis):
    return _red._axes_param(axis)


def sum(a, axis=None, keepdims=False, dtype=None):
    """Sum over ``axis``; ``dtype`` converts before and after (NumPy widens small integers)."""
    if dtype is not None:
        return astype(_red.reduce_sum(astype(a, dtype), _axes(axis), keepdims), dtype)
    return _red.reduce_sum(a, _axes(axis), keepdims)


def prod(a, axis=None, keepdims=False, dtype=None):
    """Product over ``axis``; ``dtype`` converts before and after (NumPy widens small integers)."""
    if dtype is not None:
        return astype(_red.reduce_prod(astype(a, dtype), _axes(axis), keepdims), dtype)
    return _red.reduce_prod(a, _axes(axis), keepdims)


def max(a, axis=None, keepdims=False):
    return _red.reduce_max(a, _axes(axis), keepdims)


def min(a, axis=None, keepdims=False):
    return _red.reduce_min(a, _axes(axis), keepdims)


amax, amin = max, min


def mean(a, axis=None, keepdims=False):
    return divide(sum(a, axis, keepdims), _misc.reduced_count(a, _axes(axis)))


def var(a, axis=None, keepdims=False, ddof=0, *, correction=None):
    """Variance over ``axis`` with ``ddof`` (NumPy) or ``correction`` (Array API) subtracted
    from the count."""
    ddof = correction if correction is not None else ddof
    m = mean(a, axis, keepdims=True)
    d = subtract(a, m)
    ss = sum(multiply(d, d), axis, keepdims)
    n = _misc.reduced_count(a, _axes(axis))
    return divide(ss, subtract(n, ddof) if ddof else n)


def std(a, axis=None, keepdims=False, ddof=0, *, correction=None):
    return sqrt(var(a, axis, keepdims, ddof, correction=correction))


def argmax(a, axis=None, keepdims=False):
    return _red.argmax_p.bind(a, axis=None if axis is None else int(axis), keepdims=_builtins.bool(keepdims))


def argmin(a, axis=None, keepdims=False):
    return _red.argmin_p.bind(a, axis=None if axis is None else int(axis), keepdims=_builtins.bool(keepdims))


def _cumulative(op, a, axis, dtype):
    """Running ``op`` (``_red.cumsum`` or ``_red.cumprod``) along ``axis`` (None: the flattened array)."""
    if dtype is not None:          # NumPy accumulates small integers wider: convert before and after
        return astype(_cumulative(op, astype(a, dtype), axis, None), dtype)
    if axis is None:
        return op(ravel(a), 0)
    return op(a, axis)


def cumsum(a, axis=None, dtype=None):
    """Running sums along ``axis`` (None: the flattened array); ``dtype`` converts first."""
    return _cumulative(_red.cumsum, a, axis, dtype)


def cumprod(a, axis=None, dtype=None):
    """Running products along ``axis`` (None: the flattened array); ``dtype`` converts first."""
    return _cumulative(_red.cumprod, a, axis, dtype)


def any(a, axis=None, keepdims=False):
    return _red.reduce_any_p.bind(a, axes=_axes(axis), keepdims=_builtins.bool(keepdims))


def all(a, axis=None, keepdims=False):
    return _red.reduce_all_p.bind(a, axes=_axes(axis), keepdims=_builtins.bool(keepdims))


def logsumexp(a, axis=None, keepdims=False):
    """log Σ exp(a), stabilised by the (gradient-stopped) maximum."""
    m = stop_gradient(max(a, axis, keepdims=True))
    m = where(isfinite(m), m, 0.0)
    out = add(log(sum(exp(subtract(a, m)), axis, keepdims=True)), m)
    return out if keepdims else _bc.reshape_like(out, sum(a, axis, keepdims=False)) if axis is not None \
        else _sh.reshape(out, ())


def softmax(x, axis=-1):
    """exp(x) / Σ exp(x) along ``axis``; shape of x."""
    m = stop_gradient(max(x, axis, keepdims=True))
    e_ = exp(subtract(x, m))
    return divide(e_, sum(e_, axis, keepdims=True))


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along ``axis``; shape of x."""
    m = stop_gradient(max(x, axis, keepdims=True))
    s = subtract(x, m)
    return subtract(s, log(sum(exp(s), axis, keepdims=True)))
