"""``scipy.integrate.odeint`` in a differentiated function (issue 14): SciPy's solution, the
adjoint method's gradient against autograd's odeint and against the exact gradient of a
linear ODE, and the refusals (jit, forward mode, a nested func)."""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from autograd.builtins import tuple as a_tuple
from autograd.scipy.integrate import odeint as a_odeint
from scipy.integrate import odeint

import tlaloc as tl
from tlaloc.misc import flatten

r = np.random.RandomState(11)
PARAMS = [(0.5 * r.randn(2, 8), 0.5 * r.randn(8)), (0.5 * r.randn(8, 2), 0.5 * r.randn(2))]
T = np.linspace(0.0, 1.5, 7)
Y0 = np.array([2.0, 0.0])
TARGET = r.randn(7, 2)
A = np.array([[-0.1, 2.0], [-2.0, -0.1]])


def mlp_dynamics(y, t, params):
    for W, b in params:
        out = np.dot(y, W) + b
        y = np.maximum(0, out)
    return out


def a_mlp_dynamics(y, t, params):
    for W, b in params:
        out = anp.dot(y, W) + b
        y = anp.maximum(0, out)
    return out


def neural_ode_loss(params, y0, t):
    pred = odeint(mlp_dynamics, y0, t, tuple((params,)), rtol=0.01)
    return np.mean(np.abs(pred - TARGET))


def a_neural_ode_loss(params, y0, t):
    pred = a_odeint(a_mlp_dynamics, y0, t, a_tuple((params,)), rtol=0.01)
    return anp.mean(anp.abs(pred - TARGET))


def test_values_are_scipys():
    want = np.mean(np.abs(odeint(mlp_dynamics, Y0, T, (PARAMS,), rtol=0.01) - TARGET))
    value, _ = tl.value_and_grad(neural_ode_loss)(PARAMS, Y0, T)
    assert value == want


def test_gradient_matches_autograds_odeint():
    # the same augmented system, solver and tolerance as autograd: equal to rounding, even at rtol=0.01
    got = tl.grad(neural_ode_loss, argnums=(0, 1, 2))(PARAMS, Y0, T)
    want = autograd.grad(a_neural_ode_loss, argnum=(0, 1, 2))(PARAMS, Y0, T)
    np.testing.assert_allclose(flatten(got)[0], flatten(want)[0], rtol=1e-9, atol=1e-12)


def decay(y, t, k):
    return -k * y


def decay_loss(k, y0, t, w):
    return np.sum(odeint(decay, y0, t, args=(k,), rtol=1e-11, atol=1e-12)[:, 0] * w)


def test_gradient_is_exact_for_a_linear_ode():
    # y(t) = y0 exp(-k (t - t0)): every cotangent has a closed form; an error in the adjoint's
    # signs, its start at t_{T-1} or the added cotangents at observation times shows here
    k, y0, t, w = 0.7, np.array([1.5]), np.array([0.0, 0.3, 0.9, 1.4]), np.array([0.5, -1.0, 2.0, 0.25])
    y = y0[0] * np.exp(-k * (t - t[0]))
    got_k, got_y0, got_t = tl.grad(decay_loss, argnums=(0, 1, 2))(k, y0, t, w)
    np.testing.assert_allclose(got_k, np.sum(w * y * -(t - t[0])), rtol=1e-7)
    np.testing.assert_allclose(got_y0, [np.sum(w * y / y0[0])], rtol=1e-7)
    t_bar = w * -k * y
    t_bar[0] = -np.sum(t_bar[1:])
    np.testing.assert_allclose(got_t, t_bar, rtol=1e-6, atol=1e-9)


def linear_dynamics(y, t):
    return np.dot(y ** 3, A)                   # A: a global array, a constant of the rule


def cubic_loss(y0):
    return np.sum(odeint(linear_dynamics, y0, T) ** 2)


def test_arrays_read_from_globals_are_constants():
    want = autograd.grad(lambda y0: anp.sum(a_odeint(lambda y, t: anp.dot(y ** 3, A), y0, T, a_tuple(())) ** 2))(Y0)
    np.testing.assert_allclose(tl.grad(cubic_loss)(Y0), want, rtol=1e-5)


def test_jit_and_forward_mode_are_refused_by_name():
    with pytest.raises(tl.NoRuleError, match="odeint"):
        tl.jit(tl.grad(cubic_loss))(Y0)
    with pytest.raises(tl.NoRuleError, match="odeint.*reverse-mode rule"):
        tl.jvp(cubic_loss, (Y0,), (np.ones(2),))


def nested_func_loss(k):
    return np.sum(odeint(lambda y, t: -k * y, Y0, T))


def test_a_nested_func_is_refused_at_the_users_line():
    with pytest.raises(tl.FenceError, match=r"test_odeint\.py:\d+:\d+: odeint's `func` must be a function "
                                            r"defined with `def` outside"):
        tl.grad(nested_func_loss)(0.5)


def test_generated_source_defines_the_right_hand_side():
    source = tl.source(tl.grad(neural_ode_loss), PARAMS, Y0, T)
    assert "def mlp_dynamics(" in source and "def mlp_dynamics_vjp(" in source
    assert "lax.odeint_adjoint(" in source
