"""``np.linalg.svd`` with ``full_matrices=True`` (NumPy's default) under ``tl.grad``.

Regression (adversarial pass, session 15): with an unannotated argument the derivative was built
before the matrix's shape was known, and for a non-square matrix it failed inside the generated code
with NumPy's "matmul: ... mismatch". The function is now built at the first call for the shape: a
square matrix is differentiated (checked against JAX float64), a non-square one is refused by name
at the user's line, as JAX refuses it; ``full_matrices=False`` works for any shape.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl

jax.config.update("jax_enable_x64", True)


def full_svd_loss(m):
    u, s, vh = np.linalg.svd(m)
    return np.sum(u[:, 0] ** 2 * s[0]) + np.sum(s ** 2)


def full_svd_loss_jax(m):
    u, s, vh = jnp.linalg.svd(m)
    return jnp.sum(u[:, 0] ** 2 * s[0]) + jnp.sum(s ** 2)


def reduced_svd_loss(m):
    u, s, vh = np.linalg.svd(m, full_matrices=False)
    return np.sum(s ** 3)


def test_square_matrix_against_jax():
    m = np.array([[2.0, 0.5, 0.1], [0.3, -1.0, 0.7], [0.2, 0.4, 1.5]])
    np.testing.assert_allclose(tl.grad(full_svd_loss)(m), np.asarray(jax.grad(full_svd_loss_jax)(m)), rtol=1e-11)


def test_non_square_is_refused_at_the_users_line():
    with pytest.raises(tl.GradientError, match=r"test_svd_full_matrices\.py:\d+:\d+: svd: no derivative with "
                                               r"full_matrices=True on a non-square matrix"):
        tl.grad(full_svd_loss)(np.array([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]]))


def test_reduced_svd_of_a_wide_matrix_against_jax():
    m = np.array([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]])
    want = jax.grad(lambda a: jnp.sum(jnp.linalg.svd(a, full_matrices=False)[1] ** 3))(m)
    np.testing.assert_allclose(tl.grad(reduced_svd_loss)(m), np.asarray(want), rtol=1e-12)
