"""Python control flow on sizes, decided at the first call as plain Python decides it.

Regressions (session 16, a helper's programs): Horner's rule written recursively with the base
case ``if len(c) == 1`` was refused even at depth 2 ("recursive call ... deeper than 8 calls":
before the first call ``len(c)`` is not known, so both branches were followed forever), and
``while i < len(x): vals.append(...)`` was refused as a list append inside a loop on an array
value, though the same loop as a ``for`` works. Both are now built again once the sizes are
known. ``np.dot`` of a slice inside such a loop failed on an unknown rank the same way.

Oracle: JAX float64 (the same programs with jax.numpy); control: genuinely unbounded recursion
is still refused.
"""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import FenceError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

C = np.array([1.0, -2.0, 3.0, 0.5])
X = np.array([0.5, -1.0, 2.0])


def horner(c, x, xp=np):
    if len(c) == 1:
        return c[0] * xp.ones_like(x)
    return c[0] + x * horner(c[1:], x, xp)


def poly_sum(c, x, xp=np):
    return xp.sum(horner(c, x, xp) ** 2)


def squares(x, xp=np):
    vals = []
    i = 0
    while i < len(x):
        vals.append(xp.sin(x[i]) ** 2)
        i += 1
    return sum(vals)


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_recursion_on_a_size(wrap):
    want = jax.grad(lambda c, x: poly_sum(c, x, jnp), argnums=(0, 1))(C, X)
    got = wrap(tl.grad(poly_sum, argnums=(0, 1)))(C, X)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-13)


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_while_on_a_size_appending_to_a_list(wrap):
    np.testing.assert_allclose(np.asarray(wrap(tl.grad(squares))(X)),
                               np.asarray(jax.grad(lambda x: squares(x, jnp))(X)), rtol=1e-14)


def test_unbounded_recursion_is_still_refused():
    def down(x):
        return down(x * 0.5) + 1.0

    with pytest.raises(FenceError, match="recursive call to `down`"):
        tl.grad(lambda x: np.sum(down(x)))(X)
