"""Activations and losses: plain functions of arrays, written with
``tlaloc.numpy`` so that ``tl.grad`` (AST front end), ``tl.capture`` (tracing)
and eager NumPy all run them. Every function keeps its input's float dtype.

Shapes use axis names: ``...`` any leading axes, ``C`` classes.
"""
from __future__ import annotations

import math

import numpy as np

from .. import numpy as tnp
from .._prims import checks as _checks
from ..errors import ArgumentError

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SQRT_HALF = math.sqrt(0.5)


def relu(x):
    """max(x, 0), with derivative 0 at 0 (as PyTorch). Shape: same as x."""
    return tnp.where(tnp.greater(x, 0), x, 0.0)


def gelu(x, approximate: str = "none"):
    """GELU, PyTorch's ``F.gelu`` (same default). Shape and dtype: same as x.

    Args:
      x: floats, any shape.
      approximate: ``'none'`` (default): the exact ``0.5 x (1 + erf(x / √2))``
        (HF ``hidden_act="gelu"``); ``'tanh'``: ``0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))``
        (HF ``"gelu_new"``/``"gelu_pytorch_tanh"``). ``False``/``True`` are read as
        ``'none'``/``'tanh'``, as ``jax.nn.gelu(approximate=...)``.
    Raises:
      ArgumentError: any other ``approximate``.
    """
    if approximate is False or approximate == "none":
        return 0.5 * x * (1.0 + tnp.erf(x * _SQRT_HALF))
    if approximate is True or approximate == "tanh":
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))
        return 0.5 * x * (1.0 + tnp.tanh(inner))
    raise ArgumentError(f"gelu: approximate must be 'none' (exact, erf) or 'tanh', got {approximate!r}")


def gelu_tanh(x):
    """``gelu(x, approximate='tanh')`` as a one-argument function (for ``nn.MLP(activation=...)``,
    GPT-2's MLP, HF ``"gelu_new"``). Shape and dtype: same as x."""
    return gelu(x, approximate="tanh")


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
    """``labels (...)`` integers in ``[0, num_classes)`` → ``(..., num_classes)`` of 0/1 in ``dtype``.

    Raises:
      ArgumentError: ``num_classes`` not a positive int; a label outside ``[0, num_classes)`` or
        not an integer (eagerly and in ``tl.grad`` code run on arrays; float labels also under
        ``tl.jit``). Compiled code cannot raise: there such a label gives a row of NaN (float
        ``dtype``), never a row of zeros that looks like a valid target.
    """
    concrete = isinstance(num_classes, (int, float, str, np.number, np.bool_, type(None)))   # else a symbolic size
    if concrete and (isinstance(num_classes, (bool, np.bool_)) or not isinstance(num_classes, (int, np.integer))
                     or num_classes < 1):
        raise ArgumentError(f"one_hot: num_classes must be a positive int (the length of each one-hot row), got "
                            f"{num_classes!r}; pass e.g. one_hot(labels, 10)")
    if _is_concrete(labels):
        msg = _checks.bad_label_message(labels, num_classes, None, "one_hot")
        if msg is not None:
            raise ArgumentError(msg)
        return tnp.astype(tnp.where(tnp.equal(tnp.expand_dims(labels, -1), tnp.arange(num_classes)), 1.0, 0.0),
                          dtype)
    labels = _checks.check_labels(labels, num_classes, None, who="one_hot")
    hit = tnp.equal(tnp.expand_dims(labels, -1), tnp.arange(num_classes))           # (..., C)
    out = tnp.where(hit, 1.0, 0.0)
    if np.dtype(dtype).kind == "f":                  # compiled code: an out-of-range label is a NaN row
        ok = tnp.logical_and(tnp.greater_equal(labels, 0), tnp.less(labels, num_classes))
        out = tnp.where(tnp.expand_dims(ok, -1), out, tnp.nan)
    return tnp.astype(out, dtype)


def _reduce(loss, reduction: str, who: str):
    if reduction == "mean":
        return tnp.mean(loss)
    if reduction == "sum":
        return tnp.sum(loss)
    if reduction == "none":
        return loss
    raise ArgumentError(f"{who}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def cross_entropy(logits, labels, reduction: str = "mean", *, ignore_index: int = -100,
                  label_smoothing: float = 0.0):
    """Softmax cross-entropy, PyTorch's ``F.cross_entropy`` for class indices.

    Args:
      logits: ``(..., C)`` floats.
      labels: ``(...)`` integers in ``[0, C)``, or ``ignore_index``.
      reduction: ``'mean'`` (default: the mean over the labels that are not ``ignore_index``;
        NaN if all are ignored, as PyTorch), ``'sum'`` or ``'none'`` (shape ``(...)``, 0 where ignored).
      ignore_index: a label value that contributes nothing (default -100, as PyTorch).
      label_smoothing: ``ε`` in ``[0, 1]``: the target is ``(1 - ε)·onehot + ε/C``.
    Returns:
      a scalar (or ``(...)`` for ``'none'``) in the logits' dtype.
    Raises:
      ArgumentError: a label outside ``[0, C)`` that is not ``ignore_index`` (eagerly, and in
        ``tl.grad``/``tl.vjp`` code run on arrays); a bad ``reduction`` or ``label_smoothing``.
        Compiled code (``tl.jit``) cannot raise: there such a label gives a NaN loss.
    """
    try:
        smoothing_ok = not isinstance(label_smoothing, (bool, str)) and 0.0 <= float(label_smoothing) <= 1.0
    except (TypeError, ValueError):
        smoothing_ok = False
    if not smoothing_ok:
        raise ArgumentError(f"cross_entropy: label_smoothing must be in [0, 1] (a float), got {label_smoothing!r}")
    if reduction not in ("mean", "sum", "none"):
        raise ArgumentError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if not isinstance(ignore_index, (int, np.integer)) or isinstance(ignore_index, bool):
        raise ArgumentError(f"cross_entropy: ignore_index must be an int label value (default -100), got "
                            f"{ignore_index!r}")
    arrays = (np.ndarray, np.generic, list, tuple, int, float)
    shape = np.shape(logits) if isinstance(logits, arrays) else None        # eager arguments only
    label_shape = np.shape(labels) if isinstance(labels, arrays) else None
    if shape is not None and label_shape is not None and label_shape != shape[:-1]:
        raise ArgumentError(f"cross_entropy: labels must have the logits' shape without the class axis, "
                            f"{shape[:-1]} for logits of shape {shape}, got {label_shape}; one class index per "
                            f"row of logits")
    num_classes = tnp.shape(logits)[-1]
    if _is_concrete(labels) and type(num_classes) is int:
        msg = _checks.bad_label_message(labels, num_classes, ignore_index, "cross_entropy")
        if msg is not None:
            raise ArgumentError(msg)
    else:
        labels = _checks.check_labels(labels, num_classes, ignore_index)
    logp = tnp.log_softmax(logits, axis=-1)                                    # (..., C)
    kept = tnp.not_equal(labels, ignore_index)                                 # (...) bool
    in_range = tnp.logical_and(tnp.greater_equal(labels, 0), tnp.less(labels, num_classes))
    ok = tnp.logical_or(in_range, tnp.logical_not(kept))                       # (...) bool
    hit = tnp.equal(tnp.expand_dims(labels, -1), tnp.arange(num_classes))     # (..., C) bool
    nll = -tnp.sum(tnp.where(hit, logp, 0.0), axis=-1)                         # (...)
    if label_smoothing:
        smooth = -tnp.mean(logp, axis=-1)                                      # (...)
        nll = (1.0 - label_smoothing) * nll + label_smoothing * smooth         # (...)
    # a label neither in range nor ignored: its loss and its row's gradient are NaN (compiled
    # code cannot raise; never a silent number); derivative rules give the other rows exact 0s
    nll = nll + tnp.where(ok, 0.0, tnp.nan * tnp.sum(logp, axis=-1))           # (...)
    nll = tnp.where(kept, nll, 0.0)                                            # (...)
    if reduction == "mean":
        count = tnp.sum(tnp.where(kept, 1.0, nll * 0.0))                       # in the logits' dtype
        return tnp.sum(nll) / count
    return _reduce(nll, reduction, "cross_entropy")


def _known_shape(x):
    from ._module import known_shape
    return known_shape(x)


def _is_concrete(x) -> bool:
    return isinstance(x, (np.ndarray, np.integer, int)) and not isinstance(x, bool)


def mse_loss(pred, target, reduction: str = "mean"):
    """Mean squared error, PyTorch's ``F.mse_loss``. ``pred``, ``target``: same shape (never broadcast)."""
    ps, ts = _known_shape(pred), _known_shape(target)
    if ps is not None and ts is not None:
        msg = _checks.same_shape_message(ps, ts, who="mse_loss", names=("pred", "target"))
        if msg is not None:
            raise ArgumentError(msg)
    else:           # a shape not known yet (tl.grad, tl.jit): refused when it is (at tl.jit's specialisation)
        pred = _checks.check_same_shape(pred, target, "mse_loss", ("pred", "target"))
    d = pred - target
    return _reduce(d * d, reduction, "mse_loss")
