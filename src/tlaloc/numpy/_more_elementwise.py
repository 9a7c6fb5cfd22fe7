"""Elementwise and cumulative composites: arccosh, signbit, copysign, nextafter,
nancumsum, nancumprod, cumulative_sum, cumulative_prod.

Values follow NumPy at 0, ±inf and NaN except where a docstring says otherwise.
"""
from __future__ import annotations

import math

import numpy as _np

from ..errors import NoRuleError


def _tnp():
    from .. import numpy as tnp
    return tnp


def arccosh(x):
    """Inverse hyperbolic cosine, ``log1p(t + sqrt(t (x + 1)))`` with ``t = x - 1``
    (accurate near 1), and ``log(x) + log 2`` above 1e8 (no overflow). NaN below 1.
    Derivative ``1/sqrt(x² - 1)``, +inf at 1."""
    tnp = _tnp()
    if not tnp._is_symbolic(x) and _np.iscomplexobj(x):
        return _np.arccosh(x)                         # complex: NumPy's kernel, eagerly
    big = tnp.greater(x, 1e8)
    xs = tnp.where(big, 2.0, x)                       # the branch not taken stays finite
    t = tnp.subtract(xs, 1.0)
    small = tnp.log1p(tnp.add(t, tnp.sqrt(tnp.multiply(t, tnp.add(xs, 1.0)))))
    xb = tnp.where(big, x, 2.0)
    out = tnp.where(big, tnp.add(tnp.log(xb), math.log(2.0)), small)
    return tnp.where(tnp.less(x, 1.0), _np.nan, out)     # below 1 (the form above can round to -inf)


def signbit(x):
    """True where the sign bit of ``x`` is set: negative numbers and -0.0 (bool,
    shape of x). Symbolically the sign of a NaN is not visible (False); eagerly
    it is NumPy's ``signbit``."""
    tnp = _tnp()
    if not tnp._is_symbolic(x):
        return _np.signbit(x)
    dt = x.aval.dtype
    if dt is not None and dt.kind in "biu":
        return tnp.less(x, 0)
    neg_zero = tnp.logical_and(tnp.equal(x, 0), tnp.less(tnp.divide(1.0, tnp.where(tnp.equal(x, 0), x, 1.0)), 0))
    return tnp.logical_or(tnp.less(x, 0), neg_zero)


def copysign(x1, x2):
    """``|x1|`` with the sign of ``x2`` (-0.0 counts as negative). Derivative in
    ``x1``: ``sign(x1)·(±1)`` (0 at x1 = 0); none in ``x2``."""
    tnp = _tnp()
    a = tnp.add(tnp.abs(x1), tnp.zeros_like(x2))        # the dtype of both (a Python-scalar x1 adopts x2's)
    return tnp.where(signbit(x2), tnp.negative(a), a)


def nextafter(x1, x2):
    """The next representable float after ``x1`` towards ``x2`` (NumPy). Eager only:
    it reads the bits, which tlaloc's primitives do not expose.

    Raises:
      NoRuleError: called on symbolic values (inside grad/jvp/vmap/jit)."""
    tnp = _tnp()
    if tnp._is_symbolic(x1) or tnp._is_symbolic(x2):
        raise NoRuleError("nextafter: no symbolic form (it reads the bits of a float); compute it outside the "
                          "transformed function, or use x + eps")
    return _np.nextafter(x1, x2)


def nancumsum(a, axis=None, dtype=None):
    """Cumulative sum with NaN counted as 0 (``numpy.nancumsum``)."""
    tnp = _tnp()
    return tnp.cumsum(tnp.where(tnp.isnan(a), 0.0, a), axis=axis, dtype=dtype)


def nancumprod(a, axis=None, dtype=None):
    """Cumulative product with NaN counted as 1 (``numpy.nancumprod``)."""
    tnp = _tnp()
    return tnp.cumprod(tnp.where(tnp.isnan(a), 1.0, a), axis=axis, dtype=dtype)


def _cumulative(op, x, axis, dtype, include_initial, initial):
    tnp = _tnp()
    r = tnp.ndim(x)
    if axis is None:
        if r > 1:
            raise ValueError(f"cumulative_{op}: axis is required for an array of rank {r} (rank 0/1 default to 0)")
        axis = 0
    if r == 0:
        x, r = tnp.reshape(x, (1,)), 1
    axis = int(axis) % r
    out = (tnp.cumsum if op == "sum" else tnp.cumprod)(x, axis=axis, dtype=dtype)
    if include_initial:
        shape = list(tnp.shape(out))
        shape[axis] = 1
        first = tnp.full(tuple(shape), initial, dtype=out.dtype if not tnp._is_symbolic(out) else out.aval.dtype)
        out = tnp.concatenate([first, out], axis=axis)
    return out


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Array API ``cumulative_sum``: running sums along ``axis`` (required above
    rank 1), with a leading 0 when ``include_initial``."""
    return _cumulative("sum", x, axis, dtype, include_initial, 0)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """Array API ``cumulative_prod``: running products, a leading 1 when ``include_initial``."""
    return _cumulative("prod", x, axis, dtype, include_initial, 1)
