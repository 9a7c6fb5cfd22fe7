"""``argsort``, the one sorting primitive, and the along-axis gather that applies
its permutation: ``take_along_axis`` with its adjoint ``add_along_axis``. ``sort``,
``searchsorted`` and the rest are composites over them (``tlaloc/numpy/_ordering.py``).

``take_along_axis(x, idx, axis)`` is NumPy's (``x`` and ``idx`` of one rank, the
other axes broadcast); ``add_along_axis(like, idx, g, axis)`` is its transpose:
zeros shaped like ``like`` with ``g`` added at ``idx`` along ``axis`` (repeated
indices accumulate), summed over the axes that ``take_along_axis`` broadcast.
Both are rank-polymorphic (graphs built before shapes are known); compiled code
lowers them through indexing at the concrete shapes.

``argsort(x, axis, descending)`` -> int64 indices of the same shape, stable:
equal elements keep their order (ascending and descending alike, as the Array
API's ``stable=True``). NaN sorts after every number ascending and before every
number descending (NumPy's order, reversed for descending, as JAX).

Derivatives: the indices are integers, with no derivative (``vjp`` gives no
cotangent, ``jvp`` no tangent). ``sort`` differentiates through the gather of
``x`` at these indices, so at a tie the cotangent of a sorted position goes to
the element that the stable order puts there (JAX's convention).
"""
from __future__ import annotations

import numpy as np

from .._core.primitive import Primitive


def _argsort_impl(x, *, axis, descending):
    x = np.asarray(x)
    if x.ndim == 0:
        return np.zeros((), np.int64)
    if not descending:
        return np.argsort(x, axis=axis, kind="stable").astype(np.int64)
    # stable descending: sort the reversed array ascending, reverse back, and map
    # the positions of the reversed array to positions of x
    n = x.shape[axis]
    rev = np.flip(x, axis)
    order = np.flip(np.argsort(rev, axis=axis, kind="stable"), axis)
    return (n - 1 - order).astype(np.int64)


def _argsort_shape(x, *, axis, descending):
    return x.shape


argsort_p = Primitive("argsort", impl=_argsort_impl, hlo="stablehlo.sort", shape_rule=_argsort_shape,
                      dtype_rule=lambda x, **_: np.dtype(np.int64))
argsort_p.vjp = lambda g, x, out, axis, descending: (None,)
argsort_p.jvp = lambda t, x, out, axis, descending: None


def argsort(x, axis=-1, descending=False):
    """Stable sorting permutation of ``x`` (any shape) along static ``axis``; int64."""
    return argsort_p.bind(x, axis=int(axis), descending=bool(descending))




# -- take_along_axis / add_along_axis -------------------------------------------------------

def _index_tuple(shape, idx, axis):
    """The advanced index that reads ``idx`` along ``axis`` of an array of ``shape``."""
    r = len(shape)
    out = []
    for i in range(r):
        if i == axis % r:
            out.append(idx)
        else:
            sh = [1] * r
            sh[i] = -1
            out.append(np.arange(shape[i]).reshape(sh))
    return tuple(out)


def _take_impl(x, idx, *, axis):
    return np.take_along_axis(np.asarray(x), np.asarray(idx), axis)


def _bshape(x, idx, axis):
    """Broadcast shape of a take_along_axis: idx's length on ``axis``."""
    r = len(x)
    a = axis % r
    out = []
    for i, (m, n) in enumerate(zip(x, idx)):
        if i == a:
            out.append(n)
        elif type(m) is int and type(n) is int:
            out.append(max(m, n) if 1 in (m, n) else m)
        else:
            out.append(m if n == 1 else n)
    return tuple(out)


def _take_shape(x, idx, *, axis):
    if x.shape is None or idx.shape is None:
        return None
    if len(x.shape) != len(idx.shape):
        from ..errors import ShapeError
        raise ShapeError(f"take_along_axis: indices must have the rank of arr ({len(x.shape)}), "
                         f"got {len(idx.shape)}")
    return _bshape(x.shape, idx.shape, axis)


take_along_axis_p = Primitive("take_along_axis", impl=_take_impl, hlo="stablehlo.gather",
                              shape_rule=_take_shape, dtype_rule=lambda x, i, **_: x.dtype)


def _add_impl(like, idx, g, *, axis):
    like, idx, g = np.asarray(like), np.asarray(idx), np.asarray(g)
    full = list(g.shape)
    full[axis % g.ndim] = like.shape[axis % g.ndim]
    out = np.zeros(full, g.dtype)
    np.add.at(out, _index_tuple(out.shape, np.broadcast_to(idx, g.shape), axis), g)
    extra = tuple(i for i, (o, m) in enumerate(zip(out.shape, like.shape)) if o != m)
    return out.sum(axis=extra, keepdims=True) if extra else out


add_along_axis_p = Primitive("add_along_axis", impl=_add_impl, hlo="stablehlo.scatter add",
                             shape_rule=lambda like, i, g, **_: like.shape,
                             dtype_rule=lambda like, i, g, **_: g.dtype)


def take_along_axis(x, idx, axis):
    """``numpy.take_along_axis(x, idx, axis)`` (static int axis)."""
    return take_along_axis_p.bind(x, idx, axis=int(axis))


def add_along_axis(like, idx, g, axis):
    """The transpose of ``take_along_axis``: see the module docstring."""
    return add_along_axis_p.bind(like, idx, g, axis=int(axis))


take_along_axis_p.vjp = lambda g, x, i, out, axis: (add_along_axis(x, i, g, axis), None)
take_along_axis_p.jvp = lambda t, x, i, out, axis: None if t[0] is None else take_along_axis(t[0], i, axis)
add_along_axis_p.vjp = lambda c, like, i, g, out, axis: (None, None, take_along_axis(c, i, axis))
add_along_axis_p.jvp = lambda t, like, i, g, out, axis: None if t[2] is None else add_along_axis(like, i, t[2], axis)

__all__ = ["argsort", "argsort_p", "take_along_axis", "take_along_axis_p", "add_along_axis", "add_along_axis_p",
           "index_tuple"]
index_tuple = _index_tuple
