"""Initializers with PyTorch's defaults, drawn from ``tlaloc.random``.

The distributions are PyTorch's; the numbers are not (the generator is
Threefry-2x32, as ``jax.random``), so the same key gives the same weights in
tlaloc every time and a model whose statistics match a PyTorch model built the
same way.

=======================  ==================================================
``Linear.weight``         kaiming_uniform(a=√5): U(-1/√fan_in, 1/√fan_in)
``Linear.bias``           U(-1/√fan_in, 1/√fan_in)
``Conv2d`` weight, bias   the same, fan_in = in_channels · kh · kw
``Embedding.weight``      N(0, 1)
norms                     weight 1, bias 0
=======================  ==================================================
"""
from __future__ import annotations

import math

import numpy as np

from .. import random as _random


def uniform(key, shape, bound: float, dtype=np.float32) -> np.ndarray:
    """U(-bound, bound) of ``shape``."""
    return _random.uniform(key, tuple(shape), np.dtype(dtype), -float(bound), float(bound))


def normal(key, shape, std: float = 1.0, dtype=np.float32) -> np.ndarray:
    """N(0, std²) of ``shape``."""
    z = _random.normal(key, tuple(shape), np.dtype(dtype))
    return z if std == 1.0 else (z * np.asarray(std, dtype)).astype(dtype)


def fan_in(shape) -> int:
    """PyTorch's fan-in of a weight ``(out, in, *kernel)``: in · prod(kernel)."""
    return int(shape[1]) * int(np.prod(shape[2:], dtype=np.int64)) if len(shape) > 1 else int(shape[0])


def kaiming_uniform(key, shape, a: float = math.sqrt(5.0), dtype=np.float32) -> np.ndarray:
    """PyTorch's ``kaiming_uniform_(w, a)`` (leaky-ReLU gain, fan_in mode):
    U(-b, b) with b = √(2 / (1 + a²)) · √(3 / fan_in); with a = √5, b = 1/√fan_in."""
    gain = math.sqrt(2.0 / (1.0 + a * a))
    bound = gain * math.sqrt(3.0 / fan_in(shape))
    return uniform(key, shape, bound, dtype)


def fan_in_uniform(key, shape, fan: int, dtype=np.float32) -> np.ndarray:
    """U(-1/√fan, 1/√fan): PyTorch's default bias init for Linear and Conv."""
    return uniform(key, shape, 1.0 / math.sqrt(fan) if fan > 0 else 0.0, dtype)
