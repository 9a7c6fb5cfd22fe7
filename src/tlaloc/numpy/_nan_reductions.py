"""NaN-ignoring reductions composed over the plain ones: nansum, nanprod, nanmean, nanvar,
nanstd, nanmax, nanmin.

Values are NumPy's: NaN counts as 0 in sums (1 in products) and is left out of counts; an
all-NaN slice gives 0 (nansum), 1 (nanprod), NaN (nanmean, nanmax, nanmin, and nanvar/nanstd,
also when ``count - ddof <= 0``), without NumPy's RuntimeWarning. Derivatives are JAX's
(``jnp.nansum`` ...): zero at the NaN elements (the NaN goes through a ``where``), and at a tie
of nanmax/nanmin the cotangent is shared as ``tnp.max`` shares it.
"""
from __future__ import annotations

import numpy as _np


def _tnp():
    from .. import numpy as tnp
    return tnp


def _dtype(a):
    tnp = _tnp()
    return _np.dtype(a.aval.dtype if tnp._is_symbolic(a) else _np.asarray(a).dtype)


def _replace_nan(a, value):
    """``(a with NaN replaced by value, the NaN mask)``; integers have no NaN (mask None)."""
    tnp = _tnp()
    a = a if tnp._is_symbolic(a) else _np.asarray(a)
    if _dtype(a).kind != "f":
        return a, None
    mask = tnp.isnan(a)
    return tnp.where(mask, value, a), mask


def _count(a, mask, axis, keepdims):
    """Non-NaN elements per slice, in ``a``'s float dtype (float64 for integers)."""
    tnp = _tnp()
    dt = _dtype(a) if _dtype(a).kind == "f" else _np.dtype(_np.float64)
    if mask is None:
        return tnp.astype(tnp.sum(tnp.ones_like(a, dtype=_np.int64), axis=axis, keepdims=keepdims), dt)
    return tnp.sum(tnp.astype(tnp.logical_not(mask), dt), axis=axis, keepdims=keepdims)


def _no_out(op, out):
    if out is not None:
        from ..errors import ArgumentError
        raise ArgumentError(f"{op}: out= is not supported (arrays are immutable here); use the returned value")


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """Sum over ``axis`` treating NaN as 0 (all-NaN slice: 0). Shape: the reduced shape."""
    _no_out("nansum", out)
    b, _ = _replace_nan(a, 0.0)
    return _tnp().sum(b, axis=axis, keepdims=keepdims, dtype=dtype, initial=initial, where=where)


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """Product over ``axis`` treating NaN as 1 (all-NaN slice: 1). Shape: the reduced shape."""
    _no_out("nanprod", out)
    b, _ = _replace_nan(a, 1.0)
    return _tnp().prod(b, axis=axis, keepdims=keepdims, dtype=dtype, initial=initial, where=where)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """Mean of the non-NaN elements over ``axis`` (all-NaN slice: NaN). Integers: float64."""
    _no_out("nanmean", out)
    tnp = _tnp()
    b, mask = _replace_nan(a, 0.0)
    if mask is None:
        return tnp.mean(b, axis=axis, keepdims=keepdims, dtype=dtype, where=where)
    keep = tnp.logical_not(mask) if where is None else tnp.logical_and(tnp.logical_not(mask), where)
    cnt = tnp.sum(tnp.astype(keep, _dtype(b)), axis=axis, keepdims=keepdims)
    return tnp.divide(tnp.sum(b, axis=axis, keepdims=keepdims, dtype=dtype, where=where), cnt)


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
           correction=None):
    """Variance of the non-NaN elements over ``axis`` with ``ddof`` (or ``correction``); NaN where
    ``count - ddof <= 0``. NumPy's two passes: mean, then the mean-centred squares."""
    _no_out("nanvar", out)
    if where is not None or mean is not None:
        from ..errors import ArgumentError
        raise ArgumentError("nanvar: where= and mean= are not supported; mask with tnp.where(m, x, np.nan)")
    tnp = _tnp()
    ddof = correction if correction is not None else ddof
    b, mask = _replace_nan(a, 0.0)
    if mask is None:
        return tnp.var(b, axis=axis, keepdims=keepdims, ddof=ddof)
    cnt = _count(b, mask, axis, True)
    avg = tnp.divide(tnp.sum(b, axis=axis, keepdims=True), cnt)
    centred = tnp.where(mask, 0.0, tnp.subtract(b, avg))
    ss = tnp.sum(tnp.multiply(centred, centred), axis=axis, keepdims=keepdims)
    dof = tnp.subtract(_count(b, mask, axis, keepdims), ddof)
    bad = tnp.less_equal(dof, 0.0)
    return tnp.where(bad, _np.nan, tnp.divide(ss, tnp.where(bad, 1.0, dof)))


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
           correction=None):
    """``sqrt(nanvar(...))``; see ``nanvar``."""
    return _tnp().sqrt(nanvar(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean,
                              correction=correction))


def _nan_extremum(op, a, axis, out, keepdims, initial, where):
    _no_out(op, out)
    tnp = _tnp()
    fill = -_np.inf if op == "nanmax" else _np.inf
    b, mask = _replace_nan(a, fill)
    red = tnp.max if op == "nanmax" else tnp.min
    r = red(b, axis=axis, keepdims=keepdims, initial=initial, where=where)
    if mask is None or initial is not None:
        return r
    none = tnp.all(mask if where is None else tnp.logical_or(mask, tnp.logical_not(where)),
                   axis=axis, keepdims=keepdims)
    return tnp.where(none, _np.nan, r)


def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Maximum over ``axis`` ignoring NaN (all-NaN slice: NaN). Shape: the reduced shape."""
    return _nan_extremum("nanmax", a, axis, out, keepdims, initial, where)


def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Minimum over ``axis`` ignoring NaN (all-NaN slice: NaN). Shape: the reduced shape."""
    return _nan_extremum("nanmin", a, axis, out, keepdims, initial, where)
