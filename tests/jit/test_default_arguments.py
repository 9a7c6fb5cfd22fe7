"""Parameters with defaults left out of a call to a transform that is compiled or inlined.

Regression (a new user's program, session 15): ``tl.grad(f)`` with ``def f(a, k=2.0)`` worked
eagerly, but ``tl.jit(tl.grad(f))(x)`` raised "df_da: takes 2 positional arguments, got 1" and a
``tl.grad(f)(a)`` inside a jitted function raised an internal "inline df_da: 2 inputs, 1 args":
the compiled and inlined paths used the definition-time build, which takes every parameter.

Oracle: JAX float64 with the default applied; negative control: passing another ``k`` changes
the result, so a result that ignored the default would be caught.
"""
import numpy as np
import pytest

import tlaloc as tl

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


def energy(a, k=2.0, p=3):
    return k * np.sum(np.abs(a) ** p)


def energy_jax(a, k=2.0, p=3):
    return k * jnp.sum(jnp.abs(a) ** p)


X = np.array([0.5, -1.5, 2.0])


def test_jit_of_grad_and_value_and_grad_leave_defaults_out():
    want = np.asarray(jax.grad(energy_jax)(X))
    np.testing.assert_allclose(tl.jit(tl.grad(energy))(X), want, rtol=1e-15)
    value, g = tl.jit(tl.value_and_grad(energy))(X)
    np.testing.assert_allclose(value, energy(X), rtol=1e-15)
    np.testing.assert_allclose(g, want, rtol=1e-15)
    # one default given, the other left out; a different k must change the gradient (control)
    np.testing.assert_allclose(tl.jit(tl.grad(energy))(X, 5.0), np.asarray(jax.grad(energy_jax)(X, 5.0)), rtol=1e-15)
    assert not np.allclose(tl.jit(tl.grad(energy))(X, 5.0), want)


def step(a):
    return a - 0.1 * tl.grad(energy)(a)      # a transform called inside a compiled function


def test_grad_inside_a_jitted_function_leaves_defaults_out():
    want = X - 0.1 * np.asarray(jax.grad(energy_jax)(X))
    np.testing.assert_allclose(tl.jit(step)(X), want, rtol=1e-15)
    np.testing.assert_allclose(step(X), want, rtol=1e-15)


def test_vmap_and_hessian_leave_defaults_out():
    batch = np.stack([X, 2 * X])
    want = np.asarray(jax.vmap(jax.grad(energy_jax))(batch))
    np.testing.assert_allclose(tl.vmap(tl.grad(energy))(batch), want, rtol=1e-15)
    np.testing.assert_allclose(tl.jit(tl.hessian(energy))(X), np.asarray(jax.hessian(energy_jax)(X)), rtol=1e-14)


def energy_mode(a, mode="square"):
    if mode == "cube":
        return np.sum(a ** 3)
    return np.sum(a ** 2)


def test_a_string_default_is_read_at_the_first_call():
    # regression (adversarial pass): tl.grad(f) itself raised a bare TypeError "cannot use str
    # 'square' as an array operand" with no location
    g = tl.grad(energy_mode)
    np.testing.assert_allclose(g(X), 2 * X)
    np.testing.assert_allclose(g(X, "cube"), 3 * X ** 2)
    np.testing.assert_allclose(tl.jit(tl.grad(energy_mode))(X), 2 * X)
