"""Issue 14, part 2: code that reads shapes and Python values of its arguments.

The derivative is still built by source transformation, specialised at the
first call for the arguments' signature (shapes and dtypes, then the values
of integer arguments). Gradients are checked against autograd in float64.
"""
import logging

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import tlaloc as tl


def gp_nll(y, log_ls):
    n = len(y)
    K = np.exp(-0.5 * (y[:, None] - y[None, :]) ** 2 / np.exp(log_ls)) + 0.1 * np.eye(n)
    return 0.5 * y @ np.linalg.solve(K, y) + 0.5 * np.linalg.slogdet(K)[1]


def a_gp_nll(y, log_ls):
    K = anp.exp(-0.5 * (y[:, None] - y[None, :]) ** 2 / anp.exp(log_ls)) + 0.1 * anp.eye(len(y))
    return 0.5 * anp.dot(y, anp.linalg.solve(K, y)) + 0.5 * anp.linalg.slogdet(K)[1]


def shapes(x, v):
    n, d = x.shape
    z = np.zeros(x.shape) + np.full(x.shape, v) * x
    lead = x.shape[:1]
    r = z.reshape(lead + (d,)).reshape(n * d // 2, 2)
    return np.sum(r ** 2) / x.ndim + sum(x[i, 0] for i in range(len(x)))


def a_shapes(x, v):
    n, d = x.shape
    z = anp.zeros(x.shape) + v * x
    r = anp.reshape(z, (n * d // 2, 2))
    return anp.sum(r ** 2) / 2 + sum(x[i, 0] for i in range(n))


def minibatch(w, x, i):
    b = 2
    xb = x[i * b:(i + 1) * b]
    return np.sum(np.tanh(xb @ w))


def a_minibatch(w, x, i):
    return anp.sum(anp.tanh(anp.dot(x[i * 2:(i + 1) * 2], w)))


LAYERS = [np.eye(2), 2 * np.eye(2), 3 * np.eye(2)]


def list_by_int(w, k):
    return np.sum(LAYERS[k] @ w ** 2)


def test_gp_with_eye_of_len():
    y = np.array([0.3, -1.2, 0.8, 2.0])
    for args in ((y, 0.1), (y[:3], -0.4)):
        np.testing.assert_allclose(tl.grad(gp_nll, argnums=1)(*args), autograd.grad(a_gp_nll, 1)(*args),
                                   rtol=1e-10)
        np.testing.assert_allclose(tl.grad(gp_nll)(*args), autograd.grad(a_gp_nll)(*args), rtol=1e-10)


def test_shape_reads():
    x = np.arange(1.0, 7.0).reshape(3, 2) / 5
    np.testing.assert_allclose(tl.grad(shapes)(x, 1.5), autograd.grad(a_shapes)(x, 1.5), rtol=1e-12)
    x2 = np.arange(1.0, 9.0).reshape(2, 4) / 5                # a second signature: built again
    np.testing.assert_allclose(tl.grad(shapes)(x2, 0.5), autograd.grad(a_shapes)(x2, 0.5), rtol=1e-12)


def test_integer_argument_as_slice_bound_and_list_index():
    w = np.array([0.5, -0.3])
    x = np.arange(12.0).reshape(6, 2) / 10
    g = tl.grad(minibatch)
    for i in range(3):
        np.testing.assert_allclose(g(w, x, i), autograd.grad(a_minibatch)(w, x, i), rtol=1e-12)
    # negative control: two batches give different gradients
    assert not np.allclose(g(w, x, 0), g(w, x, 1))
    for k in range(3):
        np.testing.assert_array_equal(tl.grad(list_by_int)(w, k), 2 * (k + 1) * w)


def test_each_signature_is_logged_and_its_source_shown(caplog, monkeypatch):
    monkeypatch.setenv("TLALOC_LOG_COMPILES", "1")
    g = tl.grad(gp_nll, argnums=1)
    y = np.array([0.3, -1.2, 0.8])
    with caplog.at_level(logging.WARNING, logger="tlaloc"):
        g(y, 0.1)
    assert any("specialising to the arguments' shapes" in r.getMessage() for r in caplog.records)
    text = tl.source(g, y, 0.1)
    assert "def dgp_nll_dlog_ls(y, log_ls)" in text
    ns = {}
    exec(compile(text, "<generated>", "exec"), ns)
    out = ns["dgp_nll_dlog_ls"](y, np.asarray(0.1))
    assert out[0] == g(y, 0.1)                    # the shown module gives the same bits


def test_shapes_under_jit():
    y = np.array([0.3, -1.2, 0.8, 2.0])
    np.testing.assert_allclose(tl.jit(tl.grad(gp_nll, argnums=1))(y, 0.1), autograd.grad(a_gp_nll, 1)(y, 0.1),
                               rtol=1e-10)
    np.testing.assert_allclose(tl.jit(gp_nll)(y, 0.1), a_gp_nll(y, 0.1), rtol=1e-12)


def still_unsupported(x):
    n = x.shape[0]
    return np.sum(x.reshape(n, n + 7))


def test_a_shape_that_does_not_fit_is_refused_at_the_users_line():
    with pytest.raises(tl.TlalocError) as e:
        tl.grad(still_unsupported)(np.ones(4))
    assert f"{__file__}:{still_unsupported.__code__.co_firstlineno + 2}:" in str(e.value)


DATA = {"y": np.array([1.0, 2.0, 3.0])}


def make_nll():
    def nll(log_ls):
        y = DATA["y"]
        return np.sum(np.eye(len(y)) * np.exp(log_ls)) + np.sum(y * log_ls)
    return nll


def test_closure_and_global_arrays_whose_length_the_code_reads():
    g = tl.grad(make_nll())
    np.testing.assert_allclose(g(0.0), 3.0 + 6.0, rtol=1e-15)
    old = DATA["y"]
    DATA["y"] = np.array([1.0, 1.0])            # a new shape: built again, never the stale length
    try:
        np.testing.assert_allclose(g(0.0), 2.0 + 2.0, rtol=1e-15)
    finally:
        DATA["y"] = old
