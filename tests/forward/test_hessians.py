"""Issue-4 Hessians: x·(A x) (also at 0), a Horner-rule loop, and logdet of an SPD matrix."""
import jax
import jax.numpy as jnp
import numpy as np

import tlaloc as tl
import tlaloc.numpy as tnp

jax.config.update("jax_enable_x64", True)
A = np.array([[2.0, 1.0, -0.5], [0.0, 3.0, 1.5], [4.0, -1.0, 0.25]])


def quadratic(x):
    return x @ (A @ x)


def horner(x, coeffs):
    s = 0.0 * x
    for i in range(len(coeffs)):
        s = s * x + coeffs[i]
    return (s * s).sum()


def j_horner(x, coeffs):
    s = 0.0 * x
    for i in range(len(coeffs)):
        s = s * x + coeffs[i]
    return (s * s).sum()


def logdet(k):
    return tnp.linalg.logdet_spd(k)


def test_hessian_of_quadratic_is_a_plus_a_transpose_also_at_zero():
    for x in (np.zeros(3), np.array([0.3, -1.0, 2.0])):
        np.testing.assert_array_equal(tl.hessian(quadratic)(x), A + A.T)


def test_hessian_of_horner_loop_equals_jax():
    x, c = np.array([0.3, -0.7]), np.array([1.0, -2.0, 0.5, 3.0, -1.5])
    np.testing.assert_allclose(tl.hessian(horner)(x, c), jax.hessian(j_horner)(x, c), rtol=1e-12, atol=1e-12)


def test_f64_hessian_of_logdet_spd_equals_jax_x64():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((4, 4))
    k = m @ m.T + 4 * np.eye(4)
    want = jax.hessian(lambda k: 2 * jnp.sum(jnp.log(jnp.diag(jnp.linalg.cholesky(k)))))(k)
    np.testing.assert_allclose(tl.hessian(logdet)(k), want, rtol=1e-11, atol=1e-11)
    # and the gradient is K^-1
    np.testing.assert_allclose(tl.grad(logdet)(k), np.linalg.inv(k), rtol=1e-11, atol=1e-12)


def test_negative_control_hessian_is_not_a_alone():
    assert not np.allclose(tl.hessian(quadratic)(np.zeros(3)), A)
