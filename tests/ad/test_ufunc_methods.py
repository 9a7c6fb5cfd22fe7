"""``np.add.accumulate(x)``, ``np.multiply.reduce(x, axis=1)``: NumPy's ufunc methods in user code.

Before, every ufunc method was refused with "cannot differentiate through `ufunc.accumulate` (from
unknown)" (a new user's program, session 15). reduce and accumulate of add, multiply, maximum,
minimum, logical_and and logical_or now map onto the tlaloc.numpy reductions and cumulative
functions, along axis 0 by default as the methods take it (np.sum and np.cumsum default to every
axis: the control below tells the two apart). The rest are refused by qualified name.

Oracle: JAX float64.
"""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import TlalocError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

X = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.5]])


def running_sums(x):
    return np.sum(np.add.accumulate(x) ** 2) + np.sum(np.multiply.accumulate(x, axis=1))


def reductions(x):
    return (np.sum(np.add.reduce(x) ** 2) + np.sum(np.multiply.reduce(x, axis=1))
            + np.sum(np.maximum.reduce(x, axis=1, keepdims=True)) + np.sum(np.minimum.reduce(x)))


def running_sums_jax(x):
    return jnp.sum(jnp.cumsum(x, axis=0) ** 2) + jnp.sum(jnp.cumprod(x, axis=1))


def reductions_jax(x):
    return (jnp.sum(jnp.sum(x, axis=0) ** 2) + jnp.sum(jnp.prod(x, axis=1))
            + jnp.sum(jnp.max(x, axis=1, keepdims=True)) + jnp.sum(jnp.min(x, axis=0)))


@pytest.mark.parametrize("f, f_jax", [(running_sums, running_sums_jax), (reductions, reductions_jax)])
def test_values_and_gradients_against_jax(f, f_jax):
    value, g = tl.value_and_grad(f)(X)
    assert value == f(X)
    np.testing.assert_allclose(g, np.asarray(jax.grad(f_jax)(X)), rtol=1e-15)
    np.testing.assert_allclose(tl.jit(tl.grad(f))(X), np.asarray(jax.grad(f_jax)(X)), rtol=1e-15)


def test_axis_zero_is_the_default_not_every_axis():
    got = tl.grad(lambda x: np.sum(np.add.accumulate(x) ** 2))(X)
    flat = jax.grad(lambda x: jnp.sum(jnp.cumsum(x) ** 2))(X)           # np.cumsum's default: flattened
    assert not np.allclose(got, np.asarray(flat))


def running_logaddexp(x):
    return np.sum(np.logaddexp.accumulate(x))


def test_other_methods_are_refused_by_qualified_name():
    # (np.maximum.accumulate, refused here before session 16, is now supported: tnp.maximum_accumulate)
    with pytest.raises(TlalocError, match=r"test_ufunc_methods.py:\d+:\d+: `numpy.logaddexp.accumulate` has no tlaloc "
                                          r"equivalent yet; write the running logaddexp as a `for` loop"):
        tl.grad(running_logaddexp)(X)


def reduce_a_list(x):
    return np.sum(np.add.reduce([x, 2.0 * x]) ** 2)


def test_a_list_argument_is_stacked_as_numpy_does():
    # regression (adversarial pass): the list was not stacked, the outer reduction dropped
    x = np.array([1.5, -2.0, 0.5, 3.0])
    assert tl.value_and_grad(reduce_a_list)(x)[0] == reduce_a_list(x)
    np.testing.assert_allclose(tl.grad(reduce_a_list)(x), 18.0 * x, rtol=1e-15)
    assert tl.jit(lambda v: np.sum(np.add.reduce([v, 2.0 * v])))(x) == np.sum(np.add.reduce([x, 2.0 * x]))


def accumulate_all_axes(x):
    return np.sum(np.add.accumulate(x, axis=None))


def test_accumulate_over_several_axes_is_refused_as_numpy_refuses():
    with pytest.raises(TlalocError, match=r"`numpy.add.accumulate` takes one axis \(an int\), got None"):
        tl.grad(accumulate_all_axes)(np.ones((2, 2)))
