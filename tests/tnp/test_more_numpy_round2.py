"""NumPy/SciPy functions a new user's programs called that were refused (session 16, round 2).

``np.gradient`` (uniform spacing, ``edge_order`` 1 and 2, several axes), ``np.maximum.accumulate`` and
``np.minimum.accumulate``, ``scipy.spatial.distance.cdist``/``pdist`` (euclidean, sqeuclidean,
cityblock, cosine), and the refusal of ``scipy.integrate.solve_ivp`` naming its public path (it named
``scipy.integrate.ivp.solve_ivp`` and so missed its specific hint).

Oracle: NumPy/SciPy for values (exact where the composition is exact), JAX float64 for gradients
(``jnp.gradient``, ``lax.cummax``/``cummin``), central differences for the distances; control: the
two edge orders differ.
"""
import numpy as np
import pytest
import scipy.integrate
import scipy.spatial.distance as ssd

import tlaloc as tl
from tlaloc.errors import FenceError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

X = np.linspace(0.0, 2.0, 7) ** 2
A = np.outer(X, X[:5]) + 0.1
P = np.random.default_rng(0).normal(size=(4, 3))


@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_values(edge_order):
    want = np.gradient(X, 0.3, edge_order=edge_order)
    np.testing.assert_array_equal(np.asarray(tl.jit(lambda x: np.gradient(x, 0.3, edge_order=edge_order))(X)), want)
    for got, w in zip(tl.jit(lambda a: np.gradient(a, 0.5, 2.0))(A), np.gradient(A, 0.5, 2.0)):
        np.testing.assert_array_equal(np.asarray(got), w)
    assert not np.allclose(np.gradient(X, 0.3, edge_order=1), np.gradient(X, 0.3, edge_order=2))   # control


def test_gradient_derivatives():
    f = lambda a, xp: sum(xp.sum(g ** 2) for g in xp.gradient(a, 0.5, 2.0))          # noqa: E731
    np.testing.assert_allclose(tl.grad(lambda a: f(a, np))(A), np.asarray(jax.grad(lambda a: f(a, jnp))(A)), rtol=1e-13)


def test_running_maximum_and_minimum():
    x = np.array([0.3, -1.0, 2.0, 1.5, 2.5, 0.1, 3.0])

    def f(x):
        return np.sum(np.maximum.accumulate(x) * np.arange(7.0)) + np.sum(np.minimum.accumulate(x) ** 2)

    def f_jax(x):
        return jnp.sum(jax.lax.cummax(x) * jnp.arange(7.0)) + jnp.sum(jax.lax.cummin(x) ** 2)

    np.testing.assert_array_equal(tl.grad(f)(x), np.asarray(jax.grad(f_jax)(x)))
    assert float(tl.jit(f)(x)) == f(x)
    np.testing.assert_array_equal(np.asarray(tl.jit(lambda a: np.maximum.accumulate(a, axis=1))(A)),
                                  np.maximum.accumulate(A, axis=1))


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cityblock", "cosine"])
def test_distances(metric):
    other = P[:3] + 0.5

    def f(p):
        return np.sum(ssd.cdist(p, other, metric) ** 2) + np.sum(ssd.pdist(p, metric))

    assert float(tl.jit(f)(P)) == pytest.approx(f(P), rel=1e-13)
    eps = 1e-6
    fd = np.zeros_like(P)
    for idx in np.ndindex(P.shape):
        e = np.zeros_like(P)
        e[idx] = eps
        fd[idx] = (f(P + e) - f(P - e)) / (2 * eps)
    np.testing.assert_allclose(tl.grad(f)(P), fd, rtol=1e-6, atol=1e-7)


def test_solve_ivp_is_refused_with_its_hint():
    with pytest.raises(FenceError, match=r"`scipy\.integrate\.solve_ivp` has no tlaloc equivalent yet; write the "
                                         r"solver loop"):
        tl.grad(lambda y: np.sum(scipy.integrate.solve_ivp(lambda t, y: -y, (0, 1), y).y))(np.ones(2))


def test_polyfit_and_digitize():
    x = np.linspace(-1, 1, 9)
    y = np.sin(2 * x) + 0.1 * x ** 3
    w = np.linspace(1, 2, 9)
    for deg, weights in ((1, None), (3, None), (2, w)):
        value, _ = tl.value_and_grad(lambda y: np.sum(np.polyfit(x, y, deg, w=weights) * np.arange(deg + 1.0)))(y)
        assert float(value) == pytest.approx(float(np.sum(np.polyfit(x, y, deg, w=weights) * np.arange(deg + 1.0))),
                                             rel=1e-12, abs=1e-14)

    def smooth(y):
        return np.sum(np.polyval(np.polyfit(x, y, 3), x) ** 2)

    eps = 1e-6
    fd = np.array([(smooth(y + eps * e) - smooth(y - eps * e)) / (2 * eps) for e in np.eye(9)])
    np.testing.assert_allclose(tl.grad(smooth)(y), fd, rtol=1e-6, atol=1e-8)
    bins = np.array([-0.5, 0.0, 0.5])
    for right in (False, True):
        np.testing.assert_array_equal(np.asarray(tl.jit(lambda x: np.digitize(x, bins, right=right))(x)),
                                      np.digitize(x, bins, right=right))


def test_fill_diagonal_in_place():
    a = np.arange(12.0).reshape(3, 4) * 0.1

    def f(a, s):
        b = a * 1.0
        np.fill_diagonal(b, s[0])
        return np.sum(b ** 2)

    def f_jax(a, s):
        return jnp.sum(jnp.where(jnp.eye(3, 4, dtype=bool), s[0], a) ** 2)

    s = np.array([2.0])
    assert float(tl.jit(f)(a, s)) == pytest.approx(f(a, s), rel=1e-15)
    for got, want in zip(tl.grad(f, argnums=(0, 1))(a, s), jax.grad(f_jax, argnums=(0, 1))(a, s)):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-15)
