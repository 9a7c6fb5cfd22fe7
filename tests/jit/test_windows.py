"""Windows ``x[i:i + c]`` with a loop index ``i``: eager, compiled, batched and differentiated.

Regression (session 16, a helper's programs): a sliding window in a ``for`` loop (a convolution
or moving average written as a loop) worked under ``tl.grad`` but failed under every other
transform: tl.jit ("its size depends on the value of the integer argument `i`"), tl.jit(tl.grad)
("changes shape from one trip to the next") and tl.vmap ("the rank of an operand is unknown");
``np.dot(x[i:i+3], w)`` in such a loop failed even eagerly. The window's size is now ``c``
whatever ``i`` (``_prims/indexing.py``), and compiled code slices it with
``stablehlo.dynamic_slice``.

Oracle: JAX float64 with ``jax.lax.dynamic_slice`` for the windows, and the eager NumPy run;
control: the kernel's values reach the result (a zeroed kernel changes it).
"""
import numpy as np
import pytest

import tlaloc as tl

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

X = np.linspace(-1.0, 2.0, 8)
W = np.array([1.0, -2.0, 0.5])
IMG = np.arange(24.0).reshape(4, 6) * 0.05
K = np.array([[1.0, -2.0, 0.5], [0.3, 0.2, -0.1]])


def moving(x, w):
    s = 0.0
    for i in range(len(x) - 2):
        s = s + np.dot(x[i:i + 3], w) ** 2
    return s


def moving_jax(x, w):
    s = 0.0
    for i in range(len(x) - 2):
        s = s + jnp.dot(jax.lax.dynamic_slice(x, (i,), (3,)), w) ** 2
    return s


def conv2d(x, k):
    out = np.zeros((x.shape[0] - 1, x.shape[1] - 2))
    for i in range(x.shape[0] - 1):
        for j in range(x.shape[1] - 2):
            out[i, j] = np.sum(x[i:i + 2, j:j + 3] * k)
    return np.sum(np.tanh(out))


def conv2d_jax(x, k):
    out = jnp.zeros((x.shape[0] - 1, x.shape[1] - 2))
    for i in range(x.shape[0] - 1):
        for j in range(x.shape[1] - 2):
            out = out.at[i, j].set(jnp.sum(jax.lax.dynamic_slice(x, (i, j), (2, 3)) * k))
    return jnp.sum(jnp.tanh(out))


def overlap_add(x):
    out = np.zeros(x.shape[1] + 2)
    for i in range(x.shape[0]):
        out[i:i + x.shape[1]] += x[i] * (i + 1)
    return np.sum(out ** 2)


def _close(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_a_moving_window(wrap):
    _close(wrap(tl.grad(moving, argnums=(0, 1)))(X, W), jax.grad(moving_jax, argnums=(0, 1))(X, W))
    assert float(tl.jit(moving)(X, W)) == pytest.approx(float(moving(X, W)), rel=1e-13)
    assert float(tl.jit(moving)(X, 0 * W)) == 0.0                                 # control


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_a_two_dimensional_convolution_loop(wrap):
    _close(wrap(tl.grad(conv2d, argnums=(0, 1)))(IMG, K), jax.grad(conv2d_jax, argnums=(0, 1))(IMG, K))


def test_windows_batched_and_written():
    xs = np.stack([X, 2 * X, -X])
    np.testing.assert_allclose(tl.vmap(moving, in_axes=(0, None))(xs, W), [moving(x, W) for x in xs], rtol=1e-13)
    x3 = IMG[:3]
    eager = tl.grad(overlap_add)(x3)
    np.testing.assert_allclose(np.asarray(tl.jit(tl.grad(overlap_add))(x3)), eager, rtol=1e-14)
    eps = 1e-6
    e = np.zeros_like(x3)
    e[1, 2] = eps
    fd = (overlap_add(x3 + e) - overlap_add(x3 - e)) / (2 * eps)
    assert eager[1, 2] == pytest.approx(fd, rel=1e-6)
