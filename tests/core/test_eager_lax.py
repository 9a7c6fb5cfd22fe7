"""``tlaloc.numpy.lax`` on concrete arrays: the eager entry points (``_prims/_eager.py``)
must give what ``Primitive.bind`` gives, bit for bit, and refuse what it refuses.

Generated derivative code runs through these entries, so every case here is one
the fast paths could get wrong: float32/float64 mixes, weak Python floats with
NumPy's floats and bfloat16, NumPy scalars (a full reduction's result), symbolic
values, foreign arrays, and the NaN-safe products without warnings.
"""
import warnings

import numpy as np
import pytest

import tlaloc as tl
from tlaloc import dtypes as _dt
from tlaloc._core.primitive import REGISTRY
from tlaloc.errors import DTypeError
from tlaloc.numpy import lax

F64 = np.array([[1.5, -2.0], [0.25, 3.0]])
F32 = F64.astype(np.float32)
BF16 = F64.astype(_dt.bfloat16)

BINARY_CASES = [
    (F64, F64), (F32, F32), (BF16, BF16), (F64, 0.5), (0.5, F32), (BF16, 0.5), (2, F64), (F64, np.float64(2.0)),
    (np.float64(2.0), np.float64(3.0)), (np.arange(4), 0.5), (np.arange(4), np.arange(4)), (F64, F64[:, :1]),
]


def _same(a, b):
    assert type(a) is type(b)
    assert np.asarray(a).dtype == np.asarray(b).dtype
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "power", "maximum",
                                  "safe_mul", "safe_div", "less"])
@pytest.mark.parametrize("k", range(len(BINARY_CASES)))
def test_binary_entry_equals_bind(name, k):
    x, y = BINARY_CASES[k]
    _same(getattr(lax, name)(x, y), REGISTRY[name].bind(x, y))


@pytest.mark.parametrize("name", ["add", "multiply", "matmul"])
def test_float_mix_promotes_and_strict_mode_refuses_it(name):
    for a, b in ((F64, F32), (F32, F64)):
        _same(getattr(lax, name)(a, b), getattr(np, name)(a, b))          # NumPy's promotion
        with tl.numpy_dtype_promotion("strict"):
            with pytest.raises(DTypeError):
                getattr(lax, name)(a, b)


@pytest.mark.parametrize("name", ["safe_mul", "safe_div"])
def test_derivative_products_promote_a_float_mix(name):
    # derivative code multiplies a float64 cotangent (NumPy promoted float32 * int64) by a
    # float32 partial (tests/ad/test_promoted_dtypes.py): NumPy's result, eagerly and bound
    for a, b in ((F64, F32), (F32, F64)):
        want = getattr(np, {"safe_mul": "multiply", "safe_div": "divide"}[name])(a, b)
        _same(getattr(lax, name)(a, b), want)
        _same(REGISTRY[name].bind(a, b), want)


def test_weak_float_adopts_bfloat16():
    out = lax.multiply(BF16, 0.5)
    assert out.dtype == _dt.bfloat16


@pytest.mark.parametrize("x", [F64, F32, np.float64(0.5), np.array(0.25)])
def test_unary_and_reduction_entries_equal_bind(x):
    for name in ("sqrt", "tanh", "negative", "exp"):
        _same(getattr(lax, name)(x), REGISTRY[name].bind(x))
    _same(lax.reduce_sum(x, axes=None, keepdims=False), REGISTRY["reduce_sum"].bind(x, axes=None, keepdims=False))


def test_contraction_and_shape_helper_entries_equal_bind():
    g = np.ones((2, 2))
    for name, args in [("matmul", (F64, F64)), ("matmul_t_lhs", (g, F64, F64)), ("matmul_t_rhs", (g, F64, F64)),
                       ("matmul", (BF16, BF16)), ("sum_to", (F64, F64[:1])), ("sum_to", (F64, F64)),
                       ("broadcast_like", (F64[:1], F64)), ("broadcast_like", (F64, F64)),
                       ("broadcast_like", (np.arange(3.0), np.zeros((4000, 3))))]:
        _same(getattr(lax, name)(*args), REGISTRY[name].bind(*args))


def test_python_scalars_alone_still_fold_weakly():
    assert lax.add(1.0, 2.0) == 3.0 and type(lax.add(1.0, 2.0)) is float


def test_symbolic_values_still_record_nodes():
    def f(x):
        return lax.reduce_sum(lax.multiply(x, 0.5), axes=None, keepdims=False)
    assert tl.grad(f)(F64).tolist() == [[0.5, 0.5], [0.5, 0.5]]


def test_safe_mul_zero_times_inf_or_nan_is_zero_without_warnings():
    a = np.array([0.0, 1.0, 0.0, 2.0])
    b = np.array([np.inf, 2.0, np.nan, np.nan])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):          # the user's setting must not leak in
            out = lax.safe_mul(a, b)
            q = lax.safe_div(np.array([0.0, 1.0]), np.array([0.0, 0.0]))
            s = lax.sqrt(np.array([-1.0]))
    assert out[0] == 0 and out[1] == 2 and out[2] == 0 and np.isnan(out[3])
    assert q[0] == 0 and q[1] == np.inf and np.isnan(s[0])


def test_quiet_restores_the_surrounding_error_state():
    with np.errstate(invalid="raise"):
        lax.sqrt(np.array([-1.0]))
        with pytest.raises(FloatingPointError):
            np.sqrt(np.array([-1.0]))
    with np.errstate(invalid="warn"):
        lax.safe_mul(np.array([0.0]), np.array([np.inf]))
        with pytest.warns(RuntimeWarning):
            np.multiply(np.array([0.0]), np.array([np.inf]))


def test_safe_mul_by_a_finite_literal_is_a_plain_multiply():
    def f(x):
        return (x * 0.02).sum()
    src = tl.source(tl.grad(f))
    assert "lax.multiply(" in src and "safe_mul" not in src


@pytest.mark.parametrize("x_shape,like", [((64, 64), (64,)), ((3, 6, 5), (6, 5)), ((7, 5, 3), (3,)), ((16, 1), ()),
                                          ((1024, 2), ()), ((5, 4), (1, 4)), ((2, 5, 4), (5, 1))])
@pytest.mark.parametrize("order", "CF")
def test_sum_to_gives_the_bits_of_a_keepdims_sum(x_shape, like, order):
    x = np.asarray(np.random.default_rng(0).standard_normal(x_shape), order=order)
    lead = x.ndim - len(like)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(like) if d == 1 and x_shape[i + lead] != 1)
    want = x.sum(axis=axes, keepdims=True).reshape(like)
    got = lax.sum_to(x, np.zeros(like))
    assert type(got) is np.ndarray and got.shape == like and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("x_shape,y_shape", [((4,), (3, 4, 2)), ((5, 4), (4,)), ((2, 5, 4), (4, 3)), ((5, 4), (2, 4, 3)),
                                             ((4,), (4,)), ((5, 4), (4, 3))])
def test_matmul_adjoints_for_every_operand_rank(x_shape, y_shape):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(x_shape), rng.standard_normal(y_shape)
    g = rng.standard_normal(np.matmul(x, y).shape)
    x_bar = lax.matmul_t_lhs(g, y, x)
    y_bar = lax.matmul_t_rhs(g, x, y)
    # oracle: the gradient of sum(g * (x @ y)) by JAX-free finite algebra (it is linear, so exact)
    basis_x = np.eye(x.size).reshape((x.size,) + x_shape)
    basis_y = np.eye(y.size).reshape((y.size,) + y_shape)
    want_x = np.array([np.sum(g * np.matmul(e, y)) for e in basis_x]).reshape(x_shape)
    want_y = np.array([np.sum(g * np.matmul(x, e)) for e in basis_y]).reshape(y_shape)
    np.testing.assert_allclose(x_bar, want_x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y_bar, want_y, rtol=1e-12, atol=1e-12)
