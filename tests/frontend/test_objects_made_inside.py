"""Objects of the user's own classes made inside a differentiated function.

Regression (session 16, a helper's programs): ``Lin(W)(x)``, a dataclass ``Params(W, b)`` or a
namedtuple made from the function's arrays was refused as "cannot differentiate through `Lin`
(from __main__): it is not Python source tlaloc can read", though it is. Now a dataclass or
namedtuple is made by its own constructor, and any other class by its ``__init__`` lowered
inline; methods and ``__call__`` are inlined as for objects passed in.

Oracle: JAX float64 on the same program with jax.numpy (its classes hold traced arrays the same
way); control: a parameter stored on the object reaches the gradient (it differs with it).
"""
import collections
import dataclasses

import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import FenceError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

W = np.array([[0.1, -0.4], [0.3, 0.2]])
X = np.array([1.0, -2.0])


class Dense:
    def __init__(self, w, scale=1.0):
        self.w = w
        self.scale = scale
        self.calls = 0
        self.calls += 1

    def __call__(self, x, tanh):
        return tanh(x @ self.w) * self.scale

    def penalty(self):
        return 0.5 * (self.w ** 2).sum() * self.calls


class Stack:
    def __init__(self, layers):
        self.layers = layers

    def __call__(self, x, tanh):
        for layer in self.layers:
            x = layer(x, tanh)
        return x


@dataclasses.dataclass
class Params:
    w: np.ndarray
    b: np.ndarray


Pair = collections.namedtuple("Pair", "w x")


def program(w, x, xp=np):
    net = Stack([Dense(w), Dense(w.T, scale=2.0)])
    p = Params(w, xp.zeros(2))
    pair = Pair(w, x)
    return xp.sum(net(x, xp.tanh)) + net.layers[0].penalty() + xp.sum(xp.tanh(x @ p.w + p.b)) + xp.sum(pair.w @ pair.x)


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_objects_made_from_the_functions_arrays(wrap):
    want = jax.grad(lambda w, x: program(w, x, jnp), argnums=(0, 1))(W, X)
    got = wrap(tl.grad(program, argnums=(0, 1)))(W, X)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-13)
    assert float(tl.jit(program)(W, X)) == pytest.approx(float(program(W, X)), rel=1e-13)


def test_an_attribute_set_under_an_array_condition_is_refused():
    class Gate:
        def __init__(self, x):
            if np.sum(x) > 0:
                self.y = x
            else:
                self.y = -x

    with pytest.raises(FenceError, match="inside an `if` or loop on an array value"):
        tl.grad(lambda x: np.sum(Gate(x).y))(X)
