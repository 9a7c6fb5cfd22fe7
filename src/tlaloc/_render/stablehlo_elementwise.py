"""StableHLO lowerings of the elementwise primitives.

Operands are converted to the node's result dtype and broadcast to its shape
(NumPy broadcasting is explicit in StableHLO), except comparisons, which
compare in the operands' common dtype. Functions StableHLO lacks are written
with the ops it has, accurate to a few ulp:

* ``sinh x = (expm1 x - expm1 -x) / 2``, ``cosh x = (exp x + exp -x) / 2``;
* ``arcsin x = atan2(x, sqrt((1-x)(1+x)))``, ``arccos x = atan2(sqrt((1-x)(1+x)), x)``,
  ``arctan x = atan2(x, 1)``;
* ``arcsinh x = sign(x) log1p(|x| + x²/(1 + sqrt(1 + x²)))`` (``log 2|x|`` past 2^28);
* ``arctanh x = log1p(2x / (1 - x)) / 2``;
* ``erf``: see ``stablehlo_special``;
* ``remainder`` and ``floor_divide`` follow NumPy's floored division
  (``npy_divmod``), not StableHLO's truncated one.
"""
from __future__ import annotations

import numpy as np

from .._core.graph import Literal
from .stablehlo import BOOL, Val, out_aval

UNARY_HLO = {
    "negative": "stablehlo.negate", "exp": "stablehlo.exponential", "log": "stablehlo.log",
    "log1p": "stablehlo.log_plus_one", "expm1": "stablehlo.exponential_minus_one",
    "sin": "stablehlo.sine", "cos": "stablehlo.cosine", "tan": "stablehlo.tan", "tanh": "stablehlo.tanh",
    "logistic": "stablehlo.logistic", "sqrt": "stablehlo.sqrt", "rsqrt": "stablehlo.rsqrt",
    "abs": "stablehlo.abs", "sign": "stablehlo.sign", "floor": "stablehlo.floor", "ceil": "stablehlo.ceil",
    "round": "stablehlo.round_nearest_even",
}
BINARY_HLO = {
    "add": "stablehlo.add", "subtract": "stablehlo.subtract", "multiply": "stablehlo.multiply",
    "divide": "stablehlo.divide", "power": "stablehlo.power", "maximum": "stablehlo.maximum",
    "minimum": "stablehlo.minimum", "arctan2": "stablehlo.atan2",
}
COMPARE = {"less": "LT", "less_equal": "LE", "greater": "GT", "greater_equal": "GE",
           "equal": "EQ", "not_equal": "NE"}


def common_dtype(*xs):
    """NumPy's result dtype of the operands; Python scalars are weak (NEP 50)."""
    parts = []
    for x in xs:
        if isinstance(x, Literal):
            v = x.value
            parts.append(v if (x.aval.weak and not isinstance(v, np.generic)) else np.asarray(v).dtype)
        else:
            parts.append(x.dtype)
    return np.result_type(*parts)


def _unary(hlo):
    def rule(em, node, x):
        dt, sh = out_aval(node)
        v = em.value(x, dt, sh)
        if dt.kind in "iub" and hlo in ("stablehlo.floor", "stablehlo.ceil", "stablehlo.round_nearest_even"):
            return v
        if dt.kind == "u" and hlo == "stablehlo.abs":
            return v
        return em.unary(hlo, v)
    return rule


def _on_both(apply, operand_dtype):
    """A rule converting both operands to ``operand_dtype(node, x, y)`` at the output's shape,
    then emitting ``apply(em, x, y)``."""
    def rule(em, node, x, y):
        _, sh = out_aval(node)
        dt = operand_dtype(node, x, y)
        return apply(em, em.value(x, dt, sh), em.value(y, dt, sh))
    return rule


def _binary(hlo):
    """``hlo`` on both operands in the result dtype."""
    return _on_both(lambda em, x, y: em.binary(hlo, x, y), lambda node, x, y: out_aval(node)[0])


def _compare(direction):
    """A comparison in the operands' common dtype."""
    return _on_both(lambda em, x, y: em.compare(direction, x, y), lambda node, x, y: common_dtype(x, y))


def _logical(hlo):
    """``hlo`` on both operands as booleans."""
    return _on_both(lambda em, x, y: em.binary(hlo, x, y), lambda node, x, y: BOOL)


def _c(em, v: Val, c):
    return em.const(c, v.dtype, v.shape)


def _with_float(fn):
    """A rule computing ``fn(em, v)`` on the operand converted to the result dtype."""
    def rule(em, node, x):
        dt, sh = out_aval(node)
        return fn(em, em.value(x, dt, sh))
    return rule


def _sinh(em, v):
    a = em.unary("stablehlo.exponential_minus_one", v)
    b = em.unary("stablehlo.exponential_minus_one", em.unary("stablehlo.negate", v))
    return em.binary("stablehlo.multiply", em.binary("stablehlo.subtract", a, b), _c(em, v, 0.5))


def _cosh(em, v):
    a = em.unary("stablehlo.exponential", v)
    b = em.unary("stablehlo.exponential", em.unary("stablehlo.negate", v))
    return em.binary("stablehlo.multiply", em.binary("stablehlo.add", a, b), _c(em, v, 0.5))


def _sqrt_one_minus_sq(em, v):
    one = _c(em, v, 1.0)
    return em.unary("stablehlo.sqrt", em.binary("stablehlo.multiply", em.binary("stablehlo.subtract", one, v),
                                                 em.binary("stablehlo.add", one, v)))


def _arcsin(em, v):
    return em.binary("stablehlo.atan2", v, _sqrt_one_minus_sq(em, v))


def _arccos(em, v):
    return em.binary("stablehlo.atan2", _sqrt_one_minus_sq(em, v), v)


def _arctan(em, v):
    return em.binary("stablehlo.atan2", v, _c(em, v, 1.0))


def _arcsinh(em, v):
    a = em.unary("stablehlo.abs", v)
    one = _c(em, v, 1.0)
    a2 = em.binary("stablehlo.multiply", a, a)
    den = em.binary("stablehlo.add", one, em.unary("stablehlo.sqrt", em.binary("stablehlo.add", one, a2)))
    small = em.unary("stablehlo.log_plus_one", em.binary("stablehlo.add", a, em.binary("stablehlo.divide", a2, den)))
    big = em.binary("stablehlo.add", em.unary("stablehlo.log", a), _c(em, v, np.log(2.0)))
    r = em.select(em.compare("GT", a, _c(em, v, 2.0 ** 28)), big, small)
    neg = em.compare("LT", v, _c(em, v, 0.0))
    return em.select(neg, em.unary("stablehlo.negate", r), r)


def _arctanh(em, v):
    one = _c(em, v, 1.0)
    q = em.binary("stablehlo.divide", em.binary("stablehlo.add", v, v), em.binary("stablehlo.subtract", one, v))
    return em.binary("stablehlo.multiply", em.unary("stablehlo.log_plus_one", q), _c(em, v, 0.5))


def _reciprocal(em, v):
    return em.binary("stablehlo.divide", _c(em, v, 1), v)


def _isfinite(em, node, x):
    _, sh = out_aval(node)
    v = em.value(x)
    if v.dtype.kind not in "fV" and v.dtype.name != "bfloat16":
        return em.const(True, BOOL, sh)
    return em.op("stablehlo.is_finite", [em.value(v, None, sh)], (BOOL, sh))


def _logical_not(em, node, x):
    _, sh = out_aval(node)
    return em.unary("stablehlo.not", em.value(x, BOOL, sh))


def _remainder(em, node, x, y):
    """NumPy's floored modulo: the result has the sign of the divisor."""
    dt, sh = out_aval(node)
    a, b = em.value(x, dt, sh), em.value(y, dt, sh)
    r = em.binary("stablehlo.remainder", a, b)
    if dt.kind == "u":
        return r
    zero = _c(em, r, 0)
    fix = em.binary("stablehlo.and", em.compare("NE", r, zero),
                    em.compare("NE", em.compare("LT", r, zero), em.compare("LT", b, zero)))
    return em.select(fix, em.binary("stablehlo.add", r, b), r)


def _floor_divide(em, node, x, y):
    """NumPy's floor division (``npy_divmod`` for floats)."""
    dt, sh = out_aval(node)
    a, b = em.value(x, dt, sh), em.value(y, dt, sh)
    if dt.kind in "iu":
        q = em.binary("stablehlo.divide", a, b)
        if dt.kind == "u":
            return q
        zero = _c(em, a, 0)
        r = em.binary("stablehlo.remainder", a, b)
        fix = em.binary("stablehlo.and", em.compare("NE", r, zero),
                        em.compare("NE", em.compare("LT", a, zero), em.compare("LT", b, zero)))
        return em.select(fix, em.binary("stablehlo.subtract", q, _c(em, q, 1)), q)
    zero = _c(em, a, 0.0)
    mod = em.binary("stablehlo.remainder", a, b)
    div = em.binary("stablehlo.divide", em.binary("stablehlo.subtract", a, mod), b)
    adjust = em.binary("stablehlo.and", em.compare("NE", mod, zero),
                       em.compare("NE", em.compare("LT", b, zero), em.compare("LT", mod, zero)))
    div = em.select(adjust, em.binary("stablehlo.subtract", div, _c(em, div, 1.0)), div)
    fl = em.unary("stablehlo.floor", div)
    fl = em.select(em.compare("GT", em.binary("stablehlo.subtract", div, fl), _c(em, div, 0.5)),
                   em.binary("stablehlo.add", fl, _c(em, fl, 1.0)), fl)
    quot = em.binary("stablehlo.divide", a, b)
    signed_zero = em.binary("stablehlo.multiply", zero, quot)     # copysign(0, a / b) up to NaN
    fl = em.select(em.compare("EQ", div, zero), signed_zero, fl)
    return em.select(em.compare("EQ", b, zero), quot, fl)


def _integer_pow(em, node, x):
    """Square-and-multiply, as the NumPy implementation (bit-identical)."""
    dt, sh = out_aval(node)
    y = node.params["y"]
    v = em.value(x, dt, sh)
    if y == 0:
        return _c(em, v, 1)
    n, acc = abs(y), None
    while n > 0:
        if n & 1:
            acc = v if acc is None else em.binary("stablehlo.multiply", acc, v)
        n >>= 1
        if n > 0:
            v = em.binary("stablehlo.multiply", v, v)
    return _reciprocal(em, acc) if y < 0 else acc


def _convert(em, node, x):
    dt, sh = out_aval(node)
    return em.value(x, dt, sh)


def _select(em, node, p, x, y):
    dt, sh = out_aval(node)
    return em.select(em.value(p, BOOL, sh), em.value(x, dt, sh), em.value(y, dt, sh))


def _clamp(em, node, lo, x, hi):
    dt, sh = out_aval(node)
    v = em.binary("stablehlo.maximum", em.value(x, dt, sh), em.value(lo, dt, sh))
    return em.binary("stablehlo.minimum", v, em.value(hi, dt, sh))


def _safe_mul(em, node, a, b):
    dt, sh = out_aval(node)
    a, b = em.value(a, dt, sh), em.value(b, dt, sh)
    prod = em.binary("stablehlo.multiply", a, b)
    if dt.kind not in "fcV" and dt.name != "bfloat16":
        return prod
    zero = _c(em, prod, 0)
    hit = em.binary("stablehlo.or", em.compare("EQ", a, zero), em.compare("EQ", b, zero))
    return em.select(hit, zero, prod)


def _safe_div(em, node, a, b):
    dt, sh = out_aval(node)
    a, b = em.value(a, dt, sh), em.value(b, dt, sh)
    quot = em.binary("stablehlo.divide", a, b)
    zero = _c(em, quot, 0)
    return em.select(em.compare("EQ", a, zero), zero, quot)


LOWERINGS = {name: _unary(hlo) for name, hlo in UNARY_HLO.items()}
LOWERINGS.update({name: _binary(hlo) for name, hlo in BINARY_HLO.items()})
LOWERINGS.update({name: _compare(d) for name, d in COMPARE.items()})
LOWERINGS.update({
    "logical_and": _logical("stablehlo.and"), "logical_or": _logical("stablehlo.or"),
    "sinh": _with_float(_sinh), "cosh": _with_float(_cosh), "arcsin": _with_float(_arcsin),
    "arccos": _with_float(_arccos), "arctan": _with_float(_arctan), "arcsinh": _with_float(_arcsinh),
    "arctanh": _with_float(_arctanh), "reciprocal": _with_float(_reciprocal),
    "isfinite": _isfinite, "logical_not": _logical_not, "remainder": _remainder,
    "floor_divide": _floor_divide, "integer_pow": _integer_pow, "convert": _convert,
    "select": _select, "clamp": _clamp, "safe_mul": _safe_mul, "safe_div": _safe_div,
})
