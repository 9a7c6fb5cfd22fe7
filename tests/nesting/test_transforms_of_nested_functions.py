"""A transform of a nested ``def``/``lambda`` inside a transformed function (closure conversion).

Regression (session 16, a helper's programs): ``tl.grad(lambda q: loss(q, batch))(p)`` inside a
function under ``tl.grad`` or ``tl.jit`` was refused as "recursive call to `lambda` cannot be
lowered (deeper than 8 calls)", at a line of tlaloc's own. MAML's inner step, Hessian-vector
products written by hand and Jacobians of closures are written this way in JAX.

Oracle: JAX float64, the same programs with jax.numpy; control: the captured values enter the
outer derivative (the gradient with respect to ``batch`` is non-zero and matches JAX), so a
capture treated as a constant would fail.
"""
import numpy as np
import pytest

import tlaloc as tl

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

X = np.array([0.3, -1.2, 2.0])
V = np.array([1.0, 0.5, -2.0])
B = (X * 2, V)
W = np.array([[1.0, 2.0], [0.5, -1.0]])


def loss(p, b):
    return np.sum(np.tanh(p * b[0]) ** 2 + p * b[1])


def loss_jax(p, b):
    return jnp.sum(jnp.tanh(p * b[0]) ** 2 + p * b[1])


def maml(p, b):
    g = tl.grad(lambda q: loss(q, b))(p)
    return loss(p - 0.1 * g, b)


def maml_jax(p, b):
    g = jax.grad(lambda q: loss_jax(q, b))(p)
    return loss_jax(p - 0.1 * g, b)


def hvp(x, v):
    def f(y):
        return np.sum(np.sin(y) * y ** 2)
    return np.sum(tl.grad(lambda z: np.sum(tl.grad(f)(z) * v))(x) * x)


def hvp_jax(x, v):
    def f(y):
        return jnp.sum(jnp.sin(y) * y ** 2)
    return jnp.sum(jax.grad(lambda z: jnp.sum(jax.grad(f)(z) * v))(x) * x)


def jacobians(x):
    j = tl.jacfwd(lambda y: np.sin(y) * x)(x)
    h = tl.hessian(lambda y: np.sum(np.exp(y) * x))(x)
    r = tl.jacrev(lambda y: np.cos(y) * x)(x)
    v, g = tl.value_and_grad(lambda y, k=2.0: np.sum(y ** 3) * k)(x)
    return np.sum(j) + np.sum(h) + np.sum(r) + v + np.sum(g * x)


def jacobians_jax(x):
    j = jax.jacfwd(lambda y: jnp.sin(y) * x)(x)
    h = jax.hessian(lambda y: jnp.sum(jnp.exp(y) * x))(x)
    r = jax.jacrev(lambda y: jnp.cos(y) * x)(x)
    v, g = jax.value_and_grad(lambda y, k=2.0: jnp.sum(y ** 3) * k)(x)
    return jnp.sum(j) + jnp.sum(h) + jnp.sum(r) + v + jnp.sum(g * x)


def batched(x, w):
    return np.sum(tl.vmap(lambda r: np.tanh(r @ w))(x[:, None] * np.ones((3, 2))))


def batched_jax(x, w):
    return jnp.sum(jax.vmap(lambda r: jnp.tanh(r @ w))(x[:, None] * jnp.ones((3, 2))))


def _close(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_maml_inner_step(wrap):
    _close(wrap(tl.grad(maml))(X, B), jax.grad(maml_jax)(X, B))
    got = wrap(tl.grad(maml, argnums=1))(X, B)
    _close(got, jax.grad(maml_jax, argnums=1)(X, B))
    assert np.abs(np.asarray(got[0])).max() > 1e-3                  # control: the capture is differentiated


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_hessian_vector_product_by_hand(wrap):
    _close(wrap(tl.grad(hvp, argnums=(0, 1)))(X, V), jax.grad(hvp_jax, argnums=(0, 1))(X, V))


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_jacobians_and_value_and_grad_of_closures(wrap):
    _close(wrap(tl.grad(jacobians))(X), jax.grad(jacobians_jax)(X))


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_vmap_of_a_closure(wrap):
    _close(wrap(tl.grad(batched, argnums=(0, 1)))(X, W), jax.grad(batched_jax, argnums=(0, 1))(X, W))


def test_the_transform_of_a_closure_without_an_outer_transform():
    """Called plainly the program is Python; tlaloc's transform of a nested function runs as usual."""
    assert float(maml(X, B)) == pytest.approx(float(maml_jax(X, B)), rel=1e-12)


def test_jvp_of_a_closure():
    def f(x):
        _, t = tl.jvp(lambda y: np.sin(y) * x, (x,), (np.ones_like(x),))
        return np.sum(t * x)

    def f_jax(x):
        _, t = jax.jvp(lambda y: jnp.sin(y) * x, (x,), (jnp.ones_like(x),))
        return jnp.sum(t * x)

    _close(tl.grad(f)(X), jax.grad(f_jax)(X))
    _close(tl.jit(tl.grad(f))(X), jax.grad(f_jax)(X))
