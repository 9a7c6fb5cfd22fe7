"""Starred assignment targets: ``*hidden, last = layers``, ``coef, *_ = np.linalg.lstsq(...)``.

Before, they were refused, and with a misleading message ("cannot unpack 3 values into 2 names",
the count check firing before the starred target was seen): a new user's MLP and least-squares
programs (session 15) stopped there. The starred name gets a Python list, as in Python; an array
unpacks along its first axis.

Oracles: JAX float64 on the same programs written with explicit indexing. Negative controls:
too few values is refused as Python refuses it.
"""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import TlalocError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


def mlp(params, x):
    *hidden, last = params
    for W, b in hidden:
        x = np.tanh(x @ W + b)
    W, b = last
    return np.sum((x @ W + b) ** 2)


def mlp_jax(params, x):
    for W, b in params[:-1]:
        x = jnp.tanh(x @ W + b)
    W, b = params[-1]
    return jnp.sum((x @ W + b) ** 2)


def ends_and_middle(x):
    first, *middle, end = x
    return first * 2.0 + np.sum(np.array(middle) ** 2) + end * 5.0


def least_squares_norm(A, b):
    coef, *_ = np.linalg.lstsq(A, b, rcond=None)
    return np.sum(coef ** 2)


def test_mlp_with_starred_layers_against_jax():
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((3, 4)), rng.standard_normal(4)), (rng.standard_normal((4, 4)), rng.standard_normal(4)),
              (rng.standard_normal((4, 2)), rng.standard_normal(2))]
    x = rng.standard_normal((5, 3))
    got = tl.grad(mlp)(params, x)
    want = jax.grad(mlp_jax)([tuple(map(jnp.asarray, p)) for p in params], jnp.asarray(x))
    for (gw, gb), (ww, wb) in zip(got, want):
        np.testing.assert_allclose(gw, np.asarray(ww), rtol=1e-12)
        np.testing.assert_allclose(gb, np.asarray(wb), rtol=1e-12)


def test_array_unpacks_along_its_first_axis():
    np.testing.assert_allclose(tl.grad(ends_and_middle)(np.array([1.0, 2.0, 3.0, 4.0])), [2.0, 4.0, 6.0, 5.0])
    assert tl.value_and_grad(ends_and_middle)(np.array([1.0, 2.0, 3.0, 4.0]))[0] == ends_and_middle(
        np.array([1.0, 2.0, 3.0, 4.0]))


def test_lstsq_coefficients_against_jax():
    A = np.array([[1.0, 0.5], [0.2, 2.0], [1.0, 1.0]])
    b = np.array([1.0, 2.0, 0.5])
    want = jax.grad(lambda b: jnp.sum(jnp.linalg.lstsq(jnp.asarray(A), b)[0] ** 2))(jnp.asarray(b))
    np.testing.assert_allclose(tl.grad(least_squares_norm, argnums=1)(A, b), np.asarray(want), rtol=1e-12)


def too_few(x):
    a, b, *c, d = x
    return a


def test_refusals_as_python_refuses():
    with pytest.raises(TlalocError, match=r"test_starred_unpacking.py:\d+:\d+: not enough values to unpack "
                                          r"\(expected at least 3, got 2\)"):
        tl.grad(too_few)(np.ones(2))
