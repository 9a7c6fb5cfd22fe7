"""``tl.jit(tl.grad(f), static_argnums=...)``: an integer argument whose value the code needs
(a minibatch index in ``x[i*b:(i+1)*b]``) is bound per value, one program each (issue 14)."""
import numpy as np
import pytest

import tlaloc as tl

X = np.random.RandomState(0).randn(12, 3)
BATCH = 4


def minibatch_loss(w, i):
    xb = X[i * BATCH:(i + 1) * BATCH]
    return np.sum(np.tanh(xb @ w) ** 2)


def exact_grad(w, i):
    xb = X[i * BATCH:(i + 1) * BATCH]
    t = np.tanh(xb @ w)
    return xb.T @ (2 * t * (1 - t ** 2))


def test_each_static_index_gets_its_own_program():
    w = np.array([0.3, -0.2, 0.5])
    g = tl.jit(tl.grad(minibatch_loss), static_argnums=1)
    for i in (0, 2, 1, 2):
        np.testing.assert_allclose(g(w, i), exact_grad(w, i), rtol=1e-12)
    # negative control: the batches differ, so reusing one program for every i would fail above
    assert not np.allclose(exact_grad(w, 0), exact_grad(w, 2))


def test_value_and_grad_with_a_static_index():
    w = np.array([0.3, -0.2, 0.5])
    value, grad = tl.jit(tl.value_and_grad(minibatch_loss), static_argnums=(1,))(w, 1)
    np.testing.assert_allclose(value, minibatch_loss(w, 1), rtol=1e-12)
    np.testing.assert_allclose(grad, exact_grad(w, 1), rtol=1e-12)


def test_a_differentiated_argument_cannot_be_static():
    with pytest.raises(tl.ArgumentError, match="cannot also be static"):
        tl.jit(tl.grad(minibatch_loss, argnums=1), static_argnums=1)(np.ones(3), 1)
