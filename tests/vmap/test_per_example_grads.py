"""Per-example gradients: ``tl.vmap(tl.grad(loss), in_axes=(None, 0))(w, xs)``
equals a Python loop of ``tl.grad(loss)(w, x)`` to 1e-12 in float64, for batch
sizes 1, 7 and 64, with losses that hold a ``for`` loop, an ``if`` on a
per-example value and a ``while`` loop with per-example trip counts; and
JAX's ``jax.vmap(jax.jacfwd(.))`` agrees.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl

jax.config.update("jax_enable_x64", True)

TOL = 1e-12


def loss_if(w, x):
    r = x[:3] @ w[:3] - x[3]
    if r > 0.0:
        out = r * r * w[3]
    else:
        out = np.sqrt(-r) + np.log(1.0 - r)        # NaN for r > 0: the branch is not taken there
    return out


def j_loss_if(w, x):
    r = x[:3] @ w[:3] - x[3]
    return jax.lax.cond(r > 0.0, lambda r: r * r * w[3], lambda r: jnp.sqrt(-r) + jnp.log(1.0 - r), r)


def loss_loop_if(w, x):
    h = x[:3]
    total = 0.0
    for k in range(3):
        h = np.tanh(h * w[k] + w[3])
        if h.sum() > 0.0:
            total = total + np.sum(h * h)
        else:
            total = total - np.sum(h)
    return total + x[3] * w[0]


def j_loss_loop_if(w, x):
    h = x[:3]
    total = 0.0
    for k in range(3):
        h = jnp.tanh(h * w[k] + w[3])
        total = jax.lax.cond(h.sum() > 0.0, lambda t: t + jnp.sum(h * h), lambda t: t - jnp.sum(h), total)
    return total + x[3] * w[0]


def loss_while(w, x):
    y = x[:3] * w[0]
    n = 0.0
    while np.sum(y * y) > 1.0:
        y = y * 0.5 + w[1] * 0.01
        n = n + 1.0
    return np.sum(y * w[2]) + n * w[3]


def j_loss_while(w, x):
    def body(c):
        return c[0] * 0.5 + w[1] * 0.01, c[1] + 1.0
    y, n = jax.lax.while_loop(lambda c: jnp.sum(c[0] * c[0]) > 1.0, body, (x[:3] * w[0], 0.0))
    return jnp.sum(y * w[2]) + n * w[3]


LOSSES = [(loss_if, j_loss_if), (loss_loop_if, j_loss_loop_if), (loss_while, j_loss_while)]
W = np.array([0.7, -1.2, 0.4, 1.5])


def _xs(size, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((size, 4)) * 3.0


@pytest.mark.parametrize("size", [1, 7, 64])
@pytest.mark.parametrize("loss,twin", LOSSES, ids=[f.__name__ for f, _ in LOSSES])
def test_per_example_grads_equal_a_loop_of_grads(loss, twin, size):
    xs = _xs(size, size)
    g = tl.grad(loss)
    got = tl.vmap(g, in_axes=(None, 0))(W, xs)
    want = np.stack([g(W, x) for x in xs])
    assert got.shape == (size, 4)
    assert np.all(np.isfinite(got)), "a NaN leaked from a branch not taken"
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    if size == 7:
        # forward mode: JAX cannot reverse through lax.while_loop (and it is an independent check)
        ref = jax.jit(jax.vmap(jax.jacfwd(twin), in_axes=(None, 0)))(jnp.asarray(W), jnp.asarray(xs))
        np.testing.assert_allclose(got, np.asarray(ref), rtol=1e-10, atol=1e-12)


def test_the_branches_and_trip_counts_really_differ_per_example():
    xs = _xs(64, 64)
    r = xs[:, :3] @ W[:3] - xs[:, 3]
    assert (r > 0).any() and (r <= 0).any()
    trips = [0] * len(xs)
    for k, x in enumerate(xs):
        y = x[:3] * W[0]
        while np.sum(y * y) > 1.0:
            y = y * 0.5 + W[1] * 0.01
            trips[k] += 1
    assert len(set(trips)) > 2


def test_per_example_grads_of_pytree_params():
    def mlp_loss(params, x):
        h = np.tanh(x[:3] @ params["w"] + params["b"])
        return np.sum(h * h) - x[3] * params["b"][0]
    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    xs = rng.standard_normal((7, 4))
    g = tl.grad(mlp_loss)
    got = tl.vmap(g, in_axes=(None, 0))(params, xs)
    for k, x in enumerate(xs):
        one = g(params, x)
        np.testing.assert_allclose(got["w"][k], one["w"], rtol=TOL, atol=TOL)
        np.testing.assert_allclose(got["b"][k], one["b"], rtol=TOL, atol=TOL)


def test_vmap_of_value_and_grad():
    xs = _xs(7, 3)
    vg = tl.value_and_grad(loss_loop_if)
    vals, grads = tl.vmap(vg, in_axes=(None, 0))(W, xs)
    for k, x in enumerate(xs):
        v1, g1 = vg(W, x)
        np.testing.assert_allclose(vals[k], v1, rtol=TOL, atol=TOL)
        np.testing.assert_allclose(grads[k], g1, rtol=TOL, atol=TOL)


def test_the_batched_gradient_is_one_program_without_a_loop_over_examples():
    v = tl.vmap(tl.grad(loss_if), in_axes=(None, 0))
    v(W, _xs(7, 0))
    src = tl.source(v)
    assert "lax.select" in src and "lax.truth" not in src
    assert "def vmap_dloss_if_dw(w, x):" in src


def test_built_once_per_shape_and_batch_size():
    v = tl.vmap(tl.grad(loss_loop_if), in_axes=(None, 0))
    v(W, _xs(7, 0))
    v(W, _xs(7, 1))
    assert len(v._entries) == 1
    v(W, _xs(3, 1))
    assert len(v._entries) == 2


def test_negative_control_a_shared_gradient_is_not_per_example():
    xs = _xs(7, 5)
    g = tl.grad(loss_loop_if)
    mean_grad = np.mean([g(W, x) for x in xs], axis=0)
    got = tl.vmap(g, in_axes=(None, 0))(W, xs)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(got, np.broadcast_to(mean_grad, got.shape), rtol=TOL, atol=TOL)
