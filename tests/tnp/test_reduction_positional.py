"""Reductions take their positional arguments in NumPy's order (a, axis, dtype, out, keepdims):
``np.sum(x, 0, np.float64)`` passes a dtype, not keepdims. Before, tlaloc read the third
argument as keepdims, so ``np.sum(x, 0, np.float64)[0]`` was a whole row (15.0 instead of 3.0)
under every transform, silently. Oracle: NumPy for values, JAX float64 for gradients."""
import numpy as np
import pytest

import tlaloc as tl


def first_column_sum(x):
    s = np.sum(x, 0, np.float64)               # dtype, positionally
    return np.sum(s[0])


def row_means_weighted(x):
    return np.sum(np.mean(x, 1, None, None, True) * x)     # keepdims, fifth positionally


def spread(x):
    return np.sum(np.var(x, 0, None, None, 1) + np.std(x, 1, None, None, 0, True))   # ddof, keepdims


def extremes(x):
    return np.sum(np.max(x, 0, None, True) - np.min(x, 0, None, False))               # out=None, keepdims


@pytest.mark.parametrize("fn", [first_column_sum, row_means_weighted, spread, extremes])
def test_positional_reduction_arguments_follow_numpy(fn):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    x = np.array([[0.5, 1.0, 2.0], [3.0, 4.5, 5.0]])
    value, grad = tl.value_and_grad(fn)(x)
    assert value == pytest.approx(fn(x), rel=1e-12)                          # NumPy itself
    src = {first_column_sum: lambda x: jnp.sum(jnp.sum(x, 0, jnp.float64)[0]),
           row_means_weighted: lambda x: jnp.sum(jnp.mean(x, 1, keepdims=True) * x),
           spread: lambda x: jnp.sum(jnp.var(x, 0, ddof=1) + jnp.std(x, 1, keepdims=True)),
           extremes: lambda x: jnp.sum(jnp.max(x, 0, keepdims=True) - jnp.min(x, 0))}[fn]
    np.testing.assert_allclose(grad, np.asarray(jax.grad(src)(x)), rtol=1e-12, atol=1e-12)


def test_negative_control_the_old_reading_differs():
    x = np.array([[0.5, 1.0, 2.0], [3.0, 4.5, 5.0]])
    assert np.sum(np.sum(x, 0, keepdims=True)[0]) != first_column_sum(x)    # what keepdims=True gave
