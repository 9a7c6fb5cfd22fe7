"""``tl.grad(f, has_aux=True)`` nested in vmap, jit and another grad returns ``(grads, aux)``.

Regression (session 16, an adversarial helper): ``tl.vmap(tl.grad(f, has_aux=True))(X)[0]`` was
the batch of loss values, not of gradients: the nested view of the gradient kept the call's
output order (value, aux, gradients) under the structure (gradients, aux).

Oracle: JAX float64. Control: the gradients differ from the values and the aux here, so a
swap cannot pass.
"""
import numpy as np
import pytest

import tlaloc as tl

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

X = np.array([[1.0, -2.0, 3.0], [0.5, 5.0, -6.0]])


def with_aux(x):
    return np.sum(np.sin(x) * x), x * 3.0


def with_aux_jax(x):
    return jnp.sum(jnp.sin(x) * x), x * 3.0


def two_args(x, y):
    return np.sum(x ** 2 * y), {"a": x, "b": y + 1.0}


def two_args_jax(x, y):
    return jnp.sum(x ** 2 * y), {"a": x, "b": y + 1.0}


def _close(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-14)
    assert len(jax.tree_util.tree_leaves(got)) == len(jax.tree_util.tree_leaves(want))


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_vmap_of_grad_with_aux(wrap):
    want = jax.vmap(jax.grad(with_aux_jax, has_aux=True))(X)
    got = wrap(tl.vmap(tl.grad(with_aux, has_aux=True)))(X)
    _close(got, want)
    assert not np.allclose(np.asarray(got[0]), np.asarray(got[1]))          # control
    want = jax.vmap(jax.grad(two_args_jax, argnums=(0, 1), has_aux=True))(X, X)
    _close(wrap(tl.vmap(tl.grad(two_args, argnums=(0, 1), has_aux=True)))(X, X), want)


def test_grad_with_aux_inside_grad():
    def outer(x):
        g, aux = tl.grad(with_aux, has_aux=True)(x)
        return np.sum(g * aux)

    def outer_jax(x):
        g, aux = jax.grad(with_aux_jax, has_aux=True)(x)
        return jnp.sum(g * aux)

    np.testing.assert_allclose(tl.grad(outer)(X[0]), np.asarray(jax.grad(outer_jax)(X[0])), rtol=1e-13)
    np.testing.assert_allclose(tl.jit(tl.grad(outer))(X[0]), np.asarray(jax.grad(outer_jax)(X[0])), rtol=1e-13)
