"""Learning-rate schedules: ``schedule(step) -> lr`` for the update that
follows ``step`` earlier updates (PyTorch: the lr after ``step`` calls of
``scheduler.step()``). Pass one as an optimizer's ``lr``.

Each is a closed form of the matching PyTorch scheduler; ``step`` may be a
Python int (a float comes back) or an integer array (inside ``tl.jit``).
"""
from __future__ import annotations

import dataclasses
import math

from .. import numpy as tnp
from ..errors import ArgumentError
from ._common import is_symbolic

_frozen = dataclasses.dataclass(frozen=True)


def _f(step):
    return tnp.astype(step, tnp.float64) if is_symbolic(step) else float(step)


def _floor_div(step, n):
    return tnp.floor_divide(step, n) if is_symbolic(step) else step // n


def _pow(base, e):
    return tnp.power(base, tnp.astype(e, tnp.float64)) if is_symbolic(e) else base ** e


def _min(a, b):
    return tnp.minimum(a, b) if is_symbolic(a) or is_symbolic(b) else min(a, b)


def _cos(x):
    return tnp.cos(x) if is_symbolic(x) else math.cos(x)


def _require_positive(schedule, name, value):
    if value <= 0:
        raise ArgumentError(f"{schedule}: {name} must be positive, got {value}")


@_frozen
class constant:
    """``lr`` at every step."""
    lr: float

    def __call__(self, step):
        return self.lr + 0.0 * _f(step) if is_symbolic(step) else self.lr


@_frozen
class step_decay:
    """PyTorch's ``StepLR``: ``lr · gamma ** (step // step_size)``."""
    lr: float
    step_size: int
    gamma: float = 0.1

    def __post_init__(self):
        _require_positive("step_decay", "step_size", self.step_size)

    def __call__(self, step):
        return self.lr * _pow(self.gamma, _floor_div(step, self.step_size))


@_frozen
class exponential_decay:
    """PyTorch's ``ExponentialLR``: ``lr · gamma ** step``."""
    lr: float
    gamma: float

    def __call__(self, step):
        return self.lr * _pow(self.gamma, step)


@_frozen
class cosine_decay:
    """PyTorch's ``CosineAnnealingLR`` (one half period): ``end_lr + (lr - end_lr) ·
    (1 + cos(π · min(step, decay_steps) / decay_steps)) / 2``."""
    lr: float
    decay_steps: int
    end_lr: float = 0.0

    def __post_init__(self):
        _require_positive("cosine_decay", "decay_steps", self.decay_steps)

    def __call__(self, step):
        frac = _min(_f(step), float(self.decay_steps)) / self.decay_steps
        return self.end_lr + (self.lr - self.end_lr) * (1.0 + _cos(math.pi * frac)) / 2.0


@_frozen
class cosine_with_warmup:
    """Linear warm-up, then cosine decay: PyTorch's ``SequentialLR`` of
    ``LinearLR(start_factor, 1.0, total_iters=warmup_steps)`` and
    ``CosineAnnealingLR(T_max=total_steps - warmup_steps, eta_min=end_lr)``
    with the milestone at ``warmup_steps``::

        step < warmup:  lr · (start_factor + (1 - start_factor) · step / warmup)
        after:          cosine_decay(lr, total - warmup, end_lr)(step - warmup)
    """
    lr: float
    warmup_steps: int
    total_steps: int
    start_factor: float = 0.0
    end_lr: float = 0.0

    def __post_init__(self):
        if not 0 <= self.warmup_steps < self.total_steps:
            raise ArgumentError(f"cosine_with_warmup: need 0 <= warmup_steps < total_steps, got "
                                f"{self.warmup_steps} and {self.total_steps}")

    def __call__(self, step):
        w = self.warmup_steps
        decay = cosine_decay(self.lr, self.total_steps - w, self.end_lr)
        if w == 0:
            return decay(step)
        warm = self.lr * (self.start_factor + (1.0 - self.start_factor) * _min(_f(step), float(w)) / w)
        if is_symbolic(step):
            after = decay(tnp.maximum(step - w, 0))
            return tnp.where(tnp.less(step, w), warm, after)
        return warm if step < w else decay(step - w)
