"""Jacobians and Hessians with pytrees in and out, structured as JAX structures them.

Regression (session 16, a helper's programs): ``tl.jacrev(f)(params_dict, x)`` was refused
("jacfwd/jacrev/hessian take array arguments (no pytrees)"), so was a function returning a tuple
("must return one array") and ``tl.hessian(f, argnums=(0, 1))`` ("argnums must be one int").

Oracle: JAX float64, values and tree structures; control: the blocks of the Hessian differ from
each other, so a block put in the wrong place cannot pass.
"""
import numpy as np
import pytest

import tlaloc as tl

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

P = {"w": np.array([[0.1, 0.2], [-0.3, 0.4]]), "b": np.array([0.5, -0.5])}
X = np.array([1.0, 2.0])


def layer(p, x, xp=np):
    return xp.tanh(p["w"] @ x + p["b"])


def pair(x, xp=np):
    return xp.sin(x), xp.sum(x ** 2)


def loss(a, b, xp=np):
    return xp.sum(xp.sin(a) * b ** 3)


def _same(got, want):
    shape = jax.tree_util.tree_structure
    assert shape(jax.tree_util.tree_map(lambda t: 0, got)) == shape(jax.tree_util.tree_map(lambda t: 0, want))
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_dict_arguments(wrap):
    _same(wrap(tl.jacrev(layer))(P, X), jax.jacrev(lambda p, x: layer(p, x, jnp))(P, X))
    _same(wrap(tl.jacfwd(layer, argnums=(0, 1)))(P, X), jax.jacfwd(lambda p, x: layer(p, x, jnp), argnums=(0, 1))(P, X))
    _same(wrap(tl.hessian(lambda p: np.sum(layer(p, X) ** 2)))(P),
          jax.hessian(lambda p: jnp.sum(layer(p, X, jnp) ** 2))(P))


def test_tuple_outputs_and_hessian_blocks():
    _same(tl.jacrev(pair)(X), jax.jacrev(lambda x: pair(x, jnp))(X))
    _same(tl.vmap(tl.jacfwd(pair))(np.stack([X, -X])), jax.vmap(jax.jacfwd(lambda x: pair(x, jnp)))(np.stack([X, -X])))
    blocks = tl.hessian(loss, argnums=(0, 1))(X, 2 * X)
    _same(blocks, jax.hessian(lambda a, b: loss(a, b, jnp), argnums=(0, 1))(X, 2 * X))
    assert not np.allclose(blocks[0][0], blocks[1][1])                                   # control


def with_aux(x, xp=np):
    return xp.sin(x) * x, {"n": xp.sum(x ** 2), "c": x * 2}


@pytest.mark.parametrize("mode", ["fwd", "rev"])
@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_jacobians_with_aux(mode, wrap):
    """Regression: jacfwd/jacrev took no has_aux (JAX's ``(jacobian, aux)``)."""
    ours, theirs = (tl.jacfwd, jax.jacfwd) if mode == "fwd" else (tl.jacrev, jax.jacrev)
    _same(wrap(ours(with_aux, has_aux=True))(X), theirs(lambda x: with_aux(x, jnp), has_aux=True)(X))
