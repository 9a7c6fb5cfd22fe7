"""LayerNorm and RMSNorm over the trailing ``normalized_shape`` axes."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from .. import numpy as tnp
from ..errors import ArgumentError
from ._module import Module, check_input, size_arg, static_field

_frozen = dataclasses.dataclass(frozen=True, eq=False, repr=False)


def _shape(normalized_shape, who: str) -> tuple:
    """``normalized_shape`` (an int or a non-empty sequence of ints >= 1) as a tuple of ints."""
    meaning, example = "the sizes of the trailing axes to normalise", f"{who}(64) or {who}((8, 64))"
    if isinstance(normalized_shape, (int, np.integer)) or not hasattr(normalized_shape, "__len__") \
            or isinstance(normalized_shape, str):
        return (size_arg(normalized_shape, "normalized_shape", who, meaning, example),)
    shape = tuple(size_arg(s, f"normalized_shape[{i}]", who, meaning, example) for i, s in enumerate(normalized_shape))
    if not shape:
        raise ArgumentError(f"{who}: normalized_shape must name at least one axis ({meaning}), got "
                            f"{normalized_shape!r}; pass e.g. {example}")
    return shape


def eps_arg(eps, who: str) -> float:
    """``eps`` as a float; ArgumentError unless it is a finite number >= 0 (a negative one makes
    ``var + eps`` negative for a constant input: a NaN output, not an error)."""
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer, np.floating)) \
            or not np.isfinite(eps) or eps < 0:
        raise ArgumentError(f"{who}: eps must be a finite number >= 0 (added to the variance), got {eps!r}; "
                            f"pass e.g. eps=1e-5")
    return float(eps)


@_frozen
class LayerNorm(Module):
    """PyTorch's ``nn.LayerNorm``: ``(x - mean) / √(var + eps) · weight + bias``,
    mean and (biased) variance over the trailing ``normalized_shape`` axes.

    Fields: ``weight``, ``bias`` of shape ``normalized_shape`` (1 and 0), or None
    without ``elementwise_affine`` (``bias`` None also with ``bias=False``).
    Call: ``x (..., *normalized_shape) -> (..., *normalized_shape)``.
    """
    weight: Optional[Any]
    bias: Optional[Any]
    normalized_shape: tuple = static_field()
    eps: float = static_field()

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 *, dtype=np.float32):
        shape = _shape(normalized_shape, "LayerNorm")
        w = np.ones(shape, dtype) if elementwise_affine else None
        b = np.zeros(shape, dtype) if elementwise_affine and bias else None
        self._set(weight=w, bias=b, normalized_shape=shape, eps=eps_arg(eps, "LayerNorm"))

    def __call__(self, x):
        x = check_input(x, "LayerNorm", f"(..., *normalized_shape={self.normalized_shape})",
                        trailing=self.normalized_shape)
        axes = tuple(range(-len(self.normalized_shape), 0))
        mean = tnp.mean(x, axis=axes, keepdims=True)                 # (..., 1, ...)
        d = x - mean
        var = tnp.mean(d * d, axis=axes, keepdims=True)              # (..., 1, ...)
        y = d * tnp.rsqrt(var + self.eps)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y


@_frozen
class RMSNorm(Module):
    """PyTorch's ``nn.RMSNorm``: ``x / √(mean(x²) + eps) · weight`` over the
    trailing ``normalized_shape`` axes. ``eps=None`` means the machine epsilon
    of the parameter dtype (PyTorch uses the input's, the same when they agree).

    Fields: ``weight`` of shape ``normalized_shape`` (ones), or None.
    Call: ``x (..., *normalized_shape) -> (..., *normalized_shape)``.
    """
    weight: Optional[Any]
    normalized_shape: tuple = static_field()
    eps: float = static_field()

    def __init__(self, normalized_shape, eps: Optional[float] = None, elementwise_affine: bool = True,
                 *, dtype=np.float32):
        shape = _shape(normalized_shape, "RMSNorm")
        eps = float(np.finfo(dtype).eps) if eps is None else eps_arg(eps, "RMSNorm")
        self._set(weight=np.ones(shape, dtype) if elementwise_affine else None, normalized_shape=shape, eps=eps)

    def __call__(self, x):
        x = check_input(x, "RMSNorm", f"(..., *normalized_shape={self.normalized_shape})",
                        trailing=self.normalized_shape)
        axes = tuple(range(-len(self.normalized_shape), 0))
        ms = tnp.mean(x * x, axis=axes, keepdims=True)               # (..., 1, ...)
        y = x * tnp.rsqrt(ms + self.eps)
        if self.weight is not None:
            y = y * self.weight
        return y
