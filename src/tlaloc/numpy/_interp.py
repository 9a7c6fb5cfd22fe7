"""``tnp.interp``: NumPy's one-dimensional piecewise-linear interpolation.

Values are NumPy's (its C kernel's formula and special cases): in ``[xp[j], xp[j + 1])`` the
result is ``slope * (x - xp[j]) + fp[j]`` with ``slope = (fp[j+1] - fp[j]) / (xp[j+1] - xp[j])``;
``fp[j]`` exactly at ``x == xp[j]`` and ``fp[-1]`` at ``x == xp[-1]``; ``left``/``right`` (default
``fp[0]``/``fp[-1]``) outside; NaN for a NaN ``x``; a NaN from an infinite slope retried from
the right end, then ``fp[j]`` when ``fp[j] == fp[j + 1]``.

Derivatives (in ``x``, ``xp``, ``fp``, ``left``, ``right``) are JAX's (``jnp.interp``): the
interval is ``i = clip(searchsorted(xp, x, 'right'), 1, len(xp) - 1)``, so at a knot ``xp[j]``
the slope of the interval to its right is used (of the last interval at ``xp[-1]``), outside
the range only ``left``/``right`` (or ``fp[0]``/``fp[-1]``) receive a cotangent, and an interval
shorter than ``spacing(eps)`` gives ``fp[i - 1]`` (no NaN). The value is NumPy's exactly: the
derivative rides on it as ``value + (f - stop_gradient(f))`` with ``f`` JAX's formula.
"""
from __future__ import annotations

import numpy as _np

from ..errors import ArgumentError, ShapeError


def _tnp():
    from .. import numpy as tnp
    return tnp


def _as_float(v):
    tnp = _tnp()
    if tnp._is_symbolic(v):
        return v if _np.dtype(v.aval.dtype).kind == "f" else tnp.astype(v, _np.float64)
    v = _np.asarray(v)
    return v if v.dtype.kind == "f" else v.astype(_np.float64)


def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of the points ``(xp, fp)`` at ``x``, as ``numpy.interp``.

    Args:
      x: any shape. xp: 1-d, increasing (not checked, as NumPy). fp: 1-d, the length of ``xp``.
      left, right: values below ``xp[0]`` / above ``xp[-1]`` (scalars; default ``fp[0]``/``fp[-1]``).
    Returns:
      the shape of ``x``; float64 (NumPy's), or float32 when every operand is float32.
    Raises:
      ArgumentError: ``period=`` (not supported: wrap ``x`` and extend ``xp``/``fp`` yourself), or
        complex ``fp``. ShapeError: ``xp``/``fp`` not 1-d, or of static lengths that differ or are 0.
    """
    tnp = _tnp()
    if not any(tnp._is_symbolic(v) for v in (x, xp, fp, left, right)):
        with _np.errstate(all="ignore"):             # NumPy's kernel does not warn on inf - inf either
            return _interp(x, xp, fp, left, right, period)
    return _interp(x, xp, fp, left, right, period)


def _interp(x, xp, fp, left, right, period):
    tnp = _tnp()
    if period is not None:
        raise ArgumentError("interp: period= is not supported; pass x % period and xp/fp extended by one "
                            "period on each side")
    x, xp, fp = _as_float(x), _as_float(xp), _as_float(fp)
    for name, v in (("xp", xp), ("fp", fp)):
        if tnp.ndim(v) != 1:
            raise ShapeError(f"interp: {name} must be 1-d, got rank {tnp.ndim(v)}")
    n, nf = tnp.shape(xp)[0], tnp.shape(fp)[0]
    if type(n) is int and type(nf) is int and (n != nf or n == 0):
        raise ShapeError(f"interp: xp and fp must have the same non-zero length, got {n} and {nf}")
    lval = fp[0] if left is None else left
    rval = fp[-1] if right is None else right
    lo_x, hi_x = xp[0], xp[-1]
    if type(n) is int and n == 1:
        return tnp.where(tnp.less(x, lo_x), lval, tnp.where(tnp.greater(x, hi_x), rval, fp[0]))  # NaN: fp[0]
    last = n - 1 if type(n) is int else tnp.subtract(n, 1)
    pos = tnp.searchsorted(xp, x, side="right")                        # xp[pos - 1] <= x < xp[pos]
    i = tnp.clip(pos, 1, last)
    x0, x1 = tnp.take(xp, tnp.subtract(i, 1)), tnp.take(xp, i)
    f0, f1 = tnp.take(fp, tnp.subtract(i, 1)), tnp.take(fp, i)
    dx, df = tnp.subtract(x1, x0), tnp.subtract(f1, f0)
    below, above = tnp.less(x, lo_x), tnp.greater(x, hi_x)
    # JAX's formula: the derivative
    eps = _np.spacing(_np.finfo(_np.float64 if _np.dtype(getattr(getattr(xp, "aval", xp), "dtype")) ==
                                _np.float64 else _np.float32).eps)
    dx0 = tnp.less_equal(tnp.abs(dx), eps)
    f = tnp.where(dx0, f0, tnp.add(f0, tnp.multiply(tnp.divide(tnp.subtract(x, x0), tnp.where(dx0, 1.0, dx)),
                                                    df)))
    f = tnp.where(below, lval, tnp.where(above, rval, f))
    # NumPy's kernel: the value
    slope = tnp.divide(df, dx)
    v = tnp.add(tnp.multiply(slope, tnp.subtract(x, x0)), f0)
    retry = tnp.add(tnp.multiply(slope, tnp.subtract(x, x1)), f1)
    v = tnp.where(tnp.isnan(v), tnp.where(tnp.logical_and(tnp.isnan(retry), tnp.equal(f0, f1)), f0, retry), v)
    v = tnp.where(tnp.equal(x, x0), f0, v)
    v = tnp.where(tnp.equal(x, hi_x), fp[-1], v)
    v = tnp.where(below, lval, tnp.where(above, rval, v))
    v = tnp.where(tnp.isnan(x), x, v)
    v = tnp.stop_gradient(v)
    tangent = tnp.subtract(f, tnp.stop_gradient(f))
    return tnp.add(v, tnp.where(tnp.isfinite(tnp.stop_gradient(f)), tangent, 0.0))
