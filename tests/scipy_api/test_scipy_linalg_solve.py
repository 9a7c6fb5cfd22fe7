"""``scipy.linalg.solve``, ``inv`` and ``det`` in user code, mapped onto ``tlaloc.scipy.linalg``.

Before, these were refused inside ``tl.grad`` ("`scipy.linalg.solve` has no tlaloc equivalent
yet"). Checked here, in float64:

* values against SciPy itself (rtol 1e-12) for every ``assume_a`` and ``lower``, ``transposed``,
  1-d and batched right-hand sides;
* gradients of the general solve, ``inv`` and ``det`` against ``jax.scipy.linalg``; gradients of
  the structured solves ('sym', 'her', 'pos', triangular, diagonal, tridiagonal) against central
  differences of SciPy's own function, which reads only some entries of ``a`` (so the entries it
  ignores get exactly zero, a negative control against the general solve's gradient);
* ``tl.jit`` of the value and of the gradient, and the refusals by name.
"""
import numpy as np
import pytest
import scipy.linalg

import tlaloc as tl
import tlaloc.scipy.linalg as tsl

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402

jax.config.update("jax_enable_x64", True)

rng = np.random.default_rng(3)
M = rng.standard_normal((4, 4))
P = M @ M.T + 4 * np.eye(4)                               # SPD
A = P + 0.3 * np.tril(rng.standard_normal((4, 4)), -1)   # upper triangle SPD, lower triangle not P's
B = rng.standard_normal((4, 2))
b = rng.standard_normal(4)
W = rng.standard_normal((4, 2))


def solve_loss(a, b):
    return np.sum(np.tanh(scipy.linalg.solve(a, b)) * W)


def inv_loss(a):
    return np.sum(scipy.linalg.inv(a) * np.arange(16.0).reshape(4, 4))


def det_loss(a):
    return scipy.linalg.det(a) ** 2


def jax_solve_loss(a, b):
    return jnp.sum(jnp.tanh(jsl.solve(a, b)) * W)


def structured(kind, lower=False, transposed=False):
    """User code: ``scipy.linalg.solve`` with these options (static, read from the closure)."""
    def f(a, b):
        return np.sum(scipy.linalg.solve(a, b, assume_a=kind, lower=lower, transposed=transposed) * W)
    return f


def central_differences(f, args, argnum, h=1e-6):
    x = np.array(args[argnum], dtype=float)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        up = list(args)
        up[argnum] = x + e
        dn = list(args)
        dn[argnum] = x - e
        g[i] = (f(*up) - f(*dn)) / (2 * h)
    return g


KINDS = [None, "gen", "general", "banded", "sym", "symmetric", "her", "hermitian", "pos", "positive definite",
         "diagonal", "tridiagonal", "upper triangular", "lower triangular"]


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_values_equal_scipy(kind, lower, transposed):
    for rhs in (B, b):
        want = scipy.linalg.solve(A, rhs, assume_a=kind, lower=lower, transposed=transposed)
        got = tsl.solve(A, rhs, assume_a=kind, lower=lower, transposed=transposed)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_batched_values_equal_scipy():
    a = rng.standard_normal((3, 4, 4)) + 4 * np.eye(4)
    for rhs in (rng.standard_normal((3, 4, 2)), b):
        np.testing.assert_allclose(tsl.solve(a, rhs), scipy.linalg.solve(a, rhs), rtol=1e-12)
    np.testing.assert_allclose(tsl.inv(a), scipy.linalg.inv(a), rtol=1e-12)
    np.testing.assert_allclose(tsl.det(a), scipy.linalg.det(a), rtol=1e-12)


@pytest.mark.parametrize("kind", [None, "gen", "sym", "pos", "upper triangular", "lower triangular"], ids=str)
def test_inv_values_equal_scipy(kind):
    for lower in (False, True):
        np.testing.assert_allclose(tsl.inv(A, assume_a=kind, lower=lower),
                                   scipy.linalg.inv(A, assume_a=kind, lower=lower), rtol=1e-12, atol=1e-14)


def test_det_values_equal_scipy():
    np.testing.assert_allclose(tsl.det(A), scipy.linalg.det(A), rtol=1e-12)
    assert tsl.det(np.ones((3, 3))) == 0.0


def test_general_solve_inv_det_gradients_match_jax():
    ga, gb = tl.grad(solve_loss, argnums=(0, 1))(A, B)
    wa, wb = jax.grad(jax_solve_loss, argnums=(0, 1))(A, B)
    np.testing.assert_allclose(ga, wa, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(gb, wb, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(tl.grad(inv_loss)(A),
                               jax.grad(lambda a: jnp.sum(jsl.inv(a) * jnp.arange(16.0).reshape(4, 4)))(A),
                               rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(tl.grad(det_loss)(A), jax.grad(lambda a: jsl.det(a) ** 2)(A), rtol=1e-11)
    value, _ = tl.value_and_grad(solve_loss)(A, B)
    np.testing.assert_allclose(value, solve_loss(A, B), rtol=1e-12)


def test_under_jit():
    np.testing.assert_allclose(tl.jit(solve_loss)(A, B), solve_loss(A, B), rtol=1e-12)
    np.testing.assert_allclose(tl.jit(tl.grad(solve_loss))(A, B), jax.grad(jax_solve_loss)(A, B),
                               rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(tl.jit(tl.grad(det_loss))(A), jax.grad(lambda a: jsl.det(a) ** 2)(A), rtol=1e-11)
    f = structured("pos")
    np.testing.assert_allclose(tl.jit(tl.grad(f))(A, B), central_differences(f, (A, B), 0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("kind,lower,transposed", [
    ("sym", False, False), ("sym", True, False), ("pos", False, False), ("pos", True, True), ("her", True, False),
    ("upper triangular", False, False), ("lower triangular", False, True), ("diagonal", False, False),
    ("tridiagonal", False, False), ("banded", False, False), (None, False, True)])
def test_structured_gradients_match_scipy_finite_differences(kind, lower, transposed):
    f = structured(kind, lower, transposed)
    ga, gb = tl.grad(f, argnums=(0, 1))(A, B)
    np.testing.assert_allclose(ga, central_differences(f, (A, B), 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb, central_differences(f, (A, B), 1), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(f(A, B), tl.jit(f)(A, B), rtol=1e-12)


def test_negative_control_ignored_entries_get_no_gradient():
    upper = tl.grad(structured("pos", lower=False))(A, B)
    lower = tl.grad(structured("pos", lower=True))(A, B)
    general = tl.grad(structured("gen"))(A, B)
    assert np.all(np.tril(upper, -1) == 0.0) and np.all(np.triu(lower, 1) == 0.0)
    assert not np.allclose(upper, general) and not np.allclose(upper, lower)
    # the values differ too when the triangles disagree (A is not symmetric)
    assert not np.allclose(tsl.solve(A, B, assume_a="sym"), tsl.solve(A, B, assume_a="sym", lower=True))


def test_refusals_by_name():
    with pytest.raises(NotImplementedError, match="assume_a='cholesky'"):
        tsl.solve(A, B, assume_a="cholesky")
    with pytest.raises(NotImplementedError, match="assume_a='diagonal'"):
        tsl.inv(A, assume_a="diagonal")
    with pytest.raises(ValueError, match="infs or NaNs"):
        tsl.solve(np.full((2, 2), np.nan), np.ones(2))
    with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
        tsl.solve(-P, B, assume_a="pos")
    with pytest.raises(np.linalg.LinAlgError):
        tsl.solve(np.ones((3, 3)), np.ones(3))
    np.testing.assert_array_equal(tsl.solve(A, B, assume_a="sym", lower=1),          # truthy, as SciPy
                                  tsl.solve(A, B, assume_a="sym", lower=True))
