"""A tangent has its primal's shape, also where only a broadcast operand moves.

Regression: the JVP of ``x + s`` with a tangent for the scalar ``s`` alone was the
scalar tangent itself, so ``jacfwd(lambda x, s: (x + s).sum(), argnums=1)`` gave
1.0 instead of ``x.size``, and indexing the tangent failed (the same for the other
broadcasting binary operations whose partial derivative is a constant:
``subtract``, ``remainder``). Oracle: JAX float64.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl

jax.config.update("jax_enable_x64", True)

X = np.array([0.3, 1.7, -0.8, 2.4])
S = np.float64(1.3)


def _sum_add(x, s):
    return (x + s).sum()


def _sum_sub(x, s):
    return (x - s).sum() + (s - x).sum() * 2.0


def _pick(x, s):
    y = x * 2.0 + s
    return y[2] * 3.0


def _vector(x, s):
    return x + s


def _rem(x, s):
    return np.remainder(x + 5.0, s).sum()


def _mixed(x, s):
    return (np.maximum(x, s) + np.arctan2(x, s) + x / s).sum()


CASES = [(_sum_add, lambda x, s: (x + s).sum()),
         (_sum_sub, lambda x, s: (x - s).sum() + (s - x).sum() * 2.0),
         (_pick, lambda x, s: (x * 2.0 + s)[2] * 3.0),
         (_vector, lambda x, s: x + s),
         (_rem, lambda x, s: jnp.remainder(x + 5.0, s).sum()),
         (_mixed, lambda x, s: (jnp.maximum(x, s) + jnp.arctan2(x, s) + x / s).sum())]


@pytest.mark.parametrize("f,twin", CASES, ids=[c[0].__name__ for c in CASES])
def test_jacfwd_in_the_broadcast_operand_equals_jax(f, twin):
    got = tl.jacfwd(f, argnums=1)(X, S)
    want = jax.jacfwd(twin, argnums=1)(jnp.asarray(X), jnp.asarray(S))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("f,twin", CASES[:3], ids=[c[0].__name__ for c in CASES[:3]])
def test_jvp_with_a_tangent_for_the_scalar_only_equals_jax(f, twin):
    """tl.jvp built at definition time (shapes unknown there): the lone tangent is broadcast
    when the code runs."""
    _, got = tl.jvp(lambda s: f(X, s), (S,), (np.float64(1.0),))
    _, want = jax.jvp(lambda s: twin(jnp.asarray(X), s), (jnp.asarray(S),), (jnp.asarray(1.0),))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)
