"""Derivatives of ``np.linalg.qr`` of a wide matrix (m < n), against JAX (float64).

Regression: ``tl.grad`` of a function calling ``np.linalg.qr`` on a (3, 5) matrix raised
SciPy's ``ValueError: expected square matrix`` from the generated code, with no
location (the tall rule's triangular solve by the non-square R). JAX defines this
derivative (``A = [A1 A2]``, ``A1 = Q R1`` square, ``R2 = Qᵀ A2``), so tlaloc now does
too, in every mode; ``mode='complete'`` with m > n is still refused, by name, at the
user's line. The graph is built at the first call for the matrix's shape (the rule
differs for m < n), so the loss below reads no shape itself.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl

jax.config.update("jax_enable_x64", True)

A = np.random.default_rng(7).standard_normal((3, 5))
W_Q = np.linspace(-1.0, 2.0, 9).reshape(3, 3)
W_R = np.linspace(0.5, 1.5, 15).reshape(3, 5)
RTOL, ATOL = 1e-10, 1e-11


def wide_loss(a):
    q, r = np.linalg.qr(a)
    return np.sum(q * W_Q) + np.sum(r * r * W_R) + np.sum(np.sin(r))


def wide_loss_jax(a):
    q, r = jnp.linalg.qr(a)
    return jnp.sum(q * W_Q) + jnp.sum(r * r * W_R) + jnp.sum(jnp.sin(r))


def wide_complete(a):
    q, r = np.linalg.qr(a, mode="complete")
    return np.sum(q * W_Q) + np.sum(np.cos(r) * W_R)


def wide_complete_jax(a):
    q, r = jnp.linalg.qr(a, mode="complete")
    return jnp.sum(q * W_Q) + jnp.sum(jnp.cos(r) * W_R)


def r_only(a):
    return np.sum(np.linalg.qr(a, mode="r") ** 3)


def r_only_jax(a):
    return jnp.sum(jnp.linalg.qr(a, mode="r") ** 3)


def tall_complete(a):
    q, r = np.linalg.qr(a, mode="complete")
    return np.sum(q) + np.sum(r)


@pytest.mark.parametrize("f, twin", [(wide_loss, wide_loss_jax), (wide_complete, wide_complete_jax),
                                     (r_only, r_only_jax)], ids=["reduced", "complete", "r"])
def test_reverse_modes_match_jax(f, twin):
    want = jax.grad(twin)(A)
    np.testing.assert_allclose(tl.grad(f)(A), want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(tl.jacrev(f)(A), want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(tl.value_and_grad(f)(A)[0], twin(A), rtol=1e-13)


def test_forward_hessian_and_vmap_match_jax():
    v = np.random.default_rng(8).standard_normal(A.shape)
    _, want = jax.jvp(wide_loss_jax, (A,), (v,))
    np.testing.assert_allclose(tl.jvp(wide_loss, (A,), (v,))[1], want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(tl.jacfwd(wide_loss)(A), jax.grad(wide_loss_jax)(A), rtol=RTOL, atol=ATOL)
    h = jax.hessian(wide_loss_jax)(A)
    np.testing.assert_allclose(tl.hessian(wide_loss)(A), h, rtol=1e-8, atol=1e-9 * np.abs(h).max())
    batch = np.stack([A, A[::-1], 2 * A])
    np.testing.assert_allclose(tl.vmap(tl.grad(wide_loss))(batch), jax.vmap(jax.grad(wide_loss_jax))(batch),
                               rtol=RTOL, atol=ATOL)


def test_tall_and_square_unchanged():
    for a in (A.T.copy(), A[:, :3].copy()):
        np.testing.assert_allclose(tl.grad(r_only)(a), jax.grad(r_only_jax)(a), rtol=RTOL, atol=ATOL)


def test_complete_mode_of_a_tall_matrix_is_refused_at_the_users_line():
    with pytest.raises(tl.GradientError, match=r"test_qr_wide\.py:\d+:\d+: qr: the derivative of "
                                               r"mode='complete' with m > n is not implemented"):
        tl.grad(tall_complete)(A.T.copy())


def test_negative_control():
    # the comparison rejects a rule that drops R2 = Qᵀ A2's dependence on A (the A2 block of the
    # gradient zeroed), and one off by 1e-6 relatively
    want = np.asarray(jax.grad(wide_loss_jax)(A))
    dropped = want.copy()
    dropped[:, 3:] = 0.0
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(dropped, want, rtol=RTOL, atol=ATOL)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(want * (1 + 1e-6), want, rtol=RTOL, atol=ATOL)
