"""Shape-generic helpers that derivative rules use to undo broadcasting.

Graphs built at definition time may not know ranks, so rules never compute
shapes themselves: they emit these primitives, which read the shape of a
``like`` operand at run time. With concrete shapes (``jit``) they lower to
``reduce``/``reshape``/``broadcast_in_dim`` or vanish.

* ``sum_to(x, like)``: sum ``x`` down to ``like``'s shape (the VJP of broadcasting).
* ``broadcast_like(x, like)``: broadcast ``x`` up to ``like``'s shape.

  Both also give a real floating ``x`` the real floating dtype of ``like`` where the
  two differ: NumPy promotes ``float32 * int64`` to float64, and a cotangent (a
  tangent) has its primal's dtype (as JAX's VJP of the implicit convert casts back),
  so ``sum_to(g, x)`` returns a float32 cotangent for a float32 ``x``. Complex and
  integer dtypes are kept as they are.
* ``reshape_like(x, like)``: reshape ``x`` to ``like``'s shape.
* ``expand_reduced(g, like, axes, keepdims)``: re-insert the reduced axes.
* ``cast_like(x, like)``: convert ``x`` to ``like``'s floating dtype.
* ``zeros_like(x)``.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from .._core.primitive import Primitive
from . import _eager
from ._rules import normalize_axes


def _shape_of_like(x, like):
    return like.shape


def float_cast(x_dtype, like_dtype):
    """``like_dtype`` where both are real floating dtypes of different widths, else None:
    the cast ``sum_to``/``broadcast_like`` make (``None`` dtypes are unknown: no cast)."""
    if x_dtype is None or like_dtype is None or x_dtype == like_dtype:
        return None
    return np.dtype(like_dtype) if _dt.is_float(x_dtype) and _dt.is_float(like_dtype) else None


def _like_dtype(x, like, **_):
    if x.weak or like.weak:
        return x.dtype
    if x.dtype is not None and _dt.is_float(x.dtype) and like.dtype is None:
        return None                       # a float x whose like's dtype is unknown: unknown
    return float_cast(x.dtype, like.dtype) or x.dtype


def _cast_to_like(x, like):
    ldt = getattr(like, "dtype", None)                          # a Python number like: no cast
    if ldt is None or ldt is x.dtype:                           # the common case, cheaply
        return x
    dt = float_cast(x.dtype, ldt)
    return x if dt is None else x.astype(dt)


def _sum_to_impl(x, like):
    if type(x) is not np.ndarray:
        if type(x) in (bool, int, float, complex):          # a Python number keeps its kind
            return _sum_to_shape(np.asarray(x), like)
        x = np.asarray(x)
    if type(like) is np.ndarray and x.shape == like.shape and x.dtype is like.dtype:
        return x                          # the common case at run time: nothing to do
    return _cast_to_like(_sum_to_shape(x, like), like)


def _sum_to_shape(x, like):
    shape = like.shape if type(like) is np.ndarray else np.shape(like)
    if x.shape == shape:                  # nothing was broadcast
        return x
    lead = x.ndim - len(shape)
    if lead > 0 and x.shape[lead:] == shape:  # only leading axes were added (a bias): no reshape
        out = np.add.reduce(x, axis=tuple(range(lead)))
        return out if type(out) is np.ndarray else np.asarray(out)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, d in enumerate(shape) if d == 1 and x.shape[i + lead] != 1)
    out = np.add.reduce(x, axis=axes, keepdims=True) if axes else x    # = x.sum(axes), same bits
    if lead:
        out = out.reshape(out.shape[lead:])
    return out.reshape(shape)


_SMALL = 4096      # elements: below this a filled copy is cheaper than np.broadcast_to's view


def _broadcast_like_impl(x, like):
    if type(x) is not np.ndarray:
        if type(x) in (bool, int, float, complex):          # a Python number keeps its kind
            return _broadcast_shape(np.asarray(x), like)
        x = np.asarray(x)
    return _broadcast_shape(_cast_to_like(x, like), like)


def _broadcast_shape(x, like):
    shape = like.shape if type(like) is np.ndarray else np.shape(like)
    if x.shape == shape:
        return x
    if x.ndim <= len(shape) and math.prod(shape) <= _SMALL:
        out = np.empty(shape, x.dtype)
        out[...] = x                      # raises, as broadcast_to does, where x does not broadcast
        return out
    return np.broadcast_to(x, shape)


def _reshape_like_impl(x, like):
    return np.reshape(x, np.shape(like))


def _cast_like_impl(x, like, *, arrays_only=False):
    if arrays_only and np.ndim(like) == 0:
        return x                          # a NumPy scalar target: `s += v` rebinds, NumPy promotes
    dt = np.asarray(like).dtype
    x = np.asarray(x)
    if not _dt.is_float(dt) or x.dtype == dt:
        return x
    return x.astype(dt)


def _expand_reduced_impl(g, like, *, axes, keepdims):
    g = np.asarray(g)
    if keepdims:
        return g
    like_shape = np.shape(like)
    if axes is None:
        return g.reshape((1,) * len(like_shape))
    ax = normalize_axes(axes, len(like_shape))
    shape = tuple(1 if i in ax else d for i, d in enumerate(like_shape))
    return g.reshape(shape)


def _expand_reduced_shape(g, like, *, axes, keepdims):
    if keepdims:
        return g.shape
    if like.shape is None:
        return None
    ax = normalize_axes(axes, len(like.shape))
    return tuple(1 if i in ax else d for i, d in enumerate(like.shape))


def _zeros_like_impl(x):
    if x is None:                 # UNDEF (a value no path assigned) has an UNDEF derivative
        return None
    if isinstance(x, list):       # a loop's per-trip residual stack; a carry may change shape on trip 1
        return [_zeros_like_impl(e) for e in x]
    return np.zeros_like(x)


sum_to_p = Primitive("sum_to", impl=_sum_to_impl, hlo="stablehlo.reduce", shape_rule=_shape_of_like,
                     dtype_rule=_like_dtype, nondiff_argnums=(1,))
broadcast_like_p = Primitive("broadcast_like", impl=_broadcast_like_impl, hlo="stablehlo.broadcast_in_dim",
                             shape_rule=_shape_of_like, dtype_rule=_like_dtype, nondiff_argnums=(1,))
reshape_like_p = Primitive("reshape_like", impl=_reshape_like_impl, hlo="stablehlo.reshape",
                           shape_rule=_shape_of_like, dtype_rule=lambda x, like: x.dtype, nondiff_argnums=(1,))
def _cast_like_dtype(x, like, *, arrays_only=False):
    if arrays_only:
        if like.shape == ():
            return x.dtype
        if like.shape is None:            # an array or a scalar: known once the rank is
            return x.dtype if x.dtype == like.dtype else None
    return like.dtype if _dt.is_float(like.dtype) else x.dtype


cast_like_p = Primitive("cast_like", impl=_cast_like_impl, hlo="stablehlo.convert",
                        shape_rule=lambda x, like, **_: x.shape, dtype_rule=_cast_like_dtype,
                        nondiff_argnums=(1,))
expand_reduced_p = Primitive("expand_reduced", impl=_expand_reduced_impl, hlo="stablehlo.reshape",
                             shape_rule=_expand_reduced_shape, dtype_rule=lambda g, like, **_: g.dtype,
                             nondiff_argnums=(1,))
sum_to_p.eager = _eager.like_shape(sum_to_p)
broadcast_like_p.eager = _eager.like_shape(broadcast_like_p)
zeros_like_p = Primitive("zeros_like", impl=_zeros_like_impl, hlo="stablehlo.constant",
                         shape_rule=lambda x: x.shape, dtype_rule=lambda x: x.dtype)


def sum_to(x, like):
    """Sum ``x`` over broadcast axes so that it has ``like``'s shape (and, where both are
    real floats, ``like``'s dtype)."""
    return sum_to_p.bind(x, like)


def broadcast_like(x, like):
    return broadcast_like_p.bind(x, like)


def reshape_like(x, like):
    return reshape_like_p.bind(x, like)


def cast_like(x, like, arrays_only=False):
    """``x`` in ``like``'s floating dtype. ``arrays_only``: only where ``like`` is an array of
    rank >= 1 (``z += v`` writes into an array z, casting to its dtype, and rebinds a NumPy
    scalar, which promotes)."""
    if arrays_only:
        return cast_like_p.bind(x, like, arrays_only=True)
    return cast_like_p.bind(x, like)


def expand_reduced(g, like, axes, keepdims):
    return expand_reduced_p.bind(g, like, axes=axes, keepdims=keepdims)


def zeros_like(x):
    return zeros_like_p.bind(x)


sum_to_p.vjp = lambda g, x, like, out: (broadcast_like(g, x), None)
sum_to_p.jvp = lambda t, x, like, out: None if t[0] is None else sum_to(t[0], like)
broadcast_like_p.vjp = lambda g, x, like, out: (sum_to(g, x), None)
broadcast_like_p.jvp = lambda t, x, like, out: None if t[0] is None else broadcast_like(t[0], like)
reshape_like_p.vjp = lambda g, x, like, out: (reshape_like(g, x), None)
reshape_like_p.jvp = lambda t, x, like, out: None if t[0] is None else reshape_like(t[0], like)
cast_like_p.vjp = lambda g, x, like, out, arrays_only=False: (cast_like(g, x), None)
cast_like_p.jvp = lambda t, x, like, out, arrays_only=False: (
    None if t[0] is None else cast_like(t[0], like, arrays_only))
expand_reduced_p.vjp = lambda g, x, like, out, axes, keepdims: (reshape_like(g, x), None)
expand_reduced_p.jvp = lambda t, x, like, out, axes, keepdims: (
    None if t[0] is None else expand_reduced(t[0], like, axes, keepdims))
zeros_like_p.vjp = lambda g, x, out: (None,)
zeros_like_p.jvp = lambda t, x, out: None
