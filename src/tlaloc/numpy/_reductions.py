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
import numpy as _np

from ..errors import ArgumentError
from . import (add, astype, divide, exp, isfinite, log, maximum, minimum, multiply, ravel, sqrt,
               stop_gradient, subtract, where, _is_symbolic)

_where = where


def _axes(axis):
    return _red._axes_param(axis)


def _masked(op, a, where, fill, out=None):
    """``a`` with the elements outside ``where`` replaced by ``fill`` (NumPy's ``where=``: they
    take no part; the gradient sends them exactly zero)."""
    if out is not None:
        raise ArgumentError(f"{op}: out= is not supported (arrays are immutable here); use the returned value")
    if where is None or where is True:
        return a
    return _where(where, a, fill)


def _extreme_fill(a, largest):
    """The identity of max (``largest=False``: -inf or the dtype's least) or of min."""
    dt = _np.dtype(a.aval.dtype if _is_symbolic(a) else _np.asarray(a).dtype)
    if dt.kind == "b":
        return largest
    if dt.kind in "iu":
        info = _np.iinfo(dt)
        return info.max if largest else info.min
    return -_np.inf if not largest else _np.inf         # float, complex, and ml_dtypes' (kind "V")


def sum(a, axis=None, dtype=None, out=None, keepdims=False, *, initial=None, where=None):
    """Sum over ``axis``; ``dtype`` converts before and after (NumPy widens small integers).
    ``where``: a boolean mask (broadcast to ``a``) of the elements summed; ``initial``: added."""
    a = _masked("sum", a, where, 0, out)
    if dtype is not None:
        r = astype(_red.reduce_sum(astype(a, dtype), _axes(axis), keepdims), dtype)
    else:
        r = _red.reduce_sum(a, _axes(axis), keepdims)
    return r if initial is None else add(r, initial)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, *, initial=None, where=None):
    """Product over ``axis``; ``dtype`` converts before and after (NumPy widens small integers).
    ``where``: a boolean mask of the elements multiplied; ``initial``: a factor."""
    a = _masked("prod", a, where, 1, out)
    if dtype is not None:
        r = astype(_red.reduce_prod(astype(a, dtype), _axes(axis), keepdims), dtype)
    else:
        r = _red.reduce_prod(a, _axes(axis), keepdims)
    return r if initial is None else multiply(r, initial)


def _extremum(op, a, axis, keepdims, out, initial, where):
    largest = op == "min"
    if where is not None and where is not True and initial is None:
        raise ArgumentError(f"{op}: where= needs initial= (the value of a slice with nothing selected), "
                            f"as in NumPy; e.g. np.{op}(x, where=m, initial={'-' if op == 'max' else ''}np.inf)")
    fill = None if where is None or where is True else _extreme_fill(a, largest)
    a = _masked(op, a, where, fill, out)
    red = _red.reduce_min if largest else _red.reduce_max
    r = red(a, _axes(axis), keepdims)
    if initial is None:
        return r
    return (minimum if largest else maximum)(r, initial)


def max(a, axis=None, out=None, keepdims=False, *, initial=None, where=None):
    """Maximum over ``axis``; ``initial`` takes part as one more element, ``where`` (with
    ``initial``) masks the elements taking part. At a tie the cotangent is shared equally (JAX)."""
    return _extremum("max", a, axis, keepdims, out, initial, where)


def min(a, axis=None, out=None, keepdims=False, *, initial=None, where=None):
    """Minimum over ``axis``; ``initial`` and ``where`` as in ``max``."""
    return _extremum("min", a, axis, keepdims, out, initial, where)


amax, amin = max, min


def _where_count(a, axis, keepdims, where):
    """How many elements ``where`` selects per slice (NumPy's count for mean/var with ``where=``),
    in ``a``'s float dtype (float64 for integers)."""
    from . import ones_like
    dt = _np.dtype(a.aval.dtype if _is_symbolic(a) else _np.asarray(a).dtype)
    ones = ones_like(a, dtype=dt if dt.kind == "f" else _np.float64)
    return _red.reduce_sum(_where(where, ones, 0.0), _axes(axis), keepdims)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """Mean over ``axis``; ``where``: a boolean mask of the elements averaged (the count is the
    mask's). ``dtype`` converts first. Shape: the reduced shape."""
    if dtype is not None:
        a = astype(a, dtype)
    s = sum(a, axis, keepdims=keepdims, out=out, where=where)
    if where is None or where is True:
        return divide(s, _misc.reduced_count(a, _axes(axis)))
    return divide(s, _where_count(a, axis, keepdims, where))


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, correction=None):
    """Variance over ``axis`` with ``ddof`` (NumPy) or ``correction`` (Array API) subtracted
    from the count; ``where`` masks the elements taking part."""
    ddof = correction if correction is not None else ddof
    if dtype is not None:
        a = astype(a, dtype)
    m = mean(a, axis, keepdims=True, out=out, where=where)
    d = subtract(a, m)
    ss = sum(multiply(d, d), axis, keepdims=keepdims, where=where)
    n = _misc.reduced_count(a, _axes(axis)) if where is None or where is True else \
        _where_count(a, axis, keepdims, where)
    return divide(ss, subtract(n, ddof) if ddof else n)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, correction=None):
    return sqrt(var(a, axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, correction=correction, where=where))


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


def any(a, axis=None, out=None, keepdims=False, *, where=None):
    a = _masked("any", a, where, False, out)
    return _red.reduce_any_p.bind(a, axes=_axes(axis), keepdims=_builtins.bool(keepdims))


def all(a, axis=None, out=None, keepdims=False, *, where=None):
    a = _masked("all", a, where, True, out)
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
