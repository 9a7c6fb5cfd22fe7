"""Order statistics composed over ``sort`` and ``take_along_axis``: quantile, percentile and
median, and their NaN-ignoring forms (nanquantile, nanpercentile, nanmedian).

Values follow NumPy's (``method='linear'``): the virtual index ``(n - 1) q`` between the
sorted neighbours ``a <= b``, ``a + (b - a) t`` (or ``b - (b - a)(1 - t)`` for ``t >= 0.5``,
NumPy's ``_lerp``), the median of an even count ``(a + b) / 2``; a slice holding NaN gives NaN
(the nan-forms skip NaN and give NaN only for an all-NaN slice). Integer inputs are computed in
float64. Derivatives are JAX's: the weights ``1 - t`` and ``t`` go to the two sorted elements,
at a tie to the element the stable sort puts there (``jnp.quantile``/``jnp.median``), and a
slice holding NaN has a zero gradient.
"""
from __future__ import annotations

import numpy as _np

from ..errors import ArgumentError, ShapeError


def _tnp():
    from .. import numpy as tnp
    return tnp


def _float(a):
    tnp = _tnp()
    a = a if tnp._is_symbolic(a) else _np.asarray(a)
    dt = a.aval.dtype if tnp._is_symbolic(a) else a.dtype
    return a if _np.dtype(dt).kind == "f" else tnp.astype(a, _np.float64)


def _last_axis(a, axis, op):
    """``a`` with the reduced axes merged into its last axis, and a function putting size-1
    axes back where they were (for ``keepdims``) on a result of shape ``(kept..., k)``."""
    tnp = _tnp()
    r = tnp.ndim(a)
    if axis is None:
        axes = tuple(range(r))
    else:
        axes = (axis,) if isinstance(axis, (int, _np.integer)) else tuple(axis)
        if any(not -r <= int(ax) < r for ax in axes):
            raise ShapeError(f"{op}: axis {axis!r} is out of range for an array of rank {r}")
        axes = tuple(int(ax) % r for ax in axes)
    if len(set(axes)) != len(axes):
        raise ArgumentError(f"{op}: repeated axis in axis={axis!r}")
    rest = [i for i in range(r) if i not in axes]
    if not rest:
        a = tnp.ravel(a)
    else:
        a = tnp.transpose(a, rest + list(axes))
        if len(axes) > 1:
            shp = tnp.shape(a)
            if not all(type(d) is int for d in shp[:len(rest)]):
                raise ShapeError(f"{op}: several axes need the other sizes at definition time; annotate the "
                                 f"argument's shape or reduce one axis at a time")
            a = tnp.reshape(a, tuple(shp[:len(rest)]) + (-1,))

    def keep(out):
        for ax in sorted(axes):
            out = tnp.expand_dims(out, ax)
        return out
    return a, keep


def _check_q(q, op, scale):
    tnp = _tnp()
    if tnp._is_symbolic(q):
        if q.aval.rank not in (0, 1):
            raise ShapeError(f"{op}: q must be a scalar or 1-d, got rank {q.aval.rank}")
        return q
    qa = _np.asarray(q)
    if qa.ndim > 1:
        raise ShapeError(f"{op}: q must be a scalar or 1-d (tlaloc), got shape {qa.shape}; loop over the rows")
    if not (_np.all(qa >= 0) and _np.all(qa <= scale)):
        raise ArgumentError(f"{op}: q must lie in [0, {scale:g}], got {q!r}")
    return qa


def _lerp(a, b, t):
    """NumPy's ``_lerp``: ``a + (b - a) t``, or ``b - (b - a)(1 - t)`` where ``t >= 0.5``."""
    tnp = _tnp()
    d = tnp.subtract(b, a)
    return tnp.where(tnp.greater_equal(t, 0.5), tnp.subtract(b, tnp.multiply(d, tnp.subtract(1.0, t))),
                     tnp.add(a, tnp.multiply(d, t)))


def _at(s, idx):
    """``s`` (..., n) read at integer ``idx`` (..., k) along the last axis."""
    tnp = _tnp()
    idx = tnp.astype(idx, _np.int64)
    for _ in range(tnp.ndim(s) - tnp.ndim(idx)):
        idx = tnp.expand_dims(idx, 0)
    return tnp.take_along_axis(s, idx, axis=-1)


def _quantile_core(a, q, axis, keepdims, op, skip_nan, scale=1.0):
    tnp = _tnp()
    q = _check_q(q, op, scale)
    if scale != 1.0:
        q = tnp.divide(q, scale) if tnp._is_symbolic(q) else _np.true_divide(q, scale)
    q_rank = tnp.ndim(q)
    a, keep = _last_axis(_float(a), axis, op)
    dt = a.aval.dtype if tnp._is_symbolic(a) else a.dtype
    if not tnp._is_symbolic(q):
        q = q.astype(dt) if _np.dtype(dt) == _np.float32 else q.astype(_np.float64)
    nan = tnp.isnan(a)
    s = tnp.sort(a, axis=-1)                                     # NaN last
    if skip_nan:
        n = tnp.sum(tnp.astype(tnp.logical_not(nan), dt), axis=-1, keepdims=True)      # (..., 1)
    else:
        n = tnp.astype(tnp.shape(a)[-1], dt) if tnp._is_symbolic(tnp.shape(a)[-1]) else \
            _np.asarray(tnp.shape(a)[-1], dtype=dt)
    qk = tnp.reshape(q, (-1,)) if q_rank else tnp.expand_dims(q, 0)                     # (k,)
    last = tnp.subtract(n, 1.0)
    vi = tnp.multiply(last, qk)                                                          # (..., k)
    above = tnp.greater_equal(vi, last)
    prev = tnp.where(above, last, tnp.floor(vi))
    nxt = tnp.where(above, last, tnp.add(tnp.floor(vi), 1.0))
    t = tnp.subtract(vi, tnp.where(above, -1.0, prev))                                   # NumPy's gamma
    hi_i = tnp.maximum(nxt, 0.0)
    out = _lerp(_at(s, tnp.maximum(prev, 0.0)), _at(s, hi_i), t)
    bad = tnp.less(n, 1.0) if skip_nan else tnp.any(nan, axis=-1, keepdims=True)
    out = tnp.where(bad, _np.nan, out)
    return _finish(out, q_rank, keepdims, keep)


def _finish(out, q_rank, keepdims, keep):
    tnp = _tnp()
    if keepdims:
        out = keep(out)                       # (..., 1s, k) with the reduced axes as size 1
    return tnp.moveaxis(out, -1, 0) if q_rank else tnp.squeeze(out, -1)


def _median_core(a, axis, keepdims, op, skip_nan):
    tnp = _tnp()
    a, keep = _last_axis(_float(a), axis, op)
    nan = tnp.isnan(a)
    s = tnp.sort(a, axis=-1)
    if skip_nan:
        n = tnp.sum(tnp.astype(tnp.logical_not(nan), _np.int64), axis=-1, keepdims=True)
    else:
        n = tnp.shape(a)[-1]
        n = tnp.astype(n, _np.int64) if tnp._is_symbolic(n) else _np.asarray(n, dtype=_np.int64)
    lo_i = tnp.maximum(tnp.floor_divide(tnp.subtract(n, 1), 2), 0)
    hi_i = tnp.maximum(tnp.floor_divide(n, 2), 0)
    lo, hi = _at(s, lo_i), _at(s, hi_i)
    out = tnp.where(tnp.equal(lo_i, hi_i), lo, tnp.divide(tnp.add(lo, hi), 2.0))
    bad = tnp.less(n, 1) if skip_nan else tnp.any(nan, axis=-1, keepdims=True)
    out = tnp.where(bad, _np.nan, out)
    return _finish(out, 0, keepdims, keep)


def _refuse_options(op, out, overwrite_input, method, weights, interpolation):
    if out is not None:
        raise ArgumentError(f"{op}: out= is not supported (arrays are immutable here); use the returned value")
    if method not in ("linear",) or interpolation not in (None, "linear"):
        raise ArgumentError(f"{op}: only method='linear' is supported, got {interpolation or method!r}; "
                            f"compose the others from tnp.sort and tnp.take_along_axis")
    if weights is not None:
        raise ArgumentError(f"{op}: weights= is not supported; sort and accumulate the weights with tnp.cumsum")


def _quantile_function(name, skip_nan, scale, doc):
    def fn(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
           weights=None, interpolation=None):
        _refuse_options(name, out, overwrite_input, method, weights, interpolation)
        return _quantile_core(a, q, axis, keepdims, name, skip_nan, scale)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


quantile = _quantile_function("quantile", False, 1.0, """``q``-th quantiles of ``a`` along ``axis`` (None: all),
    NumPy's ``method='linear'``.

    Args:
      a: array (integers computed in float64); q: scalar or 1-d, in [0, 1] (checked when static).
      axis: None, an int or a tuple of ints (several axes need the kept sizes statically).
    Returns:
      ``q.shape + reduced shape`` (``keepdims``: reduced axes kept as 1), ``a``'s float dtype.
    Raises:
      ArgumentError: ``q`` outside [0, 1], another ``method``, ``weights=`` or ``out=``.
      ShapeError: ``q`` of rank 2 or more.
    """)
percentile = _quantile_function("percentile", False, 100.0, """``quantile(a, q / 100)`` (NumPy's
    ``percentile``); ``q`` in [0, 100]. See ``quantile`` for shapes and errors.""")
nanquantile = _quantile_function("nanquantile", True, 1.0, """``quantile`` over the non-NaN elements of
    each slice (NaN for an all-NaN slice). See ``quantile``.""")
nanpercentile = _quantile_function("nanpercentile", True, 100.0, """``percentile`` over the non-NaN
    elements of each slice (NaN for an all-NaN slice). See ``quantile``.""")


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """Median along ``axis`` (None: all): the middle sorted element, or ``(a + b) / 2`` of the
    middle two (NumPy's values); NaN where a slice holds NaN. Shape: the reduced shape; dtype:
    ``a``'s float dtype (float64 for integers). Gradient: JAX's (``jnp.median``)."""
    _refuse_options("median", out, overwrite_input, "linear", None, None)
    return _median_core(a, axis, keepdims, "median", False)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """``median`` over the non-NaN elements of each slice (NaN for an all-NaN slice)."""
    _refuse_options("nanmedian", out, overwrite_input, "linear", None, None)
    return _median_core(a, axis, keepdims, "nanmedian", True)
