"""Array creation: copy, asarray/array, zeros_like/ones_like/full_like, eye, identity,
linspace, arange, full, zeros, ones, empty.

Eagerly these return ``numpy.ndarray``; inside transforms, sizes (``arange``'s
bounds, ``full``'s shape) and ``linspace``'s endpoints may be symbolic.
"""
from __future__ import annotations

import builtins as _builtins

import numpy as _np

from .._prims import broadcasting as _bc
from .._prims import misc as _misc
from ..errors import ShapeError
from . import _is_symbolic, _rank, add, astype, divide, multiply, reshape, subtract, where


def copy(a, *, order=None):
    """A copy of ``a`` (a new value: later writes into it do not touch ``a``)."""
    return _misc.copy_p.bind(a)


def asarray(a, dtype=None, *, device=None, copy=None):
    """``a`` as an array: NumPy's ``asarray`` eagerly (``copy=True`` copies,
    ``copy=False`` refuses a copy, as NumPy), the value itself symbolically."""
    if _is_symbolic(a):
        return a if dtype is None else astype(a, dtype)
    if copy:
        return _np.array(a, dtype=dtype, copy=True)
    return _np.asarray(a, dtype=dtype, copy=copy)


def array(a, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, like=None):
    """``np.array``: a copy of ``a`` (as NumPy: later writes into ``a`` do not change it), unless
    ``copy=False`` or ``None``; eagerly NumPy's own."""
    if _is_symbolic(a):
        if ndmin and ndmin > _rank(a, "array"):
            from . import expand_dims
            a = expand_dims(a, tuple(range(ndmin - _rank(a, "array"))))
        out = a if dtype is None else astype(a, dtype)
        return _misc.copy_p.bind(out) if copy and out is a else out
    return _np.array(a, dtype=dtype, copy=copy, order=order, subok=subok, ndmin=ndmin,
                     **({} if like is None else {"like": like}))


def zeros_like(a, dtype=None, *, device=None):
    out = _bc.zeros_like(a)
    return out if dtype is None else astype(out, dtype)


def ones_like(a, dtype=None, *, device=None):
    """Ones shaped like ``a``, of ``dtype`` or ``a``'s own (bool stays bool)."""
    return full_like(a, 1, dtype)


def full_like(a, fill_value, dtype=None, *, device=None):
    """``fill_value`` shaped like ``a``, converted to ``dtype`` or ``a``'s dtype (as NumPy)."""
    z = zeros_like(a, dtype)
    target = z.aval.dtype if _is_symbolic(z) else _np.asarray(z).dtype
    out = add(z, fill_value)
    now = out.aval.dtype if _is_symbolic(out) else _np.asarray(out).dtype
    return out if target is None or now == target else astype(out, target)


def eye(n_rows, n_cols=None, k=0, dtype=None, *, device=None, M=None):
    """The (n_rows, n_cols) matrix with ones on diagonal ``k`` (NumPy's ``eye``; float64 by default)."""
    return _np.eye(n_rows, n_cols if M is None else M, k=k, dtype=float if dtype is None else dtype)


identity = _np.identity


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    """``num`` evenly spaced values from ``start`` to ``stop`` (NumPy). The endpoints
    may be computed (symbolic) values: then ``start + i * step`` with the last value
    exactly ``stop`` when ``endpoint``, along a new leading axis (``axis=0``) for
    array endpoints; ``num`` is a static int."""
    if not (_is_symbolic(start) or _is_symbolic(stop)):
        return _np.linspace(start, stop, num, endpoint=endpoint, retstep=retstep, dtype=dtype, axis=axis)
    num = int(num)
    if num < 0:
        raise ValueError(f"linspace: num must be >= 0, got {num}")
    if axis != 0:
        raise ShapeError("linspace: with computed endpoints only axis=0 is supported")
    div = (num - 1) if endpoint else num
    # an endpoint of unknown rank is taken as a scalar: reshape(., ()) refuses an array at run time
    start, stop = (reshape(v, ()) if _is_symbolic(v) and v.aval.rank is None else v for v in (start, stop))
    r = _builtins.max(_rank(start, "linspace"), _rank(stop, "linspace"))
    dts = [v.aval.dtype if _is_symbolic(v) else _np.result_type(v) for v in (start, stop)
           if _is_symbolic(v) or isinstance(v, (_np.ndarray, _np.generic))]
    dts = [d for d in dts if d is not None]
    fdt = _np.float32 if _builtins.all(d == _np.float32 for d in dts if d.kind == "f") and \
        _builtins.any(d.kind == "f" for d in dts) else _np.float64
    i = _np.arange(num, dtype=fdt).reshape((num,) + (1,) * r)
    delta = subtract(stop, start)
    step = divide(delta, div) if div > 0 else multiply(delta, _np.nan)
    out = add(start, multiply(i, step)) if div > 0 else add(start, multiply(i, delta))
    if endpoint and num > 1:
        last = _np.arange(num).reshape((num,) + (1,) * r) == num - 1
        out = where(last, stop, out)
    if dtype is not None:
        out = astype(out, dtype)
    return (out, step) if retstep else out


def arange(start, stop=None, step=1, dtype=None, *, device=None):
    """NumPy ``arange``; bounds may be symbolic sizes (e.g. ``len(x)``) inside transforms."""
    if stop is None:
        start, stop = 0, start
    if _builtins.any(_is_symbolic(v) for v in (start, stop, step)):
        return _misc.arange_p.bind(start, stop, step, dtype=None if dtype is None else _np.dtype(dtype))
    return _np.arange(start, stop, step, dtype=dtype)


def full(shape, fill_value, dtype=None, *, device=None):
    """NumPy ``full``; sizes may be symbolic inside transforms."""
    dims = (shape,) if not isinstance(shape, (tuple, list)) else tuple(shape)
    if _builtins.any(_is_symbolic(d) for d in dims):
        dt = _np.dtype(dtype) if dtype is not None else _np.asarray(fill_value).dtype
        return _misc.full_p.bind(*dims, fill_value=fill_value, dtype=dt)
    return _np.full(shape, fill_value, dtype=dtype)


def zeros(shape, dtype=None, *, device=None):
    return full(shape, 0, dtype=_np.dtype(float if dtype is None else dtype))


def ones(shape, dtype=None, *, device=None):
    return full(shape, 1, dtype=_np.dtype(float if dtype is None else dtype))


empty = zeros
