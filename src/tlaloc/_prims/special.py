"""Special functions: ``erf``.

``erf`` is a unary elementwise primitive (declared through ``elementwise.unary``,
so ``tnp.erf``, batching and the AST front end's ``scipy.special.erf`` all follow
from the ``UNARY`` table). Its NumPy implementation is ``scipy.special.erf``;
its derivative is ``2/√π · exp(-x²)``. Its StableHLO lowering is in
``_render/stablehlo_special.py``.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ._fpstate import quiet
from .elementwise import exp_p, multiply, negative, unary

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@quiet
def _erf_impl(x):
    """``scipy.special.erf`` keeping the input's float dtype (float16/bfloat16 go through
    float32, as scipy has no loop for them); integers and bools give float64."""
    from scipy import special
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.complexfloating) or x.dtype == object:
        from ..errors import DTypeError
        raise DTypeError(f"erf: x must be real (float, int or bool), got dtype {x.dtype}; the complex error "
                         f"function is not supported (pass x.real, or use scipy.special.erf outside tlaloc)")
    if x.dtype in (np.float32, np.float64):
        return special.erf(x)
    if _dt.is_float(x.dtype):
        return special.erf(x.astype(np.float32)).astype(x.dtype)
    return special.erf(x.astype(np.float64))


def _erf_deriv(x, out):
    return multiply(_TWO_OVER_SQRT_PI, exp_p.bind(negative(multiply(x, x))))


erf_p = unary("erf", _erf_impl, "chlo.erf", _erf_deriv)


def erf(x):
    """The error function ``2/√π ∫₀ˣ exp(-t²) dt``, elementwise. Shape and float dtype: as x."""
    return erf_p.bind(x)
