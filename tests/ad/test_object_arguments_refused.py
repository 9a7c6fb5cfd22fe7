"""Differentiating with respect to an argument that holds no arrays is refused, not zero.

Regression (session 16, a helper's programs): ``tl.grad(h)(Lin(W), x)`` with ``Lin`` a plain
class whose ``__call__`` reads ``self.W`` returned ``array(0.)`` (and value_and_grad too), where
the true derivative with respect to W is non-zero; JAX and autograd refuse the call. A string
leaf in a differentiated dict got a zero "gradient" the same way.
Control: the same object left out of argnums still works, and as a dataclass it is differentiated.
"""
import dataclasses

import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import GradientError

W = np.full((2, 2), 0.1)
X = np.ones(2)


class Lin:
    def __init__(self, w):
        self.w = w

    def __call__(self, x):
        return np.tanh(x @ self.w)


@dataclasses.dataclass
class DataLin:
    w: np.ndarray

    def __call__(self, x):
        return np.tanh(x @ self.w)


def total(model, x):
    return np.sum(model(x))


def test_a_plain_object_is_refused_by_name():
    with pytest.raises(GradientError, match="argument `model` .* is a Lin object: it has no gradient"):
        tl.grad(total)(Lin(W), X)
    with pytest.raises(GradientError, match="dataclass"):
        tl.value_and_grad(total)(Lin(W), X)
    with pytest.raises(GradientError, match="not an array or a number"):
        tl.grad(lambda p: np.sum(p["w"] ** 2))({"w": X, "name": "hi"})


def test_left_out_of_argnums_or_as_a_dataclass_it_works():
    gx = tl.grad(total, argnums=1)(Lin(W), X)
    np.testing.assert_allclose(gx, W @ (1 - np.tanh(X @ W) ** 2), rtol=1e-14)
    gw = tl.grad(total)(DataLin(W), X).w
    np.testing.assert_allclose(gw, np.outer(X, 1 - np.tanh(X @ W) ** 2), rtol=1e-14)
