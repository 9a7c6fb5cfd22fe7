"""Gradient clipping, as PyTorch's ``clip_grad_norm_`` and ``clip_grad_value_``
but pure: a new gradient pytree comes back."""
from __future__ import annotations

from .. import _pytree
from .. import numpy as tnp


def global_norm(tree):
    """The 2-norm of all leaves together: ``√Σ ‖leaf‖²`` (per-leaf norms first, as PyTorch)."""
    norms = [tnp.sqrt(tnp.sum(g * g)) for g in _pytree.leaves(tree)]
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
    norm = global_norm(grads)
    coef = tnp.minimum(max_norm / (norm + 1e-6), 1.0)
    return _pytree.tree_map(lambda g: g * coef, grads), norm


def clip_by_value(grads, clip_value: float):
    """Clamp every gradient element to ``[-clip_value, clip_value]``."""
    v = float(clip_value)
    return _pytree.tree_map(lambda g: tnp.clip(g, -v, v), grads)
