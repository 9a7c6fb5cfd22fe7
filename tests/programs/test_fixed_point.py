"""``tlaloc.misc.fixed_points.fixed_point`` (autograd's name): the iteration's value, its
implicit gradient and second derivative against autograd's, and the refusals."""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from autograd.misc.fixed_points import fixed_point as a_fixed_point

import tlaloc as tl
from tlaloc.misc.fixed_points import fixed_point


def descent_step(a):
    return lambda x: x - 0.05 * (x ** 2 - a)


def a_descent_step(a):
    return lambda x: x - 0.05 * (x ** 2 - a)


def distance(x, y):
    return np.abs(x - y)


def a_distance(x, y):
    return anp.abs(x - y)


def sqrt(a):
    return fixed_point(descent_step, a, 10.0, distance, 1e-4)


def a_sqrt(a):
    return a_fixed_point(a_descent_step, a, 10.0, a_distance, 1e-4)


def test_value_is_the_iterations():
    assert sqrt(2.0) == a_sqrt(2.0)
    assert abs(sqrt(2.0) - np.sqrt(2.0)) < 1e-3          # a loose tolerance: only near sqrt(2)


@pytest.mark.parametrize("a", [2.0, 0.7])
def test_first_and_second_derivatives_equal_autograds(a):
    # the implicit rule with autograd's iterations: equal to rounding, though both differ from
    # 1/(2 sqrt a) by the loose tolerance; a derivative of the unrolled loop would differ more
    np.testing.assert_allclose(tl.grad(sqrt)(a), autograd.grad(a_sqrt)(a), rtol=1e-12)
    np.testing.assert_allclose(tl.grad(tl.grad(sqrt))(a), autograd.grad(autograd.grad(a_sqrt))(a), rtol=1e-10)
    assert abs(tl.grad(sqrt)(a) - 0.5 / np.sqrt(a)) < 1e-2


def matrix_step(params):
    W, b = params
    return lambda x: np.tanh(np.dot(W, x) + b)


def norm_distance(x, y):
    return np.sqrt(np.sum((x - y) ** 2))


def equilibrium_loss(W, b):
    return np.sum(fixed_point(matrix_step, (W, b), np.zeros(3), norm_distance, 1e-12) ** 2)


def test_pytree_parameters_against_the_implicit_function_theorem():
    # x* = tanh(W x* + b); with a tight tolerance the gradient is the exact implicit one
    r = np.random.RandomState(2)
    W, b = 0.3 * r.randn(3, 3), r.randn(3)
    gW, gb = tl.grad(equilibrium_loss, argnums=(0, 1))(W, b)
    x = np.zeros(3)
    for _ in range(500):
        x = np.tanh(W @ x + b)
    D = np.diag(1 - x ** 2)
    w = np.linalg.solve((np.eye(3) - D @ W).T, 2 * x)     # (I - D W)^T w = dL/dx*
    np.testing.assert_allclose(gb, D @ w, rtol=1e-8)
    np.testing.assert_allclose(gW, np.outer(D @ w, x), rtol=1e-8)


def test_jit_and_forward_mode_are_refused_by_name():
    with pytest.raises(tl.NoRuleError, match="fixed_point"):
        tl.jit(tl.grad(sqrt))(2.0)
    with pytest.raises(tl.NoRuleError, match="fixed_point"):
        tl.jvp(sqrt, (2.0,), (1.0,))
