"""More values a transformed function reads from outside, read at each call (session 16, round 2).

Regressions an adversarial helper found after the first round, each silently wrong before:
- a nested transform (``tl.grad(lambda q: ...)`` inside ``tl.grad``/``tl.jit``) kept a rebound
  global's old value: its guards did not reach the enclosing function;
- a number beside an array in a global dict (``{"k": 2.0, "w": np.ones(2)}``) was not re-read;
- an array bound by ``functools.partial`` and changed in place, and a function's ``__defaults__``
  or ``__kwdefaults__`` changed after the first call, were not seen;
- ``tl.vjp``'s pullback used the caller's array itself as a residual, so changing it afterwards
  changed the pullback's result (JAX's inputs are immutable);
- ``tl.jit(tl.vmap(f, in_axes=1))(X, w=W)`` batched the keyword along axis 1 (JAX: axis 0): now refused.

Oracle: the plain Python function after the same change (or JAX float64); control: each change
moves the expected value.
"""
import functools

import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import ArgumentError

X = np.array([1.0, 2.0])
K = 2.0
CFG = {"k": 2.0, "w": np.ones(2)}


def nested(p):
    return np.sum(tl.grad(lambda q: np.sum(q * q * K))(p))


def uses_config(x):
    return np.sum(x * CFG["k"] * CFG["w"])


def test_a_nested_transform_sees_a_rebound_global():
    global K
    j, g = tl.jit(nested), tl.grad(nested)
    assert float(j(X)) == 12.0
    K = 3.0
    try:
        assert float(j(X)) == 18.0
        np.testing.assert_array_equal(g(X), [6.0, 6.0])
    finally:
        K = 2.0


def test_a_number_beside_an_array_in_a_container():
    g, j = tl.grad(uses_config), tl.jit(uses_config)
    assert float(j(X)) == 6.0
    CFG["k"] = 3.0
    try:
        np.testing.assert_array_equal(g(X), [3.0, 3.0])
        assert float(j(X)) == 9.0
    finally:
        CFG["k"] = 2.0


def test_partial_arrays_and_changed_defaults():
    def f(x, w):
        return np.sum(w * x ** 2)

    w = np.ones(2)
    g, j = tl.grad(functools.partial(f, w=w)), tl.jit(functools.partial(f, w=w))
    assert float(j(X)) == 5.0
    w[0] = 10.0
    np.testing.assert_array_equal(g(X), [20.0, 4.0])
    assert float(j(X)) == 14.0

    def scaled(x, *, k=2.0):
        return np.sum(x * k)

    j = tl.jit(scaled)
    assert float(j(X)) == 6.0
    scaled.__kwdefaults__["k"] = 9.0
    assert float(j(X)) == 27.0

    def plain(x, k=2.0):
        return np.sum(x * k)

    g = tl.grad(plain)
    np.testing.assert_array_equal(g(X), [2.0, 2.0])
    plain.__defaults__ = (3.0,)
    np.testing.assert_array_equal(g(X), [3.0, 3.0])


def test_a_pullback_keeps_the_values_of_its_call():
    x, w = X.copy(), np.array([[1.0, 2.0], [3.0, 4.0]])
    _, pull = tl.vjp(lambda x, w: np.tanh(w @ x), x, w)
    before = pull(np.ones(2))
    w[0, 0], x[0] = 100.0, 50.0
    for a, b in zip(before, pull(np.ones(2))):
        np.testing.assert_array_equal(a, b)


def test_keywords_to_a_vmap_inside_jit_are_refused_not_misbatched():
    f = lambda x, w=1.0: np.sum(x * w)                           # noqa: E731
    xs, ws = np.arange(4.0).reshape(2, 2), np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(tl.vmap(f, in_axes=1)(xs, w=ws), [4.0, 15.0])     # JAX's values
    with pytest.raises(ArgumentError, match="vmap inside it would batch keyword arguments along axis 0"):
        tl.jit(tl.vmap(f, in_axes=1))(xs, w=ws)


class FreshConfig:
    def __init__(self, k):
        self.k = k


class WithProperty:
    def __init__(self):
        self.base = 2.0
        self.w = np.ones(2)

    @property
    def cfg(self):
        return FreshConfig(self.base)                 # a fresh object at every access

    def loss(self, x):
        return np.sum(self.w * x ** 2) * self.cfg.k


def test_a_property_making_fresh_objects_is_read_through_not_rebuilt(caplog):
    """Regression: the fresh object's identity guard failed at every call, so tl.grad rebuilt and
    tl.jit recompiled each time. Its attributes are now read through the property at each call."""
    import logging
    m = WithProperty()
    g, j = tl.grad(m.loss), tl.jit(m.loss)
    g(X), j(X)
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            np.testing.assert_array_equal(g(X), [4.0, 8.0])
            assert float(j(X)) == 10.0
    assert not [r for r in caplog.records if "again" in r.getMessage() or "compiled" in r.getMessage()]
    m.base = 5.0
    np.testing.assert_array_equal(g(X), [10.0, 20.0])                 # control: a change is seen
    assert float(j(X)) == 25.0
