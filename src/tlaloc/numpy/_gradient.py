"""``numpy.gradient`` from slices (so it differentiates): second-order central differences
inside, first- or second-order one-sided differences at the ends (``edge_order``), with
scalar spacings, as NumPy computes them (NumPy's ``_function_base_impl.gradient``, uniform
spacing case). Coordinate arrays as spacings are refused by name.
"""
from __future__ import annotations

import numpy as _np

from ..errors import ShapeError


def gradient(f, *varargs, axis=None, edge_order=1):
    """The gradient of ``f`` along each axis (or ``axis``): one array per axis, a single array
    for one axis; float64 for integer input, ``f``'s float dtype otherwise (NumPy's results).

    Raises:
      ValueError: a spacing that is not a scalar, ``edge_order`` not 1 or 2, or an axis with
        fewer than ``edge_order + 1`` points.
    """
    from . import concatenate, ndim, shape
    rank = ndim(f)
    axes = list(range(rank)) if axis is None else ([axis] if isinstance(axis, int) else list(axis))
    axes = [a % rank for a in axes]
    if len(varargs) == 0:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1:
        spacings = list(varargs) * len(axes)
    else:
        spacings = list(varargs)
    if len(spacings) != len(axes):
        raise ValueError(f"gradient: {len(varargs)} spacings for {len(axes)} axes")
    if any(_np.ndim(h) != 0 for h in spacings):
        raise ValueError("gradient: coordinate arrays as spacings are not supported here; pass a scalar spacing")
    if edge_order not in (1, 2):
        raise ValueError(f"gradient: edge_order must be 1 or 2, got {edge_order!r}")
    out = []
    for ax, h in zip(axes, spacings):
        n = shape(f)[ax]
        if type(n) is not int:
            from ..errors import RankUnknownError
            raise RankUnknownError("gradient: the length of an axis is unknown at definition time")
        if n < edge_order + 1:
            raise ValueError(f"gradient: axis {ax} has {n} points; at least {edge_order + 1} are needed")

        def part(start, stop):
            index = [slice(None)] * rank
            index[ax] = slice(start, stop)
            return f[tuple(index)]

        interior = (part(2, None) - part(None, -2)) / (2.0 * h)
        if edge_order == 1:
            first = (part(1, 2) - part(0, 1)) / h
            last = (part(-1, None) - part(-2, -1)) / h
        else:
            first = (-1.5 * part(0, 1) + 2.0 * part(1, 2) - 0.5 * part(2, 3)) / h
            last = (0.5 * part(-3, -2) - 2.0 * part(-2, -1) + 1.5 * part(-1, None)) / h
        out.append(concatenate([first, interior, last], axis=ax))
    if any(o is None for o in out):
        raise ShapeError("gradient: an axis could not be differenced")
    return out[0] if len(out) == 1 else tuple(out)
