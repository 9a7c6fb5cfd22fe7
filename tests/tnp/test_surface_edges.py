"""The new NumPy names at ties, zeros, infinities and NaN, and the regressions of
issue 15 (each bug fixed becomes a test here). Oracles: NumPy for values, JAX
(float64) for derivatives, analytic values where JAX has none."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl
import tlaloc.numpy as tnp

from . import edge_programs as E

jax.config.update("jax_enable_x64", True)


def assert_same_values(actual, expected):
    """Same dtype, shape and values, NaN where NaN and the same sign on every zero."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    np.testing.assert_array_equal(actual, expected)
    if actual.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected), err_msg="signs differ")


# -- sort: ties, infinities, NaN --------------------------------------------------------------

TIES = [np.array([1.0, 1.0, 0.0, 1.0, -2.0]), np.array([0.0, -0.0, 0.0, 3.0, -0.0]),
        np.array([np.inf, -np.inf, 1.0, np.inf, 0.5])]


@pytest.mark.parametrize("x", TIES, ids=["ties", "zeros", "infinities"])
def test_sort_gradient_at_ties_matches_jax(x):
    g = tl.grad(E.sort_weighted)(x)
    expected = jax.grad(lambda v: jnp.sum(jnp.sort(v) * jnp.arange(5.0)))(x)
    np.testing.assert_array_equal(g, expected)
    # descending keeps ties in their original order (Array API stable=True), as JAX's argsort;
    # jnp.sort(descending=True) flips an ascending sort instead, which reverses tied elements
    twin = lambda v: jnp.sum(jnp.take_along_axis(v, jnp.argsort(v, descending=True), -1) * jnp.arange(5.0))  # noqa
    np.testing.assert_array_equal(tl.grad(E.sort_desc_weighted)(x), jax.grad(twin)(x))


def test_sort_gradient_is_a_permutation_negative_control():
    g = tl.grad(E.sort_weighted)(TIES[0])
    assert sorted(g) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert not np.array_equal(g, np.arange(5.0))          # a gradient that ignored the sort would be this


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("run", ["eager", "jit"])
def test_sort_and_argsort_with_nan_and_ties(descending, run):
    x = np.array([2.0, np.nan, 1.0, 2.0, -np.inf, 1.0, np.nan, 0.0])
    fn = (lambda v: tnp.argsort(v, descending=descending)) if run == "eager" else \
        tl.jit(lambda v: tnp.argsort(v, descending=descending))
    got = fn(x)
    order = np.argsort(x, kind="stable")
    if descending:                 # stable descending: NaN first, ties in original order
        order = np.array([1, 6, 0, 3, 2, 5, 7, 4])
    np.testing.assert_array_equal(got, order)
    assert_same_values(tnp.sort(x, descending=descending), x[order])


def test_sort_axis_none_and_vmap_of_argsort():
    x = np.array([[3.0, 1.0], [2.0, 0.0]])
    assert_same_values(tnp.sort(x, axis=None), np.sort(x, axis=None))
    assert_same_values(tl.vmap(lambda v: tnp.argsort(v))(x), np.argsort(x, axis=1))


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_at_edges_and_nan(side):
    a = np.array([-np.inf, 0.0, 1.0, 1.0, 2.0, np.nan])
    v = np.array([-np.inf, 0.0, 1.0, 1.5, 2.0, np.inf, np.nan, -1.0])
    assert_same_values(tnp.searchsorted(a, v, side=side), np.searchsorted(a, v, side=side))


# -- elementwise edges -------------------------------------------------------------------------

def test_arccosh_values_and_derivative():
    x = np.array([1.0, 1.0 + 1e-12, 1.5, 10.0, 1e8, 1e300, np.inf, 0.5, np.nan])
    with np.errstate(invalid="ignore"):
        expected = np.arccosh(x)
    got = tnp.arccosh(x)
    np.testing.assert_allclose(got, expected, rtol=4e-16 * 8, equal_nan=True)
    g = tl.grad(E.arccosh_sum)(np.array([1.5, 3.0, 1e10]))
    np.testing.assert_allclose(g, 1 / np.sqrt(np.array([1.5, 3.0, 1e10]) ** 2 - 1), rtol=1e-13)
    assert tl.grad(E.arccosh_sum)(np.array([1.0]))[0] == np.inf


def test_copysign_and_signbit_with_signed_zeros():
    x = np.array([1.0, -2.0, 0.0, 3.0])
    y = np.array([-0.0, 0.0, -1.0, np.inf])
    assert_same_values(tnp.copysign(x, y), np.copysign(x, y))
    assert_same_values(tl.jit(E.signbit_of)(np.array([-0.0, 0.0, -1.0, np.inf])),
                       np.array([True, False, True, False]))
    g = tl.grad(E.copysign_sum, argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(g[0], np.array([0.0, -1.0, 0.0, 3.0]))   # abs'(0) = 0 (tlaloc's convention)
    np.testing.assert_array_equal(g[1], np.zeros(4))


def test_nextafter_eager_and_refused_inside_a_transform():
    assert_same_values(tnp.nextafter(np.array([1.0, 0.0]), 2.0), np.nextafter(np.array([1.0, 0.0]), 2.0))
    with pytest.raises(tl.NoRuleError, match=r"edge_programs.py:\d+:\d+: nextafter"):
        tl.grad(E.nextafter_inside)


# -- regressions of issue 15 -----------------------------------------------------------------

def test_regression_dot_with_a_python_scalar():
    """Was: np.dot(M, 1.5) crashed."""
    m = np.arange(6.0).reshape(2, 3)
    assert_same_values(tnp.dot(m, 1.5), np.dot(m, 1.5))
    np.testing.assert_array_equal(tl.grad(E.dot_scalar_loss)(m), np.full((2, 3), 1.5))


def test_regression_linspace_with_computed_endpoints():
    """Was: np.linspace(a, b, 5) with symbolic endpoints recursed without end."""
    g = tl.grad(E.linspace_loss, argnums=(0, 1))(1.0, 3.0)
    expected = jax.grad(lambda a, b: jnp.sum(jnp.linspace(a * 2.0, b, 5) ** 2), argnums=(0, 1))(1.0, 3.0)
    np.testing.assert_allclose(g, expected, rtol=1e-13)


def test_regression_logaddexp_of_infinities():
    """Was: logaddexp(inf, inf) gave nan."""
    x = np.array([np.inf, -np.inf, np.inf, 0.0])
    y = np.array([np.inf, -np.inf, -np.inf, -np.inf])
    expected = np.logaddexp(x, y)
    assert_same_values(tnp.logaddexp(x, y), expected)
    assert_same_values(tl.jit(E.logaddexp_of)(x, y), expected)


def test_regression_sign_of_negative_zero_is_positive_zero():
    """Was: sign(-0.0) gave -0.0 (the Array API asks for 0; tlaloc gives +0)."""
    x = np.array([-0.0, 0.0, -3.0, np.nan])
    expected = np.array([0.0, 0.0, -1.0, np.nan])
    assert_same_values(tnp.sign(x), expected)
    assert_same_values(tl.jit(E.sign_of)(x), expected)


def test_regression_clip_without_bounds_and_with_keywords():
    x = np.array([-2.0, 0.5, 3.0])
    assert_same_values(tnp.clip(x), x)
    assert_same_values(tnp.clip(x, min=0.0, max=1.0), np.clip(x, 0.0, 1.0))
    assert_same_values(tnp.clip(x, max=1.0), np.minimum(x, 1.0))


def test_regression_ones_like_bool_stays_bool_and_all_any_with_bool_name():
    b = np.array([True, False])
    assert_same_values(tnp.ones_like(b), np.ones_like(b))
    assert tnp.bool == np.bool_
    assert tnp.all(b) == np.False_ and tnp.any(b) == np.True_


def test_regression_linalg_diagonal_uses_the_last_two_axes():
    x = np.arange(24.0).reshape(2, 3, 4)
    assert_same_values(tnp.linalg.diagonal(x, offset=1), np.diagonal(x, 1, -2, -1))


def test_finfo_iinfo_and_result_type():
    f = tnp.finfo(tnp.float32)
    assert isinstance(f.eps, float) and f.eps == float(np.finfo(np.float32).eps) and f.bits == 32
    assert tnp.iinfo(tnp.int8).min == -128
    assert tnp.result_type(tnp.float32, tnp.float64) == np.float64                  # NumPy's promotion
    assert tnp.result_type(np.ones(2, np.float32), 1.0) == np.float32               # NEP 50
    with tl.numpy_dtype_promotion("strict"), pytest.raises(tl.DTypeError):
        tnp.result_type(tnp.float32, tnp.float64)


# -- linear algebra edges ----------------------------------------------------------------------

def test_eigvalsh_gradient_with_a_repeated_eigenvalue_is_finite():
    a = np.diag([1.0, 1.0, 2.0]) + 0.0
    g = tl.grad(E.eigvals_loss)(a)
    expected = jax.grad(lambda m: jnp.sum(jnp.linalg.eigvalsh(m) * jnp.array([1.0, 2.0, 3.0])))(a)
    assert np.all(np.isfinite(g))
    # the eigenvalue derivative is defined up to rotations within the repeated space: compare the trace
    np.testing.assert_allclose(np.trace(g), np.trace(expected), rtol=1e-12)
    np.testing.assert_allclose(g[2, 2], expected[2, 2], rtol=1e-12)


def test_qr_of_a_wide_matrix_matches_jax():
    # was refused (GradientError); JAX defines it, and so does tlaloc now (tests/tnp/test_qr_wide.py)
    a = np.arange(6.0).reshape(2, 3) + np.eye(2, 3)
    np.testing.assert_allclose(tl.grad(E.qr_wide)(a), jax.grad(lambda m: jnp.sum(jnp.linalg.qr(m)[1]))(a),
                               rtol=1e-12, atol=1e-13)


# -- second derivatives ------------------------------------------------------------------------

def test_hessian_of_the_sum_of_squared_singular_values_is_twice_the_identity():
    a = np.random.default_rng(1).standard_normal((4, 3))
    h = tl.hessian(E.svd_frobenius)(a)                     # Σ s² = ‖a‖_F², so H = 2 I
    np.testing.assert_allclose(h.reshape(12, 12), 2 * np.eye(12), atol=1e-10)


def test_hessian_of_sort_and_of_qr_match_jax():
    x = np.array([0.3, -1.0, 2.0, 0.5, 1.5])
    np.testing.assert_array_equal(tl.hessian(E.sort_weighted)(x), np.zeros((5, 5)))
    a = np.random.default_rng(2).standard_normal((4, 3))

    def twin(m):
        q, r = jnp.linalg.qr(m)
        return jnp.sum(r * r * jnp.array([1.0, 2.0, 3.0])) + jnp.sum(q[:, 0] * jnp.diagonal(r)[0])
    np.testing.assert_allclose(tl.hessian(E.qr_loss)(a), jax.hessian(twin)(a), rtol=1e-8, atol=1e-10)


def test_regression_dot_and_inner_above_one_dimension_follow_numpy():
    """Was: np.dot of 3-D operands broadcast as matmul ((2,3,4)·(2,4,5) -> (2,3,5), not NumPy's
    (2,3,2,5)) and np.inner of 2-D operands broadcast the leading axes ((3,) not (3,3)): silently
    wrong values and gradients."""
    rng = np.random.default_rng(3)
    a, b, m, v = (rng.standard_normal(s) for s in ((2, 3, 4), (2, 4, 5), (3, 4), (4,)))
    np.testing.assert_allclose(tnp.dot(a, b), np.dot(a, b), rtol=1e-13)          # shape (2, 3, 2, 5)
    np.testing.assert_allclose(tnp.inner(m, m), np.inner(m, m), rtol=1e-13)      # shape (3, 3)
    jdot = lambda a, b: jnp.sum(jnp.dot(a, b) ** 2)
    jinner = lambda a, v: jnp.sum(jnp.inner(a, a) ** 2) + jnp.sum(jnp.inner(a, v))
    for f, twin, args in ((E.dot_nd, jdot, (a, b)), (E.inner_2d, jinner, (m, v))):
        want = jax.grad(twin, argnums=(0, 1))(*args)
        for got in (tl.grad(f, argnums=(0, 1))(*args), tl.jit(tl.grad(f, argnums=(0, 1)))(*args)):
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-12)
    # negative control: matmul's batch broadcasting, the old reading, has another gradient
    assert not np.allclose(jax.grad(lambda a, b: jnp.sum((a @ b) ** 2))(a, b), jax.grad(jdot)(a, b))


def test_regression_round_with_decimals():
    """Was: np.round(x, 1) refused with "_unary.<locals>.fn() takes 1 positional argument but 2
    were given". Same bits as NumPy for every sign of `decimals`; the rounded values are constants."""
    x = np.random.default_rng(4).standard_normal(40) * 30
    for d in (0, 1, 2, -1):
        assert_same_values(tnp.round(x, d), np.round(x, d))
    twin = lambda x: jnp.sum(jax.lax.stop_gradient(jnp.round(x, 1) + jnp.round(x, -1)) * x)
    want = jax.grad(twin)(x[:5])
    assert not np.allclose(want, 2 * x[:5])                 # negative control: not the derivative of x**2
    np.testing.assert_array_equal(tl.grad(E.rounded_weights)(x[:5]), want)
    np.testing.assert_array_equal(tl.jit(tl.grad(E.rounded_weights))(x[:5]), want)


def test_regression_einsum_implicit_output():
    """Was: refused ("write the output explicitly"). NumPy's implicit output: the indices that
    appear once, alphabetically, after '...'; 'ba' is a transpose, not the identity."""
    rng = np.random.default_rng(5)
    a, b, c = rng.standard_normal((3, 4)), rng.standard_normal((4, 5)), rng.standard_normal((2, 3, 4))
    for spec, ops in (("ij,jk", (a, b)), ("ba", (a,)), ("...ij,jk", (c, b)), ("ij,ij", (a, a))):
        np.testing.assert_allclose(tnp.einsum(spec, *ops), np.einsum(spec, *ops), rtol=1e-13)
    assert tnp.einsum("ba", a).shape == (4, 3)                    # negative control of the order
    twin = lambda a: jnp.sum(jnp.einsum("ij,kj", a, a) ** 2) + jnp.einsum("ij,ij", a, a)
    want = jax.grad(twin)(a)
    np.testing.assert_allclose(tl.grad(E.einsum_implicit)(a), want, rtol=1e-12)
    np.testing.assert_allclose(tl.jit(tl.grad(E.einsum_implicit))(a), want, rtol=1e-12)
