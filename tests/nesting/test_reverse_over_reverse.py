"""Nesting reverse mode: grad of grad, vjp of grad, through loops and branches.

Regression: the forward/backward split once moved an inner backward sweep (primal
code for the outer transform) into the outer backward part, refusing with "a primal
output depends on a cotangent".
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl

jax.config.update("jax_enable_x64", True)


def f_plain(x):
    return (np.sin(x) * x).sum()


def j_plain(x):
    return (jnp.sin(x) * x).sum()


def f_loop(x):
    s = 0.0
    for i in range(3):
        s = s + np.sin(x * s + 1.0)
    return s.sum()


def j_loop(x):
    s = 0.0
    for i in range(3):
        s = s + jnp.sin(x * s + 1.0)
    return s.sum()


def f_branch(x):
    if x.sum() > 0:
        y = np.exp(x) * x
    else:
        y = x ** 3
    return y.sum()


def j_branch(x):
    return jnp.where(x.sum() > 0, (jnp.exp(x) * x).sum(), (x ** 3).sum())


CASES = [(f_plain, j_plain), (f_loop, j_loop), (f_branch, j_branch)]
POINTS = [np.array([0.3, -1.2]), np.array([-0.7, -0.4])]


@pytest.mark.parametrize("f,j", CASES, ids=lambda c: getattr(c, "__name__", ""))
@pytest.mark.parametrize("x", POINTS, ids=["pos", "neg"])
def test_vjp_of_grad_matches_jax(f, j, x):
    v = np.array([1.0, -2.0])
    _, pullback = tl.vjp(tl.grad(f), x)
    want = jax.vjp(jax.grad(j), x)[1](v)[0]
    np.testing.assert_allclose(pullback(v)[0], want, rtol=1e-10, atol=1e-12)


def _sum_of_grad_loop(x):
    return tl.grad(f_loop)(x).sum()


def _sum_of_grad_branch(x):
    return tl.grad(f_branch)(x).sum()


@pytest.mark.parametrize("outer,j", [(_sum_of_grad_loop, j_loop), (_sum_of_grad_branch, j_branch)])
@pytest.mark.parametrize("x", POINTS, ids=["pos", "neg"])
def test_grad_of_grad_matches_jax(outer, j, x):
    want = jax.grad(lambda z: jax.grad(j)(z).sum())(x)
    np.testing.assert_allclose(tl.grad(outer)(x), want, rtol=1e-10, atol=1e-12)


def test_jacrev_of_grad_equals_hessian():
    x = POINTS[0]
    np.testing.assert_allclose(tl.jacrev(tl.grad(f_loop))(x), tl.hessian(f_loop)(x), rtol=1e-10, atol=1e-12)


def test_negative_control_first_order_is_not_second_order():
    x = POINTS[0]
    assert not np.allclose(tl.grad(_sum_of_grad_loop)(x), tl.grad(f_loop)(x))
