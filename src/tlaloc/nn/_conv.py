"""Conv2d, MaxPool2d, AvgPool2d and Flatten on NCHW arrays.

Convolution is im2col + einsum: for each kernel offset ``(i, j)`` a strided
slice of the (padded) input gives the input pixels that offset sees at every
output position; stacking the ``kh·kw`` slices gives the patches
``(N, C, kh·kw, H_out, W_out)``, and one einsum with the weight contracts
channels and offsets. Slices with static bounds (negative stops) mean the code
never needs the input's height or width, so it differentiates under both
``tl.grad`` and ``tl.capture`` with no convolution primitive.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from .. import numpy as tnp
from ..errors import ArgumentError
from . import init
from ._module import Module, as_key, known_shape, size_arg, split_key, static_field
from ..errors import ShapeError

_frozen = dataclasses.dataclass(frozen=True, eq=False, repr=False)


#: what each window argument means, and its least value
_WINDOW_ARGS = {"kernel_size": ("the window's height and width", 1), "stride": ("the step between windows", 1),
                "padding": ("zeros added on each side", 0), "dilation": ("the spacing of the window's taps", 1)}


def _pair(v, name, who) -> tuple:
    """``v`` (an int or an (h, w) pair of ints >= the least value of ``name``) as a pair."""
    meaning, least = _WINDOW_ARGS[name]
    example = f"{name}={max(least, 1)} or {name}=({max(least, 1)}, {max(least, 1)})"
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ArgumentError(f"{who}: {name} must be an int or an (h, w) pair ({meaning}), got {v!r}; "
                                f"pass e.g. {example}")
        return tuple(size_arg(a, f"{name}[{i}]", who, meaning, example, minimum=least) for i, a in enumerate(v))
    a = size_arg(v, name, who, meaning, example, minimum=least)
    return (a, a)


def _pool_padding(who, kernel, padding) -> None:
    """PyTorch's rule for pools (padding <= kernel_size // 2): a window of padding alone would
    give -inf (max) or a mean of zeros (avg)."""
    if any(p > k // 2 for k, p in zip(kernel, padding)):
        least = tuple(k // 2 for k in kernel)
        raise ArgumentError(f"{who}: padding must be at most half the kernel size, got padding={padding} for "
                            f"kernel_size={kernel}; a window of padding alone would give -inf or 0; lower the "
                            f"padding (here <= {least if least[0] != least[1] else least[0]})")


def _pad(x, padding, value):
    ph, pw = padding
    if ph == 0 and pw == 0:
        return x
    return tnp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def _windows(x, kernel, stride, dilation):
    """The kh·kw strided views of padded ``x (N, C, Hp, Wp)``, each ``(N, C, H_out, W_out)``,
    with ``H_out = (Hp - dh·(kh - 1) - 1) // sh + 1`` (and the same for W)."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    views = []
    for i in range(kh):
        stop_h = -(dh * (kh - 1 - i)) or None
        for j in range(kw):
            stop_w = -(dw * (kw - 1 - j)) or None
            views.append(x[:, :, i * dh:stop_h:sh, j * dw:stop_w:sw])
    return views


@_frozen
class Conv2d(Module):
    """2-D convolution (cross-correlation), PyTorch's ``nn.Conv2d`` with ``groups=1``.

    Args:
      in_channels, out_channels: C_in and C_out.
      kernel_size, stride, padding, dilation: ints or (h, w) pairs; zero padding.
      bias: whether to add a per-channel bias.
      dtype, key: parameter dtype and random key (or int seed).

    Fields: ``weight (C_out, C_in, kh, kw)``, ``bias (C_out,)`` or None;
    init as PyTorch (U(-1/√fan_in, 1/√fan_in), fan_in = C_in·kh·kw).

    Call: ``x (N, C_in, H, W) -> (N, C_out, H_out, W_out)`` with
    ``H_out = (H + 2·ph - dh·(kh - 1) - 1) // sh + 1``.
    """
    weight: Any
    bias: Optional[Any]
    in_channels: int = static_field()
    out_channels: int = static_field()
    kernel_size: tuple = static_field()
    stride: tuple = static_field()
    padding: tuple = static_field()
    dilation: tuple = static_field()

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 bias: bool = True, *, dtype=np.float32, key=None):
        meaning = "the number of {} channels (axis 1, NCHW)"
        in_channels = size_arg(in_channels, "in_channels", "Conv2d", meaning.format("input"), "Conv2d(3, 16, 3)")
        out_channels = size_arg(out_channels, "out_channels", "Conv2d", meaning.format("output"),
                                "Conv2d(3, 16, 3)")
        k = _pair(kernel_size, "kernel_size", "Conv2d")
        kw_, kb = split_key(as_key(key, "Conv2d"), 2)
        shape = (int(out_channels), int(in_channels)) + k
        w = init.kaiming_uniform(kw_, shape, dtype=dtype)
        b = init.fan_in_uniform(kb, (int(out_channels),), init.fan_in(shape), dtype=dtype) if bias else None
        self._set(weight=w, bias=b, in_channels=int(in_channels), out_channels=int(out_channels), kernel_size=k,
                  stride=_pair(stride, "stride", "Conv2d"), padding=_pair(padding, "padding", "Conv2d"),
                  dilation=_pair(dilation, "dilation", "Conv2d"))

    def __call__(self, x):
        kh, kw = self.kernel_size
        shape = known_shape(x)
        if shape is not None:
            want = f"(N, C_in={self.in_channels}, H, W) (channels first, as PyTorch)"
            if len(shape) != 4 or shape[1] != self.in_channels:
                raise ShapeError(f"Conv2d: the input must be {want}, got shape {shape}; add a batch axis "
                                 f"with x[None], or move channels first with x.transpose(0, 3, 1, 2)")
            for axis, size, k, s, p, d in zip("HW", shape[2:], self.kernel_size, self.stride, self.padding,
                                             self.dilation):
                if size + 2 * p < d * (k - 1) + 1:
                    raise ShapeError(f"Conv2d: input {axis}={size} (padded {size + 2 * p}) is smaller than the "
                                     f"dilated kernel ({d * (k - 1) + 1}); the output would be empty")
        views = _windows(_pad(x, self.padding, 0.0), self.kernel_size, self.stride, self.dilation)
        patches = tnp.stack(views, axis=2)                                   # (N, C_in, kh·kw, H_out, W_out)
        w = tnp.reshape(self.weight, (self.out_channels, self.in_channels, kh * kw))   # (C_out, C_in, kh·kw)
        y = tnp.einsum("nckhw,ock->nohw", patches, w)                        # (N, C_out, H_out, W_out)
        if self.bias is not None:
            y = y + tnp.reshape(self.bias, (self.out_channels, 1, 1))
        return y


@_frozen
class MaxPool2d(Module):
    """Max over each window, PyTorch's ``nn.MaxPool2d`` (``stride`` defaults to
    ``kernel_size``; padding with -inf). As PyTorch, the gradient goes to the
    first maximum of a window in row-major order (at a tie, to one element),
    and a NaN in a window is its maximum.

    Call: ``x (N, C, H, W) -> (N, C, H_out, W_out)``.
    """
    kernel_size: tuple = static_field()
    stride: tuple = static_field()
    padding: tuple = static_field()
    dilation: tuple = static_field()

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1):
        k = _pair(kernel_size, "kernel_size", "MaxPool2d")
        p, d = _pair(padding, "padding", "MaxPool2d"), _pair(dilation, "dilation", "MaxPool2d")
        _pool_padding("MaxPool2d", k, p)
        self._set(kernel_size=k, stride=k if stride is None else _pair(stride, "stride", "MaxPool2d"),
                  padding=p, dilation=d)

    def __call__(self, x):
        views = _windows(_pad(x, self.padding, -np.inf), self.kernel_size, self.stride, self.dilation)
        top = tnp.stop_gradient(tnp.max(tnp.stack(views, axis=2), axis=2))  # (N, C, H_out, W_out)
        out = views[-1]
        for v in views[-2::-1]:              # the earliest view equal to the max wins
            out = tnp.where(tnp.logical_or(tnp.equal(v, top), tnp.isnan(v)), v, out)
        return out                                                          # (N, C, H_out, W_out)


@_frozen
class AvgPool2d(Module):
    """Mean over each window, PyTorch's ``nn.AvgPool2d`` with ``count_include_pad=True``
    (zero padding counts in the mean). ``stride`` defaults to ``kernel_size``.

    Call: ``x (N, C, H, W) -> (N, C, H_out, W_out)``.
    """
    kernel_size: tuple = static_field()
    stride: tuple = static_field()
    padding: tuple = static_field()

    def __init__(self, kernel_size, stride=None, padding=0):
        k = _pair(kernel_size, "kernel_size", "AvgPool2d")
        p = _pair(padding, "padding", "AvgPool2d")
        _pool_padding("AvgPool2d", k, p)
        self._set(kernel_size=k, stride=k if stride is None else _pair(stride, "stride", "AvgPool2d"), padding=p)

    def __call__(self, x):
        views = _windows(_pad(x, self.padding, 0.0), self.kernel_size, self.stride, (1, 1))
        return tnp.mean(tnp.stack(views, axis=2), axis=2)                   # (N, C, H_out, W_out)


@_frozen
class Flatten(Module):
    """``x (N, d1, d2, ...) -> (N, d1·d2·...)``, PyTorch's ``nn.Flatten()``.

    The reshape needs the batch size as a Python int: eager NumPy and
    ``tl.capture`` know it; ``tl.grad``'s shape-generic lowering does not
    (end a CNN with a global pool, ``x.mean(axis=(2, 3))``, there).
    """

    def __init__(self):
        pass

    def __call__(self, x):
        n = tnp.shape(x)[0]
        return tnp.reshape(x, (n, -1))                                        # (N, features)
