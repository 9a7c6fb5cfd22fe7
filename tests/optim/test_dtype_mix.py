"""Float32 parameters with float64 gradients are refused by every optimizer, naming the leaf
(regression: they were silently promoted to float64)."""
from __future__ import annotations

import numpy as np
import pytest

from tlaloc import nn, optim
from tlaloc.errors import DTypeError

OPTIMIZERS = [("sgd", lambda: optim.SGD(lr=0.1)), ("sgd_momentum", lambda: optim.SGD(lr=0.1, momentum=0.9)),
              ("adam", lambda: optim.Adam(lr=1e-3)), ("adamw", lambda: optim.AdamW(lr=1e-3)),
              ("rmsprop", lambda: optim.RMSprop(lr=1e-3))]


@pytest.mark.parametrize("name,make", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_mixed_float_grads_are_refused(name, make):
    params = {"b": np.zeros(2, np.float32), "w": np.ones(3, np.float32)}
    grads = {"b": np.zeros(2, np.float32), "w": np.ones(3)}                  # w's grad is float64
    opt = make()
    with pytest.raises(DTypeError, match=r"parameter at \['w'\] is float32 but its gradient is float64.*astype"):
        opt.update(params, grads, opt.init(params))


@pytest.mark.parametrize("name,make", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_matching_dtypes_keep_the_params_dtype(name, make):
    """Control: the same update with float32 grads runs and stays float32."""
    params = {"b": np.zeros(2, np.float32), "w": np.ones(3, np.float32)}
    grads = {"b": np.ones(2, np.float32), "w": np.ones(3, np.float32)}
    opt = make()
    new, _ = opt.update(params, grads, opt.init(params))
    assert all(v.dtype == np.float32 for v in new.values())
    assert not np.array_equal(new["w"], params["w"])


def test_the_path_names_a_module_field():
    model = nn.Sequential(nn.Linear(3, 2, key=0), nn.Linear(2, 1, key=1))
    grads = nn.astype(model, np.float64)
    opt = optim.Adam(lr=1e-3)
    with pytest.raises(DTypeError, match=r"parameter at \.layers\[0\]\.weight is float32 but its gradient is float64"):
        opt.update(model, grads, opt.init(model))


@pytest.mark.parametrize("name,make", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_gradient_of_another_shape_is_refused(name, make):
    """Regression: a (4,) grad for a (3,) param crashed with NumPy's broadcast ValueError, and a (1,)
    grad was silently broadcast over the whole parameter."""
    from tlaloc.errors import ArgumentError
    params = {"b": np.zeros(2, np.float32), "w": np.ones(3, np.float32)}
    opt = make()
    for bad in (np.ones(4, np.float32), np.ones(1, np.float32)):
        with pytest.raises(ArgumentError, match=r"parameter at \['w'\] has shape \(3,\) but its gradient has shape"):
            opt.update(params, {"b": np.zeros(2, np.float32), "w": bad}, opt.init(params))
