"""``scipy.integrate.odeint`` with a right-hand side returning a list, as SciPy's cookbook writes it.

Regression (session 16, a helper's programs): ``return [dx, dy]`` was refused ("must return one
array dy/dt, got list"); SciPy reads it as an array. Oracle: the same program with the
right-hand side returning ``np.array([...])`` (itself checked against autograd elsewhere) and
central differences of the plain SciPy program; control: the two parameters' gradients differ.
"""
import numpy as np
import pytest
import scipy.integrate

import tlaloc as tl

T = np.linspace(0.0, 1.0, 5)
P = np.array([1.1, 0.4])


def lotka_volterra(y, t, a, b):
    x, z = y
    return [a * x - b * x * z, -z + 0.5 * x * z]


def lotka_volterra_array(y, t, a, b):
    x, z = y
    return np.array([a * x - b * x * z, -z + 0.5 * x * z])


def final_energy(p, rhs):
    sol = scipy.integrate.odeint(rhs, np.array([1.0, 0.5]), T, args=(p[0], p[1]), rtol=1e-11, atol=1e-11)
    return np.sum(sol[-1] ** 2)


def test_list_returning_rhs_matches_the_array_one_and_differences():
    g = tl.grad(lambda p: final_energy(p, lotka_volterra))(P)
    np.testing.assert_allclose(g, tl.grad(lambda p: final_energy(p, lotka_volterra_array))(P), rtol=1e-12)
    eps = 1e-5
    fd = [(final_energy(P + eps * e, lotka_volterra) - final_energy(P - eps * e, lotka_volterra)) / (2 * eps)
          for e in np.eye(2)]
    np.testing.assert_allclose(g, fd, rtol=1e-5)
    assert abs(g[0] - g[1]) > 1.0                                            # control


def with_defaults(p, rhs=lotka_volterra, mode="last", verbose=False):
    sol = scipy.integrate.odeint(rhs, np.array([1.0, 0.5]), T, args=(p[0], p[1]), rtol=1e-11, atol=1e-11)
    if verbose:
        print("solved")
    return np.sum(sol[-1] ** 2) if mode == "last" else np.sum(sol ** 2)


def test_function_string_and_flag_defaults_are_taken_before_the_first_call():
    """Regression: ``tl.grad(with_defaults)`` failed where it was applied: the default function
    became an array input of the definition-time build."""
    g = tl.grad(with_defaults)
    np.testing.assert_allclose(g(P), tl.grad(lambda p: final_energy(p, lotka_volterra))(P), rtol=1e-12)
    everything = g(P, mode="all")
    np.testing.assert_allclose(g(P, lotka_volterra, "all"), everything, rtol=1e-14)
    assert not np.allclose(everything, g(P))                                 # control: mode reached it
