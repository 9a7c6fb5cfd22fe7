"""Gradient clipping, as PyTorch's ``clip_grad_norm_`` and ``clip_grad_value_``
but pure: a new gradient pytree comes back."""
from __future__ import annotations

import math

import numpy as np

from .. import _pytree
from .. import numpy as tnp
from ..errors import ArgumentError


def _threshold(value, name: str, who: str, example: str):
    """A Python/NumPy number must be finite and >= 0: a negative one would flip every gradient
    (``clip_by_global_norm``) or set every element to it (``clip_by_value``); a symbolic one passes."""
    if not isinstance(value, (int, float, str, bytes, np.number, np.bool_, type(None))):
        return value                                   # an array computed in compiled code
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not ok:
        raise ArgumentError(f"{who}: {name} must be a finite number >= 0, got {value!r} of type "
                            f"{type(value).__name__}; pass e.g. {example}")
    if not math.isfinite(float(value)) or value < 0:
        effect = "reverse every gradient" if who == "clip_by_global_norm" else "replace every element by it"
        raise ArgumentError(f"{who}: {name} must be a finite number >= 0, got {value!r} (a negative one would "
                            f"{effect}); pass e.g. {example}")
    return float(value)


def global_norm(tree):
    """The 2-norm of all leaves together: ``√Σ ‖leaf‖²`` (per-leaf norms first, as PyTorch);
    0.0 for a tree without leaves (as PyTorch's ``clip_grad_norm_`` of no parameters)."""
    norms = [tnp.sqrt(tnp.sum(g * g)) for g in _pytree.leaves(tree)]
    if not norms:
        return np.zeros((), np.float32)
    total = norms[0] * norms[0]
    for n in norms[1:]:
        total = total + n * n
    return tnp.sqrt(total)


def clip_by_global_norm(grads, max_norm: float):
    """Scale ``grads`` by ``min(1, max_norm / (norm + 1e-6))``.

    Returns:
      ``(clipped_grads, norm)``: the scaled pytree and the norm before
      clipping (PyTorch's ``clip_grad_norm_`` returns the same norm).
    """
    max_norm = _threshold(max_norm, "max_norm", "clip_by_global_norm", "clip_by_global_norm(grads, 1.0)")
    norm = global_norm(grads)
    coef = tnp.minimum(max_norm / (norm + 1e-6), 1.0)
    return _pytree.tree_map(lambda g: g * coef, grads), norm


def clip_by_value(grads, clip_value: float):
    """Clamp every gradient element to ``[-clip_value, clip_value]``."""
    v = _threshold(clip_value, "clip_value", "clip_by_value", "clip_by_value(grads, 0.5)")
    return _pytree.tree_map(lambda g: tnp.clip(g, -v, v), grads)
