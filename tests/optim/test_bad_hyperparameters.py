"""Hyperparameters that would train silently wrong (NaN, a negative lr ascending the loss, an
RMSprop alpha > 1) and states that do not belong to the params are refused by name."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tlaloc import optim
from tlaloc.errors import ArgumentError

NAN = float("nan")


@pytest.mark.parametrize("make, torch_make", [
    (lambda: optim.SGD(lr=-0.1), lambda p: torch.optim.SGD(p, lr=-0.1)),
    (lambda: optim.Adam(lr=-1.0), lambda p: torch.optim.Adam(p, lr=-1.0)),
    (lambda: optim.Adam(eps=NAN), lambda p: torch.optim.Adam(p, eps=NAN)),
    (lambda: optim.Adam(b1=NAN), lambda p: torch.optim.Adam(p, betas=(NAN, 0.999))),
    (lambda: optim.AdamW(weight_decay=NAN), lambda p: torch.optim.AdamW(p, weight_decay=NAN)),
    (lambda: optim.RMSprop(alpha=NAN), lambda p: torch.optim.RMSprop(p, alpha=NAN)),
])
def test_refused_like_torch(make, torch_make):
    with pytest.raises(ValueError):
        torch_make([torch.zeros(2, requires_grad=True)])
    with pytest.raises(ArgumentError, match="must be a finite real number"):
        make()


@pytest.mark.parametrize("make", [lambda: optim.SGD(lr=NAN), lambda: optim.SGD(momentum=NAN),   # torch accepts these
                                  lambda: optim.RMSprop(alpha=2.0), lambda: optim.Adam(eps=float("inf")),
                                  lambda: optim.SGD(lr="0.1"), lambda: optim.Adam(b1="a"),
                                  lambda: optim.SGD(momentum=0.9, dampening=2.0)])
def test_values_that_would_give_nan_or_garbage_are_refused(make):
    with pytest.raises(ArgumentError, match="must be a finite real number"):
        make()


def test_valid_edges_and_schedules_still_run():
    p, g = {"w": np.ones(2)}, {"w": np.ones(2)}
    for opt in (optim.SGD(lr=0.0), optim.Adam(b1=0.0, b2=0.0), optim.RMSprop(alpha=1.0),
                optim.AdamW(lr=optim.cosine_with_warmup(1e-2, 1, 4))):
        opt.update(p, g, opt.init(p))


def test_state_of_another_optimizer_or_shape_is_refused():
    p, g = {"w": np.ones((3, 4))}, {"w": np.ones((3, 4))}
    with pytest.raises(ArgumentError, match="AdamState made by Adam.init"):
        optim.Adam().update(p, g, optim.SGD().init(p))
    with pytest.raises(ArgumentError, match=r"state.mu at \['w'\] has shape \(1, 4\)"):
        optim.Adam().update(p, g, optim.Adam().init({"w": np.ones((1, 4))}))     # before: broadcast silently


def test_clip_thresholds_that_would_flip_or_replace_gradients_are_refused():
    g = {"a": np.array([3.0, 4.0])}
    with pytest.raises(ArgumentError, match=r"clip_by_global_norm: max_norm must be a finite number >= 0, got -1\.0 "
                                            r"\(a negative one would reverse every gradient\); pass e\.g\."):
        optim.clip_by_global_norm(g, -1.0)                  # before: grads * -0.2, pointing uphill
    with pytest.raises(ArgumentError, match=r"clip_by_value: clip_value must be a finite number >= 0, got -1\.0 "
                                            r"\(a negative one would replace every element by it\)"):
        optim.clip_by_value(g, -1.0)                        # before: every element -1
    with pytest.raises(ArgumentError, match=r"max_norm must be a finite number >= 0, got '1' of type str"):
        optim.clip_by_global_norm(g, "1")                   # before: a raw NumPy TypeError
    with pytest.raises(ArgumentError, match=r"clip_value must be .*got nan"):
        optim.clip_by_value(g, NAN)
    # no leaves: norm 0, as torch's clip_grad_norm_ of no parameters (before: IndexError)
    clipped, norm = optim.clip_by_global_norm({}, 1.0)
    assert clipped == {} and float(norm) == float(torch.nn.utils.clip_grad_norm_([], 1.0)) == 0.0
    # controls: 0 is a valid threshold, and a positive one clips as before
    np.testing.assert_array_equal(optim.clip_by_value(g, 0)["a"], [0.0, 0.0])
    np.testing.assert_allclose(optim.clip_by_global_norm(g, 1.0)[0]["a"], [0.6, 0.8], rtol=1e-6)


def test_sgd_nesterov_with_a_bad_momentum_is_refused_by_name():
    with pytest.raises(ArgumentError, match="SGD: momentum must be a finite real number .*got 'a'"):
        optim.SGD(momentum="a", nesterov=True)              # before: a raw TypeError from `'a' <= 0`
    with pytest.raises(ArgumentError, match=r"SGD: Nesterov momentum requires a momentum > 0 and zero dampening, "
                                            r"got momentum=0\.0, dampening=0\.0; pass e\.g\."):
        optim.SGD(nesterov=True)


def test_grads_or_state_of_another_structure_name_the_first_difference():
    from tlaloc import nn
    m = nn.MLP((3, 4, 2), key=0)
    with pytest.raises(ArgumentError, match=r"SGD\.update: grads must have the structure of params .*at "
                                            r"\.layers\[0\]: params has Linear\(in_features=3, out_features=4\), "
                                            r"grads has Linear\(in_features=3, out_features=5\)"):
        optim.SGD(lr=0.1).update(m, nn.MLP((3, 5, 2), key=0), optim.SGD().init(m))   # before: two equal texts
    with pytest.raises(ArgumentError, match=r"at \['a'\]: params has an array, grads has None"):
        optim.SGD(lr=0.1).update({"a": np.ones(2)}, {"a": None}, optim.SGD().init({"a": np.ones(2)}))
    with pytest.raises(ArgumentError, match=r"at <root>: params has keys \['a'\], grads has \['b'\]"):
        optim.SGD(lr=0.1).update({"a": np.ones(2)}, {"b": np.ones(2)}, optim.SGD().init({"a": np.ones(2)}))
    with pytest.raises(ArgumentError, match=r"state\.mu does not have the structure of params .*at \.layers\[0\]: "
                                            r"params has Linear\(in_features=3, out_features=4\), mu has"):
        optim.Adam().update(m, m, optim.Adam().init(nn.MLP((3, 5, 2), key=0)))
