"""Activations and losses: plain functions of arrays, written with
``tlaloc.numpy`` so that ``tl.grad`` (AST front end), ``tl.capture`` (tracing)
and eager NumPy all run them. Every function keeps its input's float dtype.

Shapes use axis names: ``...`` any leading axes, ``C`` classes.
"""
from __future__ import annotations

import math

from .. import numpy as tnp
from ..errors import ArgumentError

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def relu(x):
    """max(x, 0), with derivative 0 at 0 (as PyTorch). Shape: same as x."""
    return tnp.where(tnp.greater(x, 0), x, 0.0)


def gelu(x, approximate: str = "tanh"):
    """GELU, tanh approximation (PyTorch's ``gelu(x, approximate='tanh')``):
    ``0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))``. Shape: same as x.

    ``approximate='none'`` (the exact erf form, PyTorch's default) is refused:
    tlaloc has no ``erf`` primitive yet.
    """
    if approximate != "tanh":
        raise ArgumentError("gelu: only approximate='tanh' is available (tlaloc has no `erf` primitive yet); "
                            "PyTorch's equivalent is torch.nn.functional.gelu(x, approximate='tanh')")
    inner = _SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))
    return 0.5 * x * (1.0 + tnp.tanh(inner))


def silu(x):
    """x · sigmoid(x) (also called swish). Shape: same as x."""
    return x * tnp.sigmoid(x)


def sigmoid(x):
    """1 / (1 + exp(-x)). Shape: same as x."""
    return tnp.sigmoid(x)


def tanh(x):
    """Hyperbolic tangent. Shape: same as x."""
    return tnp.tanh(x)


def softmax(x, axis: int = -1):
    """exp(x) / Σ exp(x) along ``axis`` (max-shifted). Shape: same as x."""
    return tnp.softmax(x, axis=axis)


def log_softmax(x, axis: int = -1):
    """x - logsumexp(x) along ``axis``. Shape: same as x."""
    return tnp.log_softmax(x, axis=axis)


def one_hot(labels, num_classes, dtype=tnp.float32):
    """``labels (...)`` integers → ``(..., num_classes)`` of 0/1 in ``dtype``."""
    hit = tnp.equal(tnp.expand_dims(labels, -1), tnp.arange(num_classes))
    return tnp.astype(tnp.where(hit, 1.0, 0.0), dtype)


def _reduce(loss, reduction: str, who: str):
    if reduction == "mean":
        return tnp.mean(loss)
    if reduction == "sum":
        return tnp.sum(loss)
    if reduction == "none":
        return loss
    raise ArgumentError(f"{who}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def cross_entropy(logits, labels, reduction: str = "mean"):
    """Softmax cross-entropy, PyTorch's ``F.cross_entropy`` for class indices.

    Args:
      logits: ``(..., C)`` floats.
      labels: ``(...)`` integers in ``[0, C)``.
      reduction: ``'mean'`` (default), ``'sum'`` or ``'none'`` (shape ``(...)``).
    Returns:
      a scalar (or ``(...)`` for ``'none'``) in the logits' dtype.
    """
    logp = tnp.log_softmax(logits, axis=-1)                                    # (..., C)
    num_classes = tnp.shape(logits)[-1]
    hit = tnp.equal(tnp.expand_dims(labels, -1), tnp.arange(num_classes))     # (..., C) bool
    nll = -tnp.sum(tnp.where(hit, logp, 0.0), axis=-1)                         # (...)
    return _reduce(nll, reduction, "cross_entropy")


def mse_loss(pred, target, reduction: str = "mean"):
    """Mean squared error, PyTorch's ``F.mse_loss``. ``pred``, ``target``: same shape."""
    d = pred - target
    return _reduce(d * d, reduction, "mse_loss")
