"""NumPy options and forms refused before (session 16, a helper's programs), now as NumPy runs them.

``np.einsum(..., optimize=True)``, an index repeated within one operand (``'ii'``, ``'ii->i'``, no
VJP before), ``np.concatenate(..., axis=None)``, ``reshape``/``ravel`` with ``order='F'``,
``np.take(..., mode='clip'|'wrap')``, and ``y[y < 0] *= 0.1`` under tl.jit / tl.vmap (the masked
read has a run-time size; every selected element changes alike, so it is a where).

Oracle: JAX float64 on the same programs; forward values against NumPy; control: order='F' differs
from order='C' on a non-symmetric matrix.
"""
import numpy as np
import pytest

import tlaloc as tl

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

A = np.arange(9.0).reshape(3, 3) * 0.1 + np.eye(3)
X = np.array([0.3, -1.2, 2.0, -0.7])
W9 = np.arange(9.0)


PROGRAMS = {
    "einsum_optimize": (lambda a, xp: xp.einsum("ij,jk->", a, a, optimize=True), A),
    "einsum_trace": (lambda a, xp: xp.einsum("ii", a) * xp.einsum("ii->i", a).sum(), A),
    "einsum_batched_diag": (lambda a, xp: xp.sum(xp.einsum("bii->bi", xp.stack([a, 2 * a])) ** 2), A),
    "concat_none": (lambda a, xp: xp.sum(xp.concatenate([a, a[:2]], axis=None) ** 2 * xp.arange(15.0)), A),
    "reshape_f": (lambda a, xp: xp.sum(a.reshape(9, order="F") * W9), A),
    "ravel_f": (lambda a, xp: xp.sum(xp.ravel(a, order="F") ** 2 * W9), A),
    "reshape_f_2d": (lambda a, xp: xp.sum(xp.reshape(a, (9, 1), order="F")[:, 0] * W9), A),
    "take_clip": (lambda x, xp: xp.sum(xp.take(x, xp.array([0, 5, -3]), mode="clip") ** 2), X),
    "take_wrap": (lambda x, xp: xp.sum(xp.take(x, xp.array([0, 5, -3]), mode="wrap") ** 2), X),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_options_as_numpy_and_jax(name, wrap):
    f, arg = PROGRAMS[name]
    want = np.asarray(jax.grad(lambda a: f(a, jnp))(arg))
    np.testing.assert_allclose(np.asarray(wrap(tl.grad(lambda a: f(a, np)))(arg)), want, rtol=1e-13, atol=1e-15)
    assert float(tl.jit(lambda a: f(a, np))(arg)) == pytest.approx(float(f(arg, np)), rel=1e-13)


def test_order_f_differs_from_c():
    assert not np.allclose(tl.grad(lambda a: np.sum(a.reshape(9, order="F") * W9))(A),
                           tl.grad(lambda a: np.sum(a.reshape(9) * W9))(A))


def masked_scale(x):
    y = x * 1.0
    y[y < 0] *= 0.1
    y[y > 1.5] += 2.0
    return np.sum(y ** 2)


def masked_scale_jax(x):
    y = x * 1.0
    y = jnp.where(y < 0, y * 0.1, y)
    y = jnp.where(y > 1.5, y + 2.0, y)
    return jnp.sum(y ** 2)


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit, tl.vmap], ids=["eager", "jit", "vmap"])
def test_masked_augmented_assignment(wrap):
    xs = X if wrap is not tl.vmap else np.stack([X, -X])
    want = jax.grad(masked_scale_jax)(X) if wrap is not tl.vmap else jax.vmap(jax.grad(masked_scale_jax))(xs)
    np.testing.assert_allclose(np.asarray(wrap(tl.grad(masked_scale))(xs)), np.asarray(want), rtol=1e-14)
    assert float(tl.jit(masked_scale)(X)) == pytest.approx(masked_scale(X), rel=1e-14)
