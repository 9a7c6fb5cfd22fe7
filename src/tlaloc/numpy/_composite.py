"""NumPy names composed from other ``tlaloc.numpy`` functions (no primitives of
their own): log2, log10, exp2, hypot, sinc, isnan, isinf, logical_xor, trunc,
degrees/radians (rad2deg/deg2rad) and split.

Each follows NumPy's values, including at 0, ±inf and NaN; where the
composition rounds differently from NumPy's own kernel, the docstring says by
how much. Gradients come from the parts, with the undefined branch of a
``where`` made safe (no NaN where the true derivative is finite).
"""
from __future__ import annotations

import math

import numpy as _np

from ..errors import ShapeError
from . import (add, ceil, divide, equal, floor, isfinite, less, log, logical_and, logical_not,
               logical_or, maximum, multiply, not_equal, power, shape, sin, sqrt, where, _getitem)
from . import abs as _abs


def log2(x):
    """Base-2 logarithm, ``log(x) / log(2)`` as ``jax.numpy.log2``: within 2 ulp
    (float64; 4 in float32) of ``numpy.log2``, and not always exact at powers of 2 (``log2(2.0**29)`` is
    one ulp off 29); round it before using it as an integer. Shape: same as x."""
    return divide(log(x), math.log(2.0))


def log10(x):
    """Base-10 logarithm, ``log(x) / log(10)`` as ``jax.numpy.log10``: within
    2 ulp (float64; 4 in float32) of ``numpy.log10``, and not always exact at
    powers of 10. Shape: same as x."""
    return divide(log(x), math.log(10.0))


def exp2(x):
    """``2 ** x`` (exact at integers, as ``numpy.exp2``). Shape: same as x."""
    return power(2.0, x)


def isnan(x):
    """True where x is NaN (``x != x``). Shape: same as x."""
    return not_equal(x, x)


def isinf(x):
    """True where x is +inf or -inf. Shape: same as x."""
    return logical_and(logical_not(isfinite(x)), equal(x, x))


def logical_xor(x, y):
    """Elementwise exclusive or of the truth values of x and y (broadcast)."""
    return not_equal(not_equal(x, 0), not_equal(y, 0))


def trunc(x):
    """Round towards zero (``-0.5 -> -0.0``). Shape: same as x."""
    return where(less(x, 0), ceil(x), floor(x))


def hypot(x, y):
    """``sqrt(x**2 + y**2)`` without overflow or underflow: the larger magnitude
    is factored out, as ``numpy.hypot`` (within 2 ulp of it); inf if either is
    inf, even against NaN. The gradient at (0, 0) is 0."""
    ax, ay = _abs(x), _abs(y)
    m = maximum(ax, ay)
    safe = where(equal(m, 0), 1.0, m)
    r = multiply(m, sqrt(add(multiply(divide(ax, safe), divide(ax, safe)),
                             multiply(divide(ay, safe), divide(ay, safe)))))
    return where(logical_or(isinf(x), isinf(y)), _np.inf, r)


def sinc(x):
    """Normalised sinc, ``sin(pi x) / (pi x)`` with ``sinc(0) = 1`` (as
    ``numpy.sinc``); its gradient at 0 is 0."""
    zero = equal(x, 0)
    px = multiply(_np.pi, where(zero, 1.0, x))
    return where(zero, 1.0, divide(sin(px), px))


def rad2deg(x):
    """Radians to degrees, ``x * (180 / pi)`` (as NumPy)."""
    return multiply(x, 180.0 / _np.pi)


def deg2rad(x):
    """Degrees to radians, ``x * (pi / 180)`` (as NumPy)."""
    return multiply(x, _np.pi / 180.0)


degrees, radians = rad2deg, deg2rad


def split(ary, indices_or_sections, axis=0):
    """Split ``ary`` along ``axis`` into a list of arrays, as ``numpy.split``.

    Args:
      ary: array.
      indices_or_sections: an int ``n`` (n equal parts; the axis length must
        be known and divisible by n) or a sorted list of split points.
      axis: static int.
    Returns:
      list of arrays (views in eager mode).
    Raises:
      ShapeError: the axis does not divide into ``n`` equal parts, or its
        length is unknown at definition time when ``n`` is an int.
    """
    axis = int(axis)
    if isinstance(indices_or_sections, (int, _np.integer)):
        n = int(indices_or_sections)
        size = shape(ary)[axis]
        if type(size) is not int:
            raise ShapeError("split: the length of the split axis is unknown at definition time; pass "
                             "split points (a list) or annotate the argument's shape")
        if n <= 0 or size % n:
            raise ShapeError(f"split: an axis of length {size} does not divide into {n} equal parts")
        points = [size // n * i for i in range(1, n)]
    else:
        points = [int(p) for p in indices_or_sections]
    bounds = [None] + points + [None]
    lead = (slice(None),) * axis if axis >= 0 else (Ellipsis,)
    tail = () if axis >= 0 else (slice(None),) * (-axis - 1)
    return [_getitem(ary, lead + (slice(lo, hi),) + tail) for lo, hi in zip(bounds[:-1], bounds[1:])]
