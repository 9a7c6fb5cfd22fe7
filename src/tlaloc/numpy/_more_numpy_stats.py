"""NumPy's statistics, integration, polynomial and 1-d signal names, composed from other
``tlaloc.numpy`` functions (no primitives of their own): average, cov, corrcoef, trapezoid,
polyval, vander, convolve and correlate.

Each follows NumPy 2.x's values and dtypes (``cov`` and ``corrcoef`` compute in float64, as
NumPy does, even for float32 input); gradients come from the parts. ``cov`` needs the number of
observations, ``vander`` (without ``N``), ``polyval`` (with an array ``p``), ``convolve`` and
``correlate`` their lengths: inside a transform they raise ``ShapeError`` while these are not
known, and the function is then built again for the arguments' shapes at the first call.
"""
from __future__ import annotations

import warnings

import numpy as _np

from ..errors import ShapeError
from ._more_numpy import _dtype


def _tnp():
    from .. import numpy as tnp
    return tnp


def _axes_tuple(axis, r):
    axes = (axis,) if isinstance(axis, (int, _np.integer)) else tuple(axis)
    out = tuple(int(a) % r for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(f"average: repeated axis in {axis!r}")
    return out


def _weights_along_axes(a_shape, w_shape, axes):
    """Whether ``weights`` has the shape of ``a`` along ``axes`` rather than ``a``'s own (NumPy:
    the shapes differ); ShapeError while that depends on sizes not known yet."""
    r = len(a_shape)
    if len(w_shape) != r:
        return True
    if all(type(d) is int for d in tuple(a_shape) + tuple(w_shape)):
        return tuple(a_shape) != tuple(w_shape)
    if axes is None or axes == tuple(range(r)):       # either reading gives the same weights
        return False
    raise ShapeError("average: the sizes of a and weights are not known yet")


def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    """The (weighted) mean over ``axis`` (``numpy.average``): ``sum(a * w, axis) / sum(w, axis)``.

    ``weights`` has ``a``'s shape, or (with ``axis``) the shape of ``a`` along those axes.
    Integer or bool ``a`` is averaged in float64. ``returned=True`` also gives the sum of the
    weights (the element count without weights), broadcast to the result's shape. Eagerly,
    weights summing to zero raise ``ZeroDivisionError`` as NumPy; inside a transform they give
    inf/NaN. Derivative: to ``a`` and to ``weights``."""
    tnp = _tnp()
    a = tnp.asarray(a)
    r = tnp.ndim(a)
    axes = None if axis is None else _axes_tuple(axis, r)
    if weights is None:
        avg = tnp.mean(a, axis=axes, keepdims=keepdims)
        if not returned:
            return avg
        from .._prims import misc as _misc
        count = _misc.reduced_count(a, axes)
        return avg, tnp.add(tnp.zeros_like(avg), tnp.astype(count, _dtype(avg, "average")))
    w = tnp.asarray(weights)
    wr = tnp.ndim(w)
    if _weights_along_axes(tnp.shape(a), tnp.shape(w), axes):
        if axes is None:
            raise TypeError("average: Axis must be specified when shapes of a and weights differ.")
        if wr != len(axes):
            raise ValueError("average: Shape of weights must be consistent with shape of a along specified axis.")
        a_shape, w_shape = tnp.shape(a), tnp.shape(w)
        for i, ax in enumerate(axes):
            if type(a_shape[ax]) is int and type(w_shape[i]) is int and a_shape[ax] != w_shape[i]:
                raise ValueError("average: Shape of weights must be consistent with shape of a along "
                                 "specified axis.")
        w = tnp.transpose(w, tuple(int(i) for i in _np.argsort(axes)))
        for ax in range(r):
            if ax not in axes:
                w = tnp.expand_dims(w, ax)
    adt, wdt = _dtype(a, "average"), _dtype(w, "average")
    rdt = _np.result_type(adt, wdt, _np.float64) if adt.kind in "biu" else _np.result_type(adt, wdt)
    a = a if adt == rdt else tnp.astype(a, rdt)
    w = w if wdt == rdt else tnp.astype(w, rdt)
    scl = tnp.sum(w, axis=axes, keepdims=keepdims)
    if not tnp._is_symbolic(scl) and _np.any(scl == 0.0):
        raise ZeroDivisionError("Weights sum to zero, can't be normalized")
    avg = tnp.divide(tnp.sum(tnp.multiply(a, w), axis=axes, keepdims=keepdims), scl)
    if returned:
        return avg, tnp.add(scl, tnp.zeros_like(avg))
    return avg


def _float_dtype(dtype, *xs):
    if dtype is not None:
        return _np.dtype(dtype)
    return _np.result_type(*[_dtype(x, "cov") for x in xs], _np.float64)


def _size(x, i, op):
    n = _tnp().shape(x)[i]
    if type(n) is not int:
        raise ShapeError(f"{op}: a length it needs (axis {i} of an operand) is not known yet")
    return n


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    """The covariance matrix of the variables in the rows of ``m`` (columns if ``rowvar=False``),
    ``y``'s variables appended, normalised by ``N - ddof`` (``ddof`` defaults to 1, 0 with
    ``bias``), as ``numpy.cov``: ``(v, v)``, or 0-d for one variable. Computed in
    ``result_type(m, y, float64)`` unless ``dtype`` is given.

    Raises:
      NotImplementedError: ``fweights`` or ``aweights`` (not supported).
      ValueError: ``m`` or ``y`` of rank above 2, a non-integer ``ddof``."""
    if fweights is not None or aweights is not None:
        raise NotImplementedError("cov: fweights= and aweights= are not supported by tlaloc; weight the "
                                  "observations yourself (e.g. with average)")
    if ddof is not None and ddof != int(ddof):
        raise ValueError("cov: ddof must be integer")
    tnp = _tnp()
    m = tnp.asarray(m)
    rm = tnp.ndim(m)
    if rm > 2:
        raise ValueError("cov: m has more than 2 dimensions")
    if y is not None:
        y = tnp.asarray(y)
        if tnp.ndim(y) > 2:
            raise ValueError("cov: y has more than 2 dimensions")
    dt = _float_dtype(dtype, m) if y is None else _float_dtype(dtype, m, y)
    X = tnp.atleast_2d(m if _dtype(m, "cov") == dt else tnp.astype(m, dt))
    if not rowvar and rm != 1:
        X = tnp.transpose(X)
    if y is not None:
        Y = tnp.atleast_2d(y if _dtype(y, "cov") == dt else tnp.astype(y, dt))
        if not rowvar and (tnp.ndim(y) == 2 and _size(Y, 0, "cov") != 1):
            Y = tnp.transpose(Y)
        X = tnp.concatenate([X, Y], axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    fact = _size(X, 1, "cov") - int(ddof)
    if fact <= 0:
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=2)
        fact = 0.0
    X = tnp.subtract(X, tnp.mean(X, axis=1, keepdims=True))
    c = tnp.matmul(X, tnp.conj(tnp.transpose(X)))
    with _np.errstate(divide="ignore"):
        scale = float(_np.true_divide(1, fact))
    return tnp.squeeze(tnp.multiply(c, scale))


def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    """Pearson correlation coefficients, ``cov / sqrt(diag ⊗ diag)`` clipped to [-1, 1]
    (``numpy.corrcoef``); one variable gives ``c / c`` (1, or NaN). Real input only inside
    transforms. Derivative: through cov, the square roots and the clip."""
    tnp = _tnp()
    c = cov(x, y, rowvar, dtype=dtype)
    if tnp.ndim(c) == 0:
        return tnp.divide(c, c)
    stddev = tnp.sqrt(tnp.real(tnp.diagonal(c)))
    c = tnp.divide(c, stddev[:, None])
    c = tnp.divide(c, stddev[None, :])
    if not tnp._is_symbolic(c) and _np.iscomplexobj(c):
        return _np.clip(c.real, -1, 1) + 1j * _np.clip(c.imag, -1, 1)
    return tnp.clip(c, -1, 1)


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The trapezoidal rule along ``axis``: ``sum(d * (y[1:] + y[:-1]) / 2)`` with ``d`` the
    spacing ``dx`` or ``diff(x)`` (``x`` 1-d along ``axis``, or shaped like ``y``), as
    ``numpy.trapezoid``. Shape: ``y``'s without ``axis``. Derivative: to ``y`` and ``x``."""
    tnp = _tnp()
    y = tnp.asarray(y)
    nd = tnp.ndim(y)
    axis = int(axis)
    if x is None:
        d = dx
    else:
        x = tnp.asarray(x)
        if tnp.ndim(x) == 1:
            shape = [1] * nd
            shape[axis] = -1
            d = tnp.reshape(tnp.diff(x), tuple(shape))
        else:
            d = tnp.diff(x, axis=axis)
    hi, lo = [slice(None)] * nd, [slice(None)] * nd
    hi[axis], lo[axis] = slice(1, None), slice(None, -1)
    terms = tnp.divide(tnp.multiply(d, tnp.add(y[tuple(hi)], y[tuple(lo)])), 2.0)
    return tnp.sum(terms, axis=axis)


def polyval(p, x):
    """The polynomial with coefficients ``p`` (highest power first) at ``x``, by Horner's rule
    from ``zeros_like(x)`` as ``numpy.polyval`` (so the same rounding). Shape: that of ``x``.
    A list ``p`` becomes an array first (float64 for Python floats, as NumPy). Derivative: to
    ``p`` and ``x``."""
    tnp = _tnp()
    if isinstance(p, (list, tuple)) and any(tnp._is_symbolic(c) for c in p):
        coeffs = list(p)
    else:
        p = tnp.asarray(p)
        if tnp.ndim(p) != 1:
            raise ValueError(f"polyval: p must be 1-d (the coefficients), got rank {tnp.ndim(p)}")
        coeffs = [p[i] for i in range(_size(p, 0, "polyval"))]
    x = tnp.asarray(x)
    y = tnp.zeros_like(x)
    for c in coeffs:
        y = tnp.add(tnp.multiply(y, x), c)
    return y


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of a 1-d ``x``: columns ``x**(N-1), ..., x, 1`` (reversed with
    ``increasing``), each power by repeated multiplication as ``numpy.vander``; ``N`` defaults to
    ``len(x)``. Shape ``(len(x), N)``; integer or bool ``x`` gives int64. Derivative: to ``x``."""
    tnp = _tnp()
    x = tnp.asarray(x)
    if tnp.ndim(x) != 1:
        raise ValueError("vander: x must be a one-dimensional array or sequence.")
    dt = x.aval.dtype if tnp._is_symbolic(x) else x.dtype
    if dt is not None and _np.dtype(dt).kind in "biu" and _np.dtype(dt) != _np.int64:
        x = tnp.astype(x, _np.promote_types(dt, int))
    n = _size(x, 0, "vander") if N is None else int(N)
    if n < 0:
        raise ValueError(f"vander: N must be >= 0, got {n}")
    if n == 0:
        return tnp.expand_dims(x, 1)[:, :0]
    cols = [tnp.ones_like(x)]
    if n > 1:
        cols.append(x)
    while len(cols) < n:
        cols.append(tnp.multiply(cols[-1], x))
    return tnp.stack(cols if increasing else cols[::-1], axis=1)


_MODE_CODES = {0: "valid", 1: "same", 2: "full"}


def _mode(mode, op):
    if isinstance(mode, str) and mode[:1].lower() in ("v", "s", "f"):
        return {"v": "valid", "s": "same", "f": "full"}[mode[0].lower()]
    if isinstance(mode, (int, _np.integer)) and int(mode) in _MODE_CODES:
        return _MODE_CODES[int(mode)]
    raise ValueError(f"{op}: mode must be 'valid', 'same' or 'full', got {mode!r}")


def _vectors(a, v, op):
    tnp = _tnp()
    a, v = tnp.atleast_1d(tnp.asarray(a)), tnp.atleast_1d(tnp.asarray(v))
    if tnp.ndim(a) != 1 or tnp.ndim(v) != 1:
        raise ValueError(f"{op}: a and v must be 1-d (scalars count as length 1)")
    na, nv = _size(a, 0, op), _size(v, 0, op)
    if na == 0:
        raise ValueError(f"{op}: a cannot be empty")
    if nv == 0:
        raise ValueError(f"{op}: v cannot be empty")
    return a, v, na, nv


def convolve(a, v, mode="full"):
    """The discrete linear convolution of two 1-d sequences, ``c[k] = sum_m a[m] v[k - m]``
    (``numpy.convolve``): ``'full'`` (length ``M + N - 1``), ``'same'`` (``max(M, N)``, centred as
    NumPy) or ``'valid'`` (``max(M, N) - min(M, N) + 1``). Computed by
    ``tlaloc.scipy.signal.convolve`` with the longer sequence first, which is what NumPy does.
    Derivative: to both."""
    from ..scipy import signal
    mode = _mode(mode, "convolve")
    a, v, na, nv = _vectors(a, v, "convolve")
    if nv > na:
        a, v = v, a
    return signal.convolve(a, v, mode=mode)


def correlate(a, v, mode="valid"):
    """The cross-correlation of two 1-d sequences, ``c[k] = sum_n a[n + k] conj(v[n])``
    (``numpy.correlate``), lags in NumPy's order for every mode; lengths as ``convolve``. When
    ``a`` is the shorter, NumPy correlates ``v`` with ``a`` and reverses the result, which for
    ``'same'`` keeps the ``len(v)`` lags from ``len(a) // 2`` of the full result (not the centred
    ones); so does this. Derivative: to both (real input)."""
    from ..scipy import signal
    tnp = _tnp()
    mode = _mode(mode, "correlate")
    a, v, na, nv = _vectors(a, v, "correlate")
    vr = tnp.flip(tnp.conj(v), 0)
    if na >= nv or mode != "same":          # 'full' and 'valid' read the same lags in either order
        return signal.convolve(a, vr, mode=mode)
    start = na // 2                          # NumPy's reversed window of correlate(v, a, 'same')
    return signal.convolve(a, vr, mode="full")[start:start + nv]
