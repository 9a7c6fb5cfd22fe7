"""Elementwise primitives and their derivative rules.

Unary primitives declare one ``deriv(x, out)`` (dy/dx as an array expression);
both the VJP (``g · deriv``) and the JVP (``ẋ · deriv``) come from it, through
``safe_mul`` so that an exactly-zero cotangent or tangent contributes exactly
zero even where the derivative is infinite (sqrt, log, pow at 0).

Conventions (tested with analytic values in tests/ad/test_conventions.py):
  * ``abs'(0) = 0`` (as PyTorch; jax 0.10's ``jnp.abs`` gives 1) and ``sign'(x) = 0``;
  * ``maximum``/``minimum`` at a tie give each operand half the cotangent (as JAX);
  * ``clamp`` passes the cotangent on the closed interval ``lo <= x <= hi``
    (as PyTorch; JAX's ``lax.clamp`` gives 0 at the bounds and ``jnp.clip`` 0.5);
  * ``floor``/``ceil``/``round``/``sign`` have zero derivative;
  * ``sqrt'(0)`` is ``+inf`` but a zero cotangent through it gives 0, not NaN.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from .._core.primitive import Primitive
from . import _eager
from ._fpstate import quiet
from ._rules import elementwise_dtype, elementwise_shape, refuse_float_mix, same_shape
from .broadcasting import broadcast_like, cast_like, sum_to
from .conversion import convert, convert_p  # noqa: F401  (tlaloc._prims.elementwise.convert, as before the split)


def _declare(name, impl, hlo, nargs, names=None):
    # Derivative code multiplies a cotangent (float64 where NumPy promoted float32 * int64)
    # by a partial (float32): these two promote as NumPy does instead of refusing the mix;
    # ``sum_to`` casts the result back to the operand's dtype (as JAX's convert VJP does).
    p = Primitive(name, impl=refuse_float_mix(name, impl, names or ["x", "y"], promote=True), hlo=hlo,
                  shape_rule=elementwise_shape(name),
                  dtype_rule=elementwise_dtype(name, impl, names, promote=True))
    p.eager = _eager.elementwise(p, impl)
    return p


# -- NaN-safe products (used by every derivative rule) -------------------------

_BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _holds_nan(out) -> bool:
    """Whether a result holds a NaN.

    float32/float64: one BLAS dot product ``out · out``, a sum of squares, so NaN
    exactly when an element is NaN (inf and overflow give inf); half the cost of
    ``np.isnan(out).any()`` on small arrays and no temporary on large ones."""
    dt = out.dtype
    if dt is _BLAS_FLOATS[1] or dt is _BLAS_FLOATS[0]:
        s = np.vdot(out, out)
        return s != s
    return _dt.is_float(dt) and bool(np.isnan(out).any())


@quiet                                           # 0 * inf: replaced by 0 below
def _safe_mul_impl(a, b):
    out = np.multiply(a, b)
    if _holds_nan(out):
        out = np.where((np.asarray(a) == 0) | (np.asarray(b) == 0), out.dtype.type(0), out)
    return out


@quiet
def _safe_div_impl(a, b):
    out = np.divide(a, b)
    if _holds_nan(out):
        out = np.where(np.asarray(a) == 0, out.dtype.type(0), out)
    return out


safe_mul_p = _declare("safe_mul", _safe_mul_impl, "stablehlo.multiply", 2)
safe_div_p = _declare("safe_div", _safe_div_impl, "stablehlo.divide", 2)


def safe_mul(a, b):
    """``a * b``, except that an exact zero in either factor gives exactly 0.

    A float32/float64 mix promotes to float64 (see ``_declare``). A finite non-zero
    Python number as a factor cannot meet ``0 * inf``: that is a plain ``multiply``."""
    if _finite_nonzero(a) or _finite_nonzero(b):
        return mul_p.bind(a, b)
    return safe_mul_p.bind(a, b)


def _finite_nonzero(x) -> bool:
    return type(x) in (float, int) and x != 0 and math.isfinite(x)


def safe_div(a, b):
    """``a / b``, except that ``a == 0`` gives exactly 0 (also where ``b == 0``); float mixes
    promote as in ``safe_mul``."""
    return safe_div_p.bind(a, b)


# -- unary -------------------------------------------------------------------

UNARY: dict[str, Primitive] = {}


def unary(name, impl, hlo, deriv=None, linear=False):
    """Declare a unary elementwise primitive.

    ``deriv(x, out)`` returns dy/dx; ``None`` means the derivative is zero
    (piecewise-constant functions). ``linear`` marks y = c·x maps.
    """
    p = Primitive(name, impl=impl, hlo=hlo, shape_rule=same_shape,
                  dtype_rule=elementwise_dtype(name, impl))
    p.eager = _eager.unary(p)
    p.deriv = deriv
    UNARY[name] = p

    if deriv is None:
        p.vjp = lambda g, x, out: (None,)
        p.jvp = lambda t, x, out: None
    else:
        p.vjp = lambda g, x, out: (safe_mul(g, deriv(x, out)),)
        p.jvp = lambda t, x, out: None if t[0] is None else safe_mul(t[0], deriv(x, out))
    return p


def _np1(fn):
    return quiet(fn)


def _logistic(x):
    x = np.asarray(x)
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x)))).astype(
        x.dtype if _dt.is_float(x.dtype) else np.float64)


def _rsqrt(x):
    return 1 / np.sqrt(x)


def _round_half_even(x):
    return np.round(x)


def _sign(x):
    # StableHLO (and JAX) keep the sign of a zero: sign(-0.0) = -0.0; NumPy gives +0.0.
    x = np.asarray(x)
    out = np.sign(x)
    return np.where(x == 0, x, out) if _dt.is_float(x.dtype) else out


neg_p = unary("negative", np.negative, "stablehlo.negate")
exp_p = unary("exp", _np1(np.exp), "stablehlo.exponential", lambda x, y: y)
log_p = unary("log", _np1(np.log), "stablehlo.log", lambda x, y: reciprocal(x))
log1p_p = unary("log1p", _np1(np.log1p), "stablehlo.log_plus_one", lambda x, y: reciprocal(add(x, 1.0)))
expm1_p = unary("expm1", _np1(np.expm1), "stablehlo.exponential_minus_one", lambda x, y: add(y, 1.0))
sin_p = unary("sin", _np1(np.sin), "stablehlo.sine", lambda x, y: cos(x))
cos_p = unary("cos", _np1(np.cos), "stablehlo.cosine", lambda x, y: negative(sin(x)))
tan_p = unary("tan", _np1(np.tan), "stablehlo.tan", lambda x, y: add(1.0, multiply(y, y)))
tanh_p = unary("tanh", _np1(np.tanh), "stablehlo.tanh", lambda x, y: subtract(1.0, multiply(y, y)))
logistic_p = unary("logistic", _np1(_logistic), "stablehlo.logistic",
                   lambda x, y: multiply(y, subtract(1.0, y)))
sqrt_p = unary("sqrt", _np1(np.sqrt), "stablehlo.sqrt", lambda x, y: divide(0.5, y))
rsqrt_p = unary("rsqrt", _np1(_rsqrt), "stablehlo.rsqrt",
                lambda x, y: multiply(-0.5, divide(y, x)))
abs_p = unary("abs", np.abs, "stablehlo.abs", lambda x, y: sign(x))
sign_p = unary("sign", _sign, "stablehlo.sign")
floor_p = unary("floor", np.floor, "stablehlo.floor")
ceil_p = unary("ceil", np.ceil, "stablehlo.ceil")
round_p = unary("round", _round_half_even, "stablehlo.round_nearest_even")
arcsin_p = unary("arcsin", _np1(np.arcsin), "chlo.asin",
                 lambda x, y: rsqrt(subtract(1.0, multiply(x, x))))
arccos_p = unary("arccos", _np1(np.arccos), "chlo.acos",
                 lambda x, y: negative(rsqrt(subtract(1.0, multiply(x, x)))))
arctan_p = unary("arctan", _np1(np.arctan), "chlo.atan",
                 lambda x, y: reciprocal(add(1.0, multiply(x, x))))
sinh_p = unary("sinh", _np1(np.sinh), "chlo.sinh", lambda x, y: cosh(x))
cosh_p = unary("cosh", _np1(np.cosh), "chlo.cosh", lambda x, y: sinh(x))
arcsinh_p = unary("arcsinh", _np1(np.arcsinh), "chlo.asinh",
                  lambda x, y: rsqrt(add(multiply(x, x), 1.0)))
arctanh_p = unary("arctanh", _np1(np.arctanh), "chlo.atanh",
                  lambda x, y: reciprocal(subtract(1.0, multiply(x, x))))
logical_not_p = unary("logical_not", np.logical_not, "stablehlo.not")
isfinite_p = unary("isfinite", np.isfinite, "stablehlo.is_finite")
neg_p.vjp = lambda g, x, out: (negative(g),)
neg_p.jvp = lambda t, x, out: None if t[0] is None else negative(t[0])


@quiet
def _reciprocal_impl(x):
    return np.reciprocal(x) if _dt.is_float(np.asarray(x).dtype) else np.divide(1.0, x)


reciprocal_p = unary("reciprocal", _reciprocal_impl, "stablehlo.divide",
                     lambda x, y: negative(multiply(y, y)))


# -- binary ------------------------------------------------------------------

def binary(name, impl, hlo):
    p = Primitive(name, impl=refuse_float_mix(name, impl, ["x", "y"]), hlo=hlo, shape_rule=elementwise_shape(name),
                  dtype_rule=elementwise_dtype(name, impl, ["x", "y"]))
    p.eager = _eager.elementwise(p, impl)
    return p


def _np2(fn):
    return quiet(fn)


add_p = binary("add", np.add, "stablehlo.add")
sub_p = binary("subtract", np.subtract, "stablehlo.subtract")
mul_p = binary("multiply", np.multiply, "stablehlo.multiply")
div_p = binary("divide", _np2(np.divide), "stablehlo.divide")
pow_p = binary("power", _np2(np.power), "stablehlo.power")
max_p = binary("maximum", np.maximum, "stablehlo.maximum")
min_p = binary("minimum", np.minimum, "stablehlo.minimum")
atan2_p = binary("arctan2", np.arctan2, "stablehlo.atan2")
rem_p = binary("remainder", _np2(np.remainder), "stablehlo.remainder")
floordiv_p = binary("floor_divide", _np2(np.floor_divide), "stablehlo.divide")
lt_p = binary("less", np.less, "stablehlo.compare LT")
le_p = binary("less_equal", np.less_equal, "stablehlo.compare LE")
gt_p = binary("greater", np.greater, "stablehlo.compare GT")
ge_p = binary("greater_equal", np.greater_equal, "stablehlo.compare GE")
eq_p = binary("equal", np.equal, "stablehlo.compare EQ")
ne_p = binary("not_equal", np.not_equal, "stablehlo.compare NE")
and_p = binary("logical_and", np.logical_and, "stablehlo.and")
or_p = binary("logical_or", np.logical_or, "stablehlo.or")

for _p in (lt_p, le_p, gt_p, ge_p, eq_p, ne_p, and_p, or_p, floordiv_p):
    _p.vjp = lambda g, x, y, out: (None, None)
    _p.jvp = lambda t, x, y, out: None


def add(x, y): return add_p.bind(x, y)
def subtract(x, y): return sub_p.bind(x, y)
def multiply(x, y): return mul_p.bind(x, y)
def divide(x, y): return div_p.bind(x, y)
def negative(x): return neg_p.bind(x)
def reciprocal(x): return reciprocal_p.bind(x)
def sin(x): return sin_p.bind(x)
def cos(x): return cos_p.bind(x)
def sinh(x): return sinh_p.bind(x)
def cosh(x): return cosh_p.bind(x)
def sign(x): return sign_p.bind(x)
def rsqrt(x): return rsqrt_p.bind(x)
def log(x): return log_p.bind(x)
def equal(x, y): return eq_p.bind(x, y)
def maximum(x, y): return max_p.bind(x, y)


def _tangent_sum(*terms, like=None):
    """The sum of the tangent ``terms`` (None: zero). With ``like`` (the output), a lone term
    is broadcast to its shape: the tangent of ``x + s`` in ``s`` alone has ``x``'s shape, as
    every tangent has its primal's (regression: ``jacfwd(lambda x, s: (x + s).sum(),
    argnums=1)`` gave 1.0, not ``x.size``)."""
    terms = [t for t in terms if t is not None]
    if not terms:
        return None
    out = terms[0]
    if len(terms) == 1 and like is not None:
        return broadcast_like(out, like)
    for t in terms[1:]:
        out = add(out, t)
    return out


def _def_binary(p, dx, dy):
    """Binary rule from partials ``dx(x, y, out)``, ``dy(x, y, out)`` (None: zero)."""
    def vjp(g, x, y, out):
        gx = None if dx is None else sum_to(safe_mul(g, dx(x, y, out)), x)
        gy = None if dy is None else sum_to(safe_mul(g, dy(x, y, out)), y)
        return gx, gy

    def jvp(t, x, y, out):
        tx = None if (dx is None or t[0] is None) else safe_mul(t[0], dx(x, y, out))
        ty = None if (dy is None or t[1] is None) else safe_mul(t[1], dy(x, y, out))
        return _tangent_sum(tx, ty, like=out)
    p.vjp, p.jvp = vjp, jvp


add_p.vjp = lambda g, x, y, out: (sum_to(g, x), sum_to(g, y))
add_p.jvp = lambda t, x, y, out: _tangent_sum(t[0], t[1], like=out)
sub_p.vjp = lambda g, x, y, out: (sum_to(g, x), sum_to(negative(g), y))
sub_p.jvp = lambda t, x, y, out: _tangent_sum(t[0], None if t[1] is None else negative(t[1]), like=out)
_def_binary(mul_p, lambda x, y, o: y, lambda x, y, o: x)


def _as_out(v, out):
    # v in out's float dtype where NumPy promoted (int64 / float32 is float64; out / v would
    # mix float64 with float32): cast_like is the identity elsewhere; Python numbers stay weak
    return v if type(v) in (bool, int, float, complex) else cast_like(v, out)


def _out_over_y(out, y):
    return divide(out, _as_out(y, out))


div_p.vjp = lambda g, x, y, out: (sum_to(safe_div(g, y), x),
                                  sum_to(negative(safe_mul(g, _out_over_y(out, y))), y))
div_p.jvp = lambda t, x, y, out: _tangent_sum(
    None if t[0] is None else safe_div(t[0], y),
    None if t[1] is None else negative(safe_mul(t[1], _out_over_y(out, y))), like=out)


def _pow_dx(x, y, out):
    # y · x^(y-1); the product is NaN-safe so that y == 0 gives 0 even at x == 0.
    return safe_mul(y, power(_as_out(x, out), subtract(_as_out(y, out), 1.0)))


def _pow_dy(x, y, out):
    # x^y · log(x), and 0 wherever x == 0 (for every y: 0^y is 0, 1 or inf, and we
    # take the derivative in y there as 0, as JAX does at y = 0; JAX gives NaN for y < 0).
    from .selection import select
    return select(equal(x, 0.0), 0.0, safe_mul(out, log(x)))


def power(x, y): return pow_p.bind(x, y)


_def_binary(pow_p, _pow_dx, _pow_dy)


def _balanced(x, y, out):
    """1 where x wins, 0.5 at a tie, 0 where y wins (JAX's convention)."""
    from .selection import select
    # weights in out's float dtype (a where over Python scalars alone would be float64)
    return cast_like(select(equal(x, y), 0.5, select(equal(out, _as_out(x, out)), 1.0, 0.0)), out)


_def_binary(max_p, _balanced, lambda x, y, o: _balanced(y, x, o))
_def_binary(min_p, _balanced, lambda x, y, o: _balanced(y, x, o))
_def_binary(atan2_p, lambda x, y, o: divide(y, add(multiply(x, x), multiply(y, y))),
            lambda x, y, o: negative(divide(x, add(multiply(x, x), multiply(y, y)))))
_def_binary(rem_p, lambda x, y, o: 1.0,
            lambda x, y, o: negative(subtract(divide(subtract(_as_out(x, o), o), _as_out(y, o)), 0.0)))


# -- integer_pow -----------------------------------------------------------------

def _integer_pow_impl(x, *, y):
    # Square-and-multiply, as JAX/XLA expand ``integer_pow`` into multiplies
    # (then 1/acc for y < 0): bit-identical to the lowering, unlike ``np.power``
    # (one correctly rounded ``pow``). Integer inputs with y < 0 give float64.
    x = np.asarray(x)
    if y < 0 and not _dt.is_inexact(x.dtype):
        x = x.astype(np.float64)
    if y == 0:
        return np.ones_like(x)
    n, acc = abs(y), None
    with np.errstate(all="ignore"):
        while n > 0:
            if n & 1:
                acc = x if acc is None else np.multiply(acc, x)
            n >>= 1
            if n > 0:
                x = np.multiply(x, x)
        return np.divide(np.ones_like(acc), acc) if y < 0 else np.asarray(acc)


integer_pow_p = Primitive("integer_pow", impl=_integer_pow_impl, hlo="stablehlo.multiply*",
                          shape_rule=same_shape,
                          dtype_rule=lambda x, *, y: x.dtype if (y >= 0 or x.dtype is None
                                                                  or _dt.is_float(x.dtype)) else np.dtype(np.float64))


def integer_pow(x, y: int):
    return integer_pow_p.bind(x, y=int(y))


def _ipow_deriv(x, y):
    if y == 0:
        return None
    if y == 1:
        return 1.0
    if y == 2:
        return multiply(2.0, x)
    return multiply(float(y), integer_pow(x, y - 1))


integer_pow_p.vjp = lambda g, x, out, y: (None if y == 0 else safe_mul(g, _ipow_deriv(x, y)),)
integer_pow_p.jvp = lambda t, x, out, y: (None if (y == 0 or t[0] is None)
                                          else safe_mul(t[0], _ipow_deriv(x, y)))


# -- rules of the NaN-safe products (second and higher derivatives go through them) --

def _safe_mul_vjp(g, a, b, out):
    return sum_to(safe_mul(g, b), a), sum_to(safe_mul(g, a), b)


def _safe_mul_jvp(t, a, b, out):
    return _tangent_sum(None if t[0] is None else safe_mul(t[0], b),
                        None if t[1] is None else safe_mul(a, t[1]))


def _safe_div_vjp(g, a, b, out):
    return sum_to(safe_div(g, b), a), sum_to(negative(safe_mul(g, safe_div(out, b))), b)


def _safe_div_jvp(t, a, b, out):
    return _tangent_sum(None if t[0] is None else safe_div(t[0], b),
                        None if t[1] is None else negative(safe_mul(t[1], safe_div(out, b))))


safe_mul_p.vjp, safe_mul_p.jvp = _safe_mul_vjp, _safe_mul_jvp
safe_div_p.vjp, safe_div_p.jvp = _safe_div_vjp, _safe_div_jvp
