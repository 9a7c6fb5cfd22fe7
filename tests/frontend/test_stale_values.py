"""What a transformed function reads from outside it is read at each call, as the Python code would.

Regressions (session 16, an adversarial helper), each silently wrong before:

- a closure variable rebound with ``nonlocal`` kept its value from the first build (the
  lowering copied the closure's values, and its getters read the copy);
- a global helper ``def`` rebound after the first call was still the old one;
- an object's attribute (``self.w`` of a bound method, ``cfg.k`` of a global namespace, ``o.w``
  of an object argument) kept its first value, whether rebound or written in place.

Oracle: the plain Python function, called after the same change; control: each change moves
the expected value, so a stale build cannot pass.
"""
import types

import numpy as np
import pytest

import tlaloc as tl

ONES = np.ones(2)


def _all(f):
    """f, tl.grad-free views of it: eager gradient, compiled value, compiled gradient."""
    return tl.grad(f), tl.jit(f), tl.jit(tl.grad(f))


def _check(f, transforms, x=ONES):
    g, j, jg = transforms
    want_value = f(x)
    eps = 1e-6
    want_grad = np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(len(x))])
    np.testing.assert_allclose(g(x), want_grad, rtol=1e-6)
    assert float(j(x)) == pytest.approx(float(want_value), rel=1e-12)
    np.testing.assert_allclose(jg(x), want_grad, rtol=1e-6)


def _make_closure():
    k = np.ones(2)
    s = 1.0

    def inner(x):
        return np.sum(k * x ** 2) * s

    def rebind(new_k, new_s):
        nonlocal k, s
        k, s = new_k, new_s

    return inner, rebind


def test_nonlocal_rebinding_is_read_at_the_call():
    inner, rebind = _make_closure()
    ts = _all(inner)
    _check(inner, ts)
    rebind(np.array([4.0, -1.0]), 3.0)
    _check(inner, ts)
    assert float(ts[1](ONES)) == 9.0                            # control: the change moved it


def test_late_binding_closures_see_the_last_value_as_python_does():
    grads = [tl.grad(lambda x: np.sum(x * k)) for k in (1.0, 2.0, 3.0)]
    assert [float(g(np.ones(1))[0]) for g in grads] == [3.0, 3.0, 3.0]


def helper(x):
    return x ** 2


def uses_helper(x):
    return np.sum(helper(x))


def test_a_rebound_global_function_is_seen():
    global helper
    saved = helper
    ts = _all(uses_helper)
    try:
        _check(uses_helper, ts, 2 * ONES)

        def helper(x):                  # noqa: F811 (rebinding it is the point)
            return x ** 3
        globals()["helper"] = helper
        _check(uses_helper, ts, 2 * ONES)
        assert float(ts[1](2 * ONES)) == 16.0
    finally:
        globals()["helper"] = saved


class Model:
    def __init__(self, w, scale=1.0):
        self.w, self.scale = w, scale

    def loss(self, x):
        return np.sum(self.w * x ** 2) * self.scale


def test_attributes_of_a_bound_method_object_are_read_at_the_call():
    m = Model(np.ones(2))
    ts = _all(m.loss)
    _check(m.loss, ts)
    m.w = np.array([100.0, 2.0])                               # rebound
    _check(m.loss, ts)
    m.w[:] = 50.0                                              # written in place
    _check(m.loss, ts)
    m.scale = 0.5                                              # a number
    _check(m.loss, ts)
    assert float(ts[1](ONES)) == 50.0


def test_attributes_of_a_global_namespace_and_of_an_object_argument():
    cfg = types.SimpleNamespace(k=np.ones(2), s=2.0)
    globals()["CFG"] = cfg

    def f(x):
        return np.sum(CFG.k * x) * CFG.s

    ts = _all(f)
    _check(f, ts)
    cfg.k = np.array([3.0, -1.0])
    cfg.s = 0.25
    _check(f, ts)

    def g(o, x):
        return np.sum(o.w * x ** 2)

    grad_x = tl.grad(g, argnums=1)
    m = Model(np.ones(2))
    np.testing.assert_allclose(grad_x(m, ONES), 2 * m.w)
    m.w = np.array([100.0, 7.0])
    np.testing.assert_allclose(grad_x(m, ONES), 2 * m.w)


TABLE = np.eye(2)


def with_default(x, a=TABLE):
    return np.sum((a @ x) ** 2)


def test_an_array_default_is_read_at_the_call():
    ts = _all(with_default)
    _check(with_default, ts)
    TABLE[:] = 3.0
    try:
        _check(with_default, ts)
        assert float(ts[1](ONES)) == 72.0
    finally:
        TABLE[:] = np.eye(2)


ACT = np.tanh


def uses_alias(x):
    return np.sum(ACT(x) * x)


class Settings:
    k = 2.0


def uses_class_attribute(x):
    return np.sum(Settings.k * x ** 2)


def test_a_rebound_numpy_alias_and_a_class_attribute_are_seen():
    global ACT
    ts = _all(uses_alias)
    _check(uses_alias, ts)
    ACT = np.sin
    try:
        _check(uses_alias, ts)
    finally:
        ACT = np.tanh
    ts = _all(uses_class_attribute)
    _check(uses_class_attribute, ts)
    Settings.k = 4.0
    try:
        _check(uses_class_attribute, ts)
        assert float(ts[1](ONES)) == 8.0
    finally:
        Settings.k = 2.0
