"""The ``convert`` primitive: an elementwise change of dtype, with XLA's semantics.

``convert(x, dtype)`` returns ``x`` (any shape) as ``dtype``, shape unchanged. Float to
integer truncates toward zero, saturates at the integer range and maps NaN to 0 (as
``stablehlo.convert`` on XLA; NumPy's cast is undefined there). The derivative flows only
into a float target dtype: the cotangent is cast back to ``x``'s dtype, the tangent converted.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from .._core.primitive import Primitive
from ._rules import same_shape
from .broadcasting import cast_like


def _convert_impl(x, *, dtype):
    x, dtype = np.asarray(x), np.dtype(dtype)
    if dtype.kind in "iu" and _dt.is_float(x.dtype):
        return _float_to_int(x, dtype)
    return x.astype(dtype, copy=False)


def _float_to_int(x, dtype):
    """XLA's float -> integer conversion: truncate toward zero, saturate at the
    integer range, NaN -> 0 (NumPy's cast is undefined there)."""
    info = np.iinfo(dtype)
    xf = x.astype(np.float64)                  # exact for every float dtype
    nan = np.isnan(xf)
    hi = ~nan & (xf >= float(info.max))        # float(info.max) may round up to 2**63
    lo = ~nan & (xf <= float(info.min))
    mid = np.where(nan | hi | lo, 0.0, np.trunc(xf)).astype(dtype)
    return np.where(hi, dtype.type(info.max), np.where(lo, dtype.type(info.min), mid))


convert_p = Primitive("convert", impl=_convert_impl, hlo="stablehlo.convert", shape_rule=same_shape,
                      dtype_rule=lambda x, *, dtype: np.dtype(dtype))


def convert(x, dtype):
    return convert_p.bind(x, dtype=np.dtype(dtype))


def _convert_vjp(g, x, out, dtype):
    if not np.issubdtype(np.dtype(dtype), np.floating):
        return (None,)
    return (cast_like(g, x),)


convert_p.vjp = _convert_vjp
convert_p.jvp = lambda t, x, out, dtype: (None if t[0] is None or not np.issubdtype(np.dtype(dtype), np.floating)
                                          else convert(t[0], dtype))
