"""A custom_vjp bwd rule returning a cotangent of the wrong shape or dtype is refused when the
derivative runs, naming the function, the argument and both types (regression: without shape
annotations it passed through and gave a silently wrong, broadcast gradient)."""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import ShapeError

from . import runtime_rules as R

W = np.array([1.0, 2.0, 3.0])
X = np.arange(6.0).reshape(2, 3)


def test_wrong_shape_is_refused_at_call_time():
    g = tl.grad(R.uses_scale)                       # shapes unknown here: no refusal yet
    with pytest.raises(ShapeError, match=r"bwd rule of `scale` returned, for argument 0, a cotangent of shape "
                                         r"\(2, 3\) and dtype float64, but the argument has shape \(3,\)"):
        g(W, X)


def test_wrong_shape_is_refused_when_compiled():
    with pytest.raises(ShapeError, match=r"bwd rule of `scale`.*argument 0.*\(2, 3\).*\(3,\)"):
        tl.jit(tl.grad(R.uses_scale))(W, X)


def test_wrong_dtype_is_refused_at_call_time():
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(ShapeError, match=r"bwd rule of `halve`.*argument 0.*dtype float64.*dtype float32"):
        tl.grad(R.uses_halve)(x)


def test_control_matching_cotangents_pass():
    """Negative control: the same rules with arguments they fit run and give the analytic gradient."""
    np.testing.assert_array_equal(tl.grad(R.uses_scale)(W, W), W)      # d/dw sum(w*x) = x
    np.testing.assert_array_equal(tl.grad(R.uses_halve)(np.arange(3.0)), np.full(3, 0.5))
    np.testing.assert_array_equal(tl.jit(tl.grad(R.uses_halve))(np.arange(3.0)), np.full(3, 0.5))
