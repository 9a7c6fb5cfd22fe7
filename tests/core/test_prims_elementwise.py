"""Elementwise primitives' NumPy implementations against independent oracles.

Oracles: NumPy/SciPy in the same dtype (bits, NaN where NaN is expected),
JAX/XLA on float32 where StableHLO semantics differ from NumPy (sign of zero,
round-half-even, integer_pow's multiplications, clamp, float->int convert),
float64 formulas rounded to float32 with an explicit ulp bound, and analytic
values at the edges (0, -0, ±inf, NaN). Empty dims keep their shape.
"""
import itertools

import jax
import numpy as np
import pytest
import scipy.special

from tlaloc._prims import REGISTRY
from tlaloc._prims.elementwise import convert, integer_pow

import jax.numpy as jnp

from . import mp_oracle
from .helpers import BF16, EDGES, assert_same_values, assert_within_ulp, sample

FLOATS = [np.float32, np.float64]
rng = np.random.default_rng(1234)


def inputs(dtype, lo=-3.0, hi=3.0, n=200):
    """Random values in [lo, hi) plus every edge value, in ``dtype``."""
    with np.errstate(over="ignore"):
        return np.concatenate([sample(dtype, (n,), rng, lo, hi), np.array(EDGES, dtype)])


def run(name, *args, **params):
    with np.errstate(all="ignore"):
        return REGISTRY[name].impl(*args, **params)


# -- unary: mpmath (transcendental) and JAX float64 (exact functions) ----------------------
# The implementation calls NumPy's ufuncs, so NumPy cannot be the oracle. ULPS: the bound
# after one correct rounding of the mpmath value. float64: glibc's libm is within 1 ulp for
# these; float32: NumPy's SIMD float32 kernels are documented within 4 ulp, measured <= 2
# (exp, arcsin) here, so 2. A wrong formula or a dropped term is off by far more
# (``test_negative_control_ulp_bound_sees_a_1e6_relative_fault``).
ULPS = {np.float32: 2, np.float64: 1}
EXACT_UNARY = {"abs": jnp.abs, "floor": jnp.floor, "ceil": jnp.ceil, "negative": jnp.negative,
               "isfinite": jnp.isfinite}
NUMPY_UNARY = dict(mp_oracle.FUNCTIONS, **EXACT_UNARY)        # every name the ufunc table covers


def _domain(name, dtype):
    lo, hi = {"arcsin": (-1, 1), "arctanh": (-1, 1), "log": (0, 6), "sqrt": (0, 6), "log1p": (-0.99, 3)}.get(
        name, (-3, 3))
    return np.concatenate([inputs(dtype), sample(dtype, (100,), rng, lo, hi)])


def assert_zero_signs_equal(actual, expected):
    both = (actual == 0) & (expected == 0)
    np.testing.assert_array_equal(np.signbit(actual[both]), np.signbit(expected[both]), err_msg="sign of zero")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(mp_oracle.FUNCTIONS))
def test_unary_within_ulps_of_mpmath(name, dtype):
    x = _domain(name, dtype)
    got, want = run(name, x), mp_oracle.reference(name, x)
    assert got.dtype == want.dtype == dtype
    assert_within_ulp(got, want, ULPS[dtype])
    assert_zero_signs_equal(got, want)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(EXACT_UNARY))
def test_exact_unary_matches_jax_float64(name, dtype):
    x = inputs(dtype)
    with jax.enable_x64(True):
        want = np.asarray(EXACT_UNARY[name](x.astype(np.float64)))
    assert_same_values(run(name, x), want.astype(np.bool_ if name == "isfinite" else dtype))


def test_negative_control_ulp_bound_sees_a_1e6_relative_fault():
    x = _domain("sin", np.float32)
    want = mp_oracle.reference("sin", x)
    with pytest.raises(AssertionError, match="ulp distance"):
        assert_within_ulp((want * np.float32(1 + 1e-6)).astype(np.float32), want, ULPS[np.float32])
    with pytest.raises(AssertionError, match="sign of zero"):
        assert_zero_signs_equal(np.array([0.0]), np.array([-0.0]))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(NUMPY_UNARY) + ["logistic", "rsqrt", "sign", "round"])
def test_unary_keeps_empty_dims(name, dtype):
    out = run(name, np.zeros((0, 3), dtype))
    assert out.shape == (0, 3)
    assert out.dtype == (np.bool_ if name == "isfinite" else dtype)


# Analytic values: (primitive, input, expected) — exact, including the sign of zero.
ANALYTIC = [
    ("exp", 0.0, 1.0), ("exp", -np.inf, 0.0), ("exp", np.inf, np.inf), ("log", 1.0, 0.0),
    ("log", 0.0, -np.inf), ("log", -0.0, -np.inf), ("log", -1.0, np.nan), ("log", np.inf, np.inf),
    ("log1p", -1.0, -np.inf), ("log1p", -0.0, -0.0), ("expm1", -0.0, -0.0), ("expm1", -np.inf, -1.0),
    ("sin", -0.0, -0.0), ("sin", np.inf, np.nan), ("cos", 0.0, 1.0), ("tan", -0.0, -0.0),
    ("tanh", np.inf, 1.0), ("tanh", -np.inf, -1.0), ("tanh", -0.0, -0.0),
    ("sqrt", -0.0, -0.0), ("sqrt", -1.0, np.nan), ("sqrt", np.inf, np.inf),
    ("rsqrt", 0.0, np.inf), ("rsqrt", -0.0, -np.inf), ("rsqrt", np.inf, 0.0), ("rsqrt", 4.0, 0.5),
    ("rsqrt", -1.0, np.nan), ("logistic", 0.0, 0.5), ("logistic", np.inf, 1.0),
    ("logistic", -np.inf, 0.0), ("logistic", np.nan, np.nan), ("abs", -0.0, 0.0),
    ("sign", -0.0, -0.0), ("sign", 0.0, 0.0), ("sign", -np.inf, -1.0), ("sign", np.nan, np.nan),
    ("floor", -0.5, -1.0), ("ceil", -0.5, -0.0), ("round", 0.5, 0.0), ("round", 1.5, 2.0),
    ("round", 2.5, 2.0), ("round", -0.5, -0.0), ("round", -2.5, -2.0), ("negative", 0.0, -0.0),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name,x,expected", ANALYTIC, ids=[f"{n}({x})" for n, x, _ in ANALYTIC])
def test_unary_analytic_values(name, x, expected, dtype):
    assert_same_values(run(name, np.array([x], dtype)), np.array([expected], dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_logistic_vs_scipy_expit(dtype):
    """Against float64 ``expit`` rounded to ``dtype`` (SciPy's own float32 expit
    flushes results below ~1e-38 to 0; ours keeps the subnormals)."""
    x = np.concatenate([inputs(dtype, -40, 40), np.array([-745, -100, -90, 100, 745], dtype)])
    assert_within_ulp(run("logistic", x), scipy.special.expit(x.astype(np.float64)).astype(dtype), 2)


def test_logistic_float32_vs_float64_formula():
    x = inputs(np.float32, -20, 20)
    with np.errstate(over="ignore"):
        exact = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    assert_within_ulp(run("logistic", x), exact, 2)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rsqrt_vs_reciprocal_sqrt(dtype):
    x = np.concatenate([inputs(dtype, 0, 1e6), np.array([1e-30, 1e30], dtype)])
    with np.errstate(all="ignore"):
        exact = (1 / np.sqrt(x.astype(np.longdouble))).astype(dtype)
    assert_within_ulp(run("rsqrt", x), exact, 1)


def test_sign_and_round_match_xla_float32():
    """StableHLO keeps the sign of zero in ``sign`` and rounds half to even."""
    x = inputs(np.float32)
    assert_same_values(run("sign", x), np.asarray(jax.lax.sign(x)))
    halves = np.arange(-6, 6, 0.5, dtype=np.float32)
    assert_same_values(run("round", halves),
                       np.asarray(jax.lax.round(halves, jax.lax.RoundingMethod.TO_NEAREST_EVEN)))


def test_sign_matches_xla_float64():
    x = inputs(np.float64)
    with jax.enable_x64(True):
        assert_same_values(run("sign", x), np.asarray(jax.lax.sign(x)))


def test_regression_sign_of_negative_zero():
    """Was NumPy's sign(-0.0) = +0.0; StableHLO and JAX give -0.0."""
    out = run("sign", np.array([-0.0]))
    assert np.signbit(out[0])


# -- integer_pow ------------------------------------------------------------------------
POWERS = [-3, -2, -1, 0, 1, 2, 3, 4, 5, 7, 12]


@pytest.mark.parametrize("y", POWERS)
def test_integer_pow_matches_xla_bits_float32(y):
    """Regression: was ``np.power`` (one rounding); XLA multiplies (square and
    multiply), so bits differed for y >= 3."""
    x = inputs(np.float32)
    assert_same_values(integer_pow(x, y), np.asarray(jax.lax.integer_pow(x, y)))


@pytest.mark.parametrize("y", POWERS)
def test_integer_pow_float64_near_power(y):
    """Each multiplication rounds once: at most |y| ulp from the one-rounding pow."""
    x = inputs(np.float64, -2, 2)
    with np.errstate(all="ignore"):
        expected = np.power(x, float(y))
    assert_within_ulp(integer_pow(x, y), expected, max(1, abs(y)))


def test_integer_pow_edges_and_ints():
    assert_same_values(integer_pow(np.array([np.nan, 0.0, np.inf]), 0), np.ones(3))
    assert_same_values(integer_pow(np.array([0.0, -0.0]), -1), np.array([np.inf, -np.inf]))
    assert_same_values(integer_pow(np.array([-0.0]), 3), np.array([-0.0]))
    assert_same_values(integer_pow(np.array([3, -2], np.int32), 3), np.array([27, -8], np.int32))
    assert_same_values(integer_pow(np.array([2, 4]), -1), np.array([0.5, 0.25]))


def test_negative_control_power_is_not_repeated_multiplication():
    """The float32 check above can fail: np.power differs from XLA somewhere."""
    x = inputs(np.float32)
    with pytest.raises(AssertionError), np.errstate(over="ignore"):
        assert_same_values(np.power(x, np.float32(5)), np.asarray(jax.lax.integer_pow(x, 5)))


# -- binary: JAX (jax.numpy, NumPy's conventions on XLA) in float64, and Python's float operators --------
# JAX in float64, rounded once to the dtype: exact for +, -, *, / of float32 inputs (float64
# holds their exact results to within the double-rounding-safe margin) and for comparisons.
JAX_BINARY = {
    "add": jnp.add, "subtract": jnp.subtract, "multiply": jnp.multiply, "divide": jnp.divide,
    "power": jnp.power, "maximum": jnp.maximum, "minimum": jnp.minimum, "arctan2": jnp.arctan2,
    "remainder": jnp.remainder, "floor_divide": jnp.floor_divide, "less": jnp.less,
    "less_equal": jnp.less_equal, "greater": jnp.greater, "greater_equal": jnp.greater_equal,
    "equal": jnp.equal, "not_equal": jnp.not_equal, "logical_and": jnp.logical_and,
    "logical_or": jnp.logical_or,
}
NUMPY_BINARY = JAX_BINARY                                   # every name the binary table covers
# power and arctan2 are transcendental: held to ULPS of the float64 result rounded once
# (float32: NumPy's SIMD kernels, measured <= 2 ulp; float64: libm vs XLA, measured 1).
BINARY_ULPS = ("power", "arctan2")
# IEEE 754 leaves max/min(+0, -0) unspecified; NumPy's remainder and floor_divide give a zero
# the sign Python's float % and // give, which jax.numpy does not follow: those zeros are held
# to Python's operators instead (``test_remainder_floor_divide_match_python_floats``).
ZERO_SIGN_FREE = ("maximum", "minimum", "remainder", "floor_divide")


def _edge_pairs(dtype):
    pairs = np.array(list(itertools.product(EDGES, repeat=2)), dtype)
    return (np.concatenate([pairs[:, 0], sample(dtype, (100,), rng)]),
            np.concatenate([pairs[:, 1], sample(dtype, (100,), rng)]))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(JAX_BINARY))
def test_binary_matches_jax_float64_on_all_edge_pairs(name, dtype):
    x, y = _edge_pairs(dtype)
    with jax.enable_x64(True), np.errstate(over="ignore"):
        want = np.asarray(JAX_BINARY[name](x.astype(np.float64), y.astype(np.float64)))
        want = want.astype(dtype) if want.dtype.kind == "f" else want
    got = run(name, x, y)
    if name in BINARY_ULPS:
        assert got.dtype == want.dtype
        assert_within_ulp(got, want, ULPS[dtype])
        assert_zero_signs_equal(got, want)
    elif name in ZERO_SIGN_FREE:
        assert_same_values(np.where(got == 0, 0.0, got).astype(dtype), np.where(want == 0, 0.0, want).astype(dtype))
    else:
        assert_same_values(got, want)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name,op", [("remainder", lambda a, b: a % b), ("floor_divide", lambda a, b: a // b)])
def test_remainder_floor_divide_match_python_floats(name, op, dtype):
    """Every nonzero divisor, bits and sign of zero included, against CPython's float operators."""
    x, y = _edge_pairs(dtype)
    keep = y != 0
    x, y = x[keep], y[keep]
    with np.errstate(over="ignore"):
        want = np.array([op(float(a), float(b)) for a, b in zip(x, y)]).astype(dtype)
    assert_same_values(run(name, x, y), want)


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_max_min_propagate_nan_as_xla(name):
    x = np.array([np.nan, 1.0, np.nan, -0.0], np.float32)
    y = np.array([1.0, np.nan, np.nan, 0.0], np.float32)
    lax = {"maximum": jax.lax.max, "minimum": jax.lax.min}[name]
    out = run(name, x, y)
    assert np.isnan(out[:3]).all()
    assert_same_values(out[:3], np.asarray(lax(x, y))[:3])


@pytest.mark.parametrize("name", sorted(NUMPY_BINARY))
def test_binary_broadcasts_empty_dims(name):
    out = run(name, np.ones((0, 1)), np.ones((1, 3)))
    assert out.shape == (0, 3)


# -- select / clamp -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
def test_select_matches_xla(dtype):
    x, y = inputs(dtype), inputs(dtype)[::-1].copy()
    pred = rng.random(x.shape) < 0.5
    with jax.enable_x64(True):
        assert_same_values(run("select", pred, x, y), np.asarray(jax.lax.select(pred, x, y)))
    assert_same_values(run("select", np.array(True), x, np.nan), x)      # NaN branch not taken


@pytest.mark.parametrize("dtype", FLOATS)
def test_clamp_matches_xla(dtype):
    x = inputs(dtype)
    lo, hi = dtype(-1.0), dtype(0.5)
    with jax.enable_x64(True):
        assert_same_values(run("clamp", lo, x, hi), np.asarray(jax.lax.clamp(lo, x, hi)))


def test_clamp_matches_xla_float32():
    x = inputs(np.float32)
    lo, hi = np.float32(-1.0), np.float32(0.5)
    assert_same_values(run("clamp", lo, x, hi), np.asarray(jax.lax.clamp(lo, x, hi)))


# -- convert -------------------------------------------------------------------------------
def test_convert_float_rounding_matches_xla():
    x = inputs(np.float64, -1e3, 1e3)
    with jax.enable_x64(True):
        cvt = jax.lax.convert_element_type
        assert_same_values(convert(x, np.float32), np.asarray(cvt(x, np.float32)))
        assert_same_values(convert(x, BF16), np.asarray(cvt(x, BF16)))
        x32 = x.astype(np.float32)
        assert_same_values(convert(x32, np.float64), np.asarray(cvt(x32, np.float64)))


@pytest.mark.parametrize("target", [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.bool_])
def test_convert_float32_to_int_matches_xla(target):
    """Regression: NumPy's cast of NaN / out-of-range floats is undefined (int32
    NaN gave -2**31); XLA truncates, saturates and maps NaN to 0."""
    x = np.concatenate([inputs(np.float32, -300, 300),
                        np.array([1e10, -1e10, 2147483647.5, 4294967296.0, 2.0**63], np.float32)])
    with jax.enable_x64(True):                      # int64 results need x64
        expected = np.asarray(jax.lax.convert_element_type(x, target))
    assert_same_values(convert(x, target), expected)


def test_convert_float64_to_int_saturates():
    x = np.array([np.nan, 1e300, -1e300, 9.3e18, -9.3e18, 2147483647.5, -2.5])
    assert_same_values(convert(x, np.int64), np.array([0, 2**63 - 1, -2**63, 2**63 - 1, -2**63,
                                                       2147483647, -2], np.int64))
    assert_same_values(convert(x, np.int32), np.array([0, 2**31 - 1, -2**31, 2**31 - 1, -2**31,
                                                       2**31 - 1, -2], np.int32))


# -- comparison helpers: negative controls -----------------------------------------------
def test_negative_control_same_values_is_strict():
    with pytest.raises(AssertionError):
        assert_same_values(np.array([-0.0]), np.array([0.0]))             # sign of zero
    with pytest.raises(AssertionError):
        assert_same_values(np.array([np.nan]), np.array([1.0]))           # NaN where a number is due
    with pytest.raises(AssertionError):
        assert_same_values(np.array([1.0]), np.array([np.nextafter(1.0, 2.0)]))
    with pytest.raises(AssertionError):
        assert_same_values(np.array([1.0], np.float32), np.array([1.0]))  # dtype
    with pytest.raises(AssertionError):
        assert_within_ulp(np.array([1.0]), np.array([1.0 + 3 * 2.0**-52]), 2)
    assert_within_ulp(np.array([1.0]), np.array([1.0 + 2 * 2.0**-52]), 2)
