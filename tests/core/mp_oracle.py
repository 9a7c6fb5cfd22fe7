"""mpmath at 160 bits as the oracle of the elementwise transcendental functions.

``reference(name, x)`` evaluates the function on each (exactly converted) input
with mpmath, rounds once to ``x``'s dtype (float32 through mpmath's 24-bit
rounding, so no double rounding), and takes NaN where the real function is
undefined (mpmath returns a complex or raises). Zeros, infinities and NaN, where
mpmath has no signed zero, come from ``SPECIAL``: the IEEE 754 / C99 Annex F
values, written out here.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np

mpmath.mp.prec = 160

FUNCTIONS = {
    "exp": mpmath.exp, "log": mpmath.log, "log1p": mpmath.log1p, "expm1": mpmath.expm1, "sin": mpmath.sin,
    "cos": mpmath.cos, "tan": mpmath.tan, "tanh": mpmath.tanh, "sqrt": mpmath.sqrt, "arcsin": mpmath.asin,
    "arctan": mpmath.atan, "sinh": mpmath.sinh, "cosh": mpmath.cosh, "arcsinh": mpmath.asinh,
    "arctanh": mpmath.atanh,
}
_ODD_ZERO = ("log1p", "expm1", "sin", "tan", "tanh", "sqrt", "arcsin", "arctan", "sinh", "arcsinh", "arctanh")
INF, NAN = math.inf, math.nan
# name -> (f(+inf), f(-inf)); f(±0) is ±0 for _ODD_ZERO, else as listed in _AT_ZERO; f(NaN) is NaN.
_AT_INF = {
    "exp": (INF, 0.0), "log": (INF, NAN), "log1p": (INF, NAN), "expm1": (INF, -1.0), "sin": (NAN, NAN),
    "cos": (NAN, NAN), "tan": (NAN, NAN), "tanh": (1.0, -1.0), "sqrt": (INF, NAN), "arcsin": (NAN, NAN),
    "arctan": (math.pi / 2, -math.pi / 2), "sinh": (INF, -INF), "cosh": (INF, INF), "arcsinh": (INF, -INF),
    "arctanh": (NAN, NAN),
}
_AT_ZERO = {"exp": 1.0, "log": -INF, "cos": 1.0, "cosh": 1.0}


def _special(name, v):
    if math.isnan(v):
        return NAN
    if math.isinf(v):
        return _AT_INF[name][0 if v > 0 else 1]
    if name in _ODD_ZERO:
        return v                                     # ±0 -> ±0
    return _AT_ZERO[name]


def _round(r, dtype):
    if np.dtype(dtype) == np.float32:
        with mpmath.workprec(24):
            r = +r
    return float(r)


def reference(name, x):
    """f(x) for a float32/float64 array x, correctly rounded to x's dtype (up to
    float32 subnormals, which these inputs do not produce)."""
    x = np.asarray(x)
    f, out = FUNCTIONS[name], []
    for v in x.astype(np.float64).reshape(-1):
        v = float(v)
        if v == 0.0 or not math.isfinite(v):
            out.append(_special(name, v))
            continue
        try:
            r = f(mpmath.mpf(v))
        except (ValueError, ZeroDivisionError):
            out.append(NAN)
            continue
        out.append(NAN if isinstance(r, mpmath.mpc) else _round(r, x.dtype))
    with np.errstate(over="ignore"):
        return np.array(out).astype(x.dtype).reshape(x.shape)
