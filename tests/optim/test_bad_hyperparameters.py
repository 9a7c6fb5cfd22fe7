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
