"""Python's ``math`` functions on a differentiated value: ``math.exp(theta)`` in plain scalar code.

Before, every such call was refused ("cannot differentiate through `exp` (from math)"), as
autograd and JAX refuse it. Now each becomes the NumPy function of the same mathematics, in
float64 as ``math`` computes.

Oracles: the plain Python function (the value, to 1e-15 relative: NumPy's and the C library's
last bit may differ), JAX in float64 (gradients, Hessians), and central differences. Negative
controls: an array of several numbers is refused at the user's line, as ``math`` refuses it;
``math.floor`` is refused by name; a wrong oracle is told apart from the right one.
"""
import math

import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import TlalocError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy
jsp = jax.scipy.special


def unary(theta, r):
    return (r * math.sin(theta) + math.exp(-theta) * math.log(r) + math.sqrt(r) * math.cos(theta)
            + math.tanh(theta) + math.log1p(r) + math.expm1(theta) + math.log10(r) + math.log2(r)
            + math.atan(theta) + math.asinh(theta) + math.fabs(theta - 1.0) + math.radians(r))


def unary_jax(theta, r):
    return (r * jnp.sin(theta) + jnp.exp(-theta) * jnp.log(r) + jnp.sqrt(r) * jnp.cos(theta)
            + jnp.tanh(theta) + jnp.log1p(r) + jnp.expm1(theta) + jnp.log10(r) + jnp.log2(r)
            + jnp.arctan(theta) + jnp.arcsinh(theta) + jnp.abs(theta - 1.0) + jnp.radians(r))


def binary(theta, r):
    return math.atan2(theta, r) + math.pow(r, 3) + math.hypot(theta, r) + math.log(r, 2) + math.copysign(r, theta)


def binary_jax(theta, r):
    return jnp.arctan2(theta, r) + r ** 3 + jnp.hypot(theta, r) + jnp.log(r) / jnp.log(2.0) + jnp.copysign(r, theta)


def special(theta, r):
    return math.erf(theta) * math.erfc(r / 3) + math.lgamma(r) + math.gamma(r)


def special_jax(theta, r):
    return jsp.erf(theta) * jsp.erfc(r / 3) + jsp.gammaln(r) + jsp.gamma(r)


def pendulum_energy(state):
    """Plain scalar physics code: math on the elements of an array argument."""
    theta, omega = state[0], state[1]
    return 0.5 * omega ** 2 + 9.81 * (1.0 - math.cos(theta))


CASES = [(unary, unary_jax), (binary, binary_jax), (special, special_jax)]


@pytest.mark.parametrize("f, f_jax", CASES, ids=[c[0].__name__ for c in CASES])
def test_value_and_gradient_against_jax(f, f_jax):
    theta, r = 0.7, 1.9
    value, grads = tl.value_and_grad(f, argnums=(0, 1))(theta, r)
    assert np.isclose(value, f(theta, r), rtol=1e-14, atol=0)     # lgamma: SciPy's gammaln, not C's
    expected = jax.grad(f_jax, argnums=(0, 1))(theta, r)
    np.testing.assert_allclose(np.array(grads), np.array(expected), rtol=1e-13)
    wrong = jax.grad(f_jax, argnums=(0, 1))(theta, r + 1e-3)     # negative control: a nearby point
    assert not np.allclose(np.array(grads), np.array(wrong), rtol=1e-6)


@pytest.mark.parametrize("f, f_jax", CASES, ids=[c[0].__name__ for c in CASES])
def test_hessian_against_jax(f, f_jax):
    h = tl.hessian(lambda v: f(v[0], v[1]))(np.array([0.7, 1.9]))
    expected = jax.hessian(lambda v: f_jax(v[0], v[1]))(jnp.array([0.7, 1.9]))
    np.testing.assert_allclose(h, np.array(expected), rtol=1e-11, atol=1e-12)


def test_elements_of_an_array_argument():
    state = np.array([0.4, -1.3])
    g = tl.grad(pendulum_energy)(state)
    np.testing.assert_allclose(g, [9.81 * math.sin(0.4), -1.3], rtol=1e-15)
    h = 1e-6
    fd = [(pendulum_energy(state + h * e) - pendulum_energy(state - h * e)) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(g, fd, rtol=1e-8)


def test_float32_and_int_arguments_compute_in_float64():
    # math converts its argument to a C double: the value is float64's, not float32's
    x32 = np.float32(0.1)
    value = tl.value_and_grad(lambda x: math.exp(x) * 3.0)(x32)[0]
    assert value.dtype == np.float64
    assert value == math.exp(float(x32)) * 3.0
    assert value != np.float64(np.exp(x32) * np.float32(3.0))       # control: the float32 result differs
    # an integer argument is a float to math: pow(2, 3) is 8.0, not an integer power
    assert tl.jvp(lambda x, n: math.pow(x, n), (1.5, 3), (1.0, 0))[1] == pytest.approx(3 * 1.5 ** 2, rel=1e-15)


def test_under_jit_and_vmap():
    f = tl.jit(tl.grad(lambda t: math.sin(t) * math.exp(t)))
    t = 0.3
    assert f(t) == pytest.approx(math.cos(t) * math.exp(t) + math.sin(t) * math.exp(t), rel=1e-14)
    batched = tl.vmap(tl.grad(lambda t: math.sin(t) * math.exp(t)))(np.array([0.1, 0.3, 0.5]))
    np.testing.assert_allclose(batched, [math.cos(t) * math.exp(t) + math.sin(t) * math.exp(t) for t in (0.1, 0.3, 0.5)],
                               rtol=1e-14)


def several_numbers(x):
    return math.exp(x)


def test_array_of_several_numbers_is_refused_at_the_call():
    with pytest.raises(TlalocError) as e:
        tl.grad(several_numbers)(np.ones(3))
    message = str(e.value)
    assert "test_math_module.py" in message and "math.exp" in message and "np.exp" in message and "(3,)" in message


def floor_times(x):
    return math.floor(x) * x


def test_floor_is_refused_by_name():
    with pytest.raises(TlalocError, match=r"`math.floor`.*returns an int"):
        tl.grad(floor_times)(1.5)


def test_only_a_0d_array_is_a_number_as_in_numpy():
    # NumPy 2.4: math.sin(np.array([0.2])) raises "only 0-dimensional arrays can be converted"
    g = tl.grad(lambda x: math.sin(x[0]) * 2.0)(np.array([0.2, 5.0]))
    np.testing.assert_allclose(g, [2 * math.cos(0.2), 0.0], rtol=1e-15)
    with pytest.raises(TlalocError, match=r"`math.sin` takes a number \(a 0-d array\).*shape \(1,\)"):
        tl.grad(lambda x: math.sin(x[0:1]) * 2.0)(np.array([0.2, 5.0]))
    # x.item() takes any size-1 array, as NumPy's does
    np.testing.assert_allclose(tl.grad(lambda x: x[0:1].item() * 2.0)(np.array([0.2, 5.0])), [2.0, 0.0])


def test_data_dependent_size_and_containers_are_refused_at_the_call():
    # regression (helper's adversarial pass): a boolean mask's size crashed the check with a TypeError
    with pytest.raises(TlalocError, match=r"test_math_module.py:\d+:\d+: `math.exp` takes one number"):
        tl.grad(lambda v: math.exp(v[v > 1.0]))(np.array([0.3, 0.7, 1.2]))
    with pytest.raises(TlalocError, match=r"`math.exp` takes a real number, not a tuple"):
        tl.grad(lambda v: math.exp((v,)))(0.3)


def loss_as_python_float(w, x):
    residual = x @ w - 1.0
    loss = float(np.sum(residual ** 2))         # a common way to hand back a plain number
    return loss / len(x)


def largest_times_two(x):
    k = np.argmax(x).item()                     # an integer .item(): an index, as in NumPy
    return x[k].item() * 2.0 + x[0]


def test_float_and_item_are_the_number_they_hold():
    # before: refused ("the builtin `float` cannot take an array", "arrays have no attribute `item`")
    w, x = np.array([0.5, -1.0]), np.array([[1.0, 2.0], [3.0, 0.5], [-1.0, 1.0]])
    g = tl.grad(loss_as_python_float)(w, x)
    np.testing.assert_allclose(g, 2 * x.T @ (x @ w - 1.0) / 3, rtol=1e-15)
    assert tl.value_and_grad(loss_as_python_float)(w, x)[0] == loss_as_python_float(w, x)
    np.testing.assert_allclose(tl.grad(largest_times_two)(np.array([1.0, 5.0, 2.0])), [1.0, 2.0, 0.0])
    np.testing.assert_allclose(tl.jit(tl.grad(loss_as_python_float))(w, x), g, rtol=1e-14)
    with pytest.raises(TlalocError, match=r"`x.item\(\)` takes one number.*shape \(3,\)"):
        tl.grad(lambda v: v.item() * 2.0)(np.ones(3))


def test_gamma_of_integers_is_the_factorial():
    # regression (adversarial pass): math.gamma went through exp(gammaln): 24.000000000000004 for Γ(5)
    for n in range(1, 24):
        assert tl.value_and_grad(lambda x: math.gamma(x))(float(n))[0] == math.factorial(n - 1)
