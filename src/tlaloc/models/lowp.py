"""Products with int8 and bfloat16 weights that XLA CPU runs as low-precision dots, not as float32 ones.

XLA CPU converts an int8 or bfloat16 weight to float32 before a plain float32 dot, so
such weights used to make decode slower than float32 ones. With the operands kept narrow
(``dot_general(..., preferred_element_type=)``: int8 x int8 -> int32, bfloat16 x
bfloat16 -> float32), XLA CPU's oneDNN/YNNPACK kernels read the weight as stored (AMX or
AVX512-VNNI/BF16 where the host has them). Two facts of XLA CPU shape this module:

* its fast low-precision path is taken only for a real matrix-matrix product: a one-row
  product (batch-1 decode) is ~8x slower than with two rows (``benchmarks/quant_dot.py``);
* so the float32 activations are split into two narrow terms, stacked as rows: the
  batch-1 product has two rows, and the result keeps near-float32 accuracy.

``int8x2``: per row r, ``x ~ hi * s1 + lo * s2`` with ``s1 = max|x_r| / 127``,
``hi = round(x / s1)``, ``s2 = s1 / 254`` and ``lo = round((x - hi s1) / s2)`` (both int8;
the residual is at most s1 / 2, so ``|lo| <= 127``): a relative resolution of about
``1 / (127 * 254 * 2)`` of the row's largest element, against ``1 / 254`` for one term.

``bf16x2``: ``hi = bf16(x)``, ``lo = bf16(x - hi)``: 16 significant bits.

A :class:`LowpMatrix` stands in the weights pytree for an int8 (with a per-output-channel
float32 scale) or bfloat16 matrix; :func:`tlaloc.models.layers.linear` and the output head
multiply by it. Eagerly (NumPy operands) the same formulas run in NumPy.
"""
from __future__ import annotations

import numpy as np

from .. import numpy as tnp
from .._prims.stored_matmul import kernel_call_wanted, stored_matmul
from ..numpy import lax

#: trace int8 / bfloat16 products as low-precision dots (False: convert to float32, one dot)
ENABLED = True
I8_MAX = np.float32(127.0)


class LowpMatrix:
    """An int8 or bfloat16 weight multiplied without converting it to float32.

    w: int8 or bfloat16, (in, out) when ``axis`` = 0 or (out, in) when ``axis`` = 1 (an
    embedding table used as the output head); scale: float32 (out,) for int8
    (``w_float = w * scale`` per output channel), None for bfloat16.
    Raises ValueError for another dtype, or a scale of the wrong shape.
    """

    def __init__(self, w, scale=None, *, axis: int = 0):
        self.w, self.scale, self.axis = w, scale, int(axis)
        dt = np.dtype(w.dtype)
        n_out = w.shape[1 - self.axis]
        if dt == np.int8:
            if scale is None or tuple(scale.shape) != (n_out,):
                raise ValueError(f"LowpMatrix: an int8 weight {tuple(w.shape)} needs a float32 scale of shape "
                                 f"({n_out},), got {None if scale is None else tuple(scale.shape)}")
        elif dt != tnp.bfloat16:
            raise ValueError(f"LowpMatrix: weight dtype {dt.name}; expected int8 (with a scale) or bfloat16")
        self.kind = "int8" if dt == np.int8 else "bf16"

    @property
    def shape(self) -> tuple:
        """(in, out), whatever the stored layout."""
        n_in, n_out = self.w.shape[self.axis], self.w.shape[1 - self.axis]
        return (n_in, n_out)

    def dequantize(self):
        """The (in, out) float32 matrix."""
        w = tnp.astype(self.w, tnp.float32)
        if self.axis == 1:
            w = tnp.transpose(w, (1, 0))
        return w if self.scale is None else w * tnp.astype(self.scale, tnp.float32)[None, :]

    def rmatmul(self, x):
        """x (..., in) float32 @ w -> (..., out) float32; one ``stored_matmul`` (the CPU kernel,
        float32 x kept exact) when the program is traced for the kernels (a ``_t`` format for (out, in))."""
        fmt = ("i8ch" if self.kind == "int8" else "bf16") + ("_t" if self.axis == 1 else "")
        if kernel_call_wanted(fmt, self.shape[1], self.shape[0]):
            if self.kind == "int8":
                return stored_matmul(x, self.w, tnp.astype(self.scale, tnp.float32), format=fmt)
            return stored_matmul(x, self.w, format=fmt)
        if not ENABLED:
            return tnp.matmul(x, self.dequantize())
        lead, n_in = tuple(x.shape[:-1]), x.shape[-1]
        rows = int(np.prod(lead)) if lead else 1
        x2 = tnp.reshape(x, (rows, n_in))                                       # (R, in)
        if self.kind == "int8":
            y = int8x2_matmul(x2, self.w, self.axis) * tnp.astype(self.scale, tnp.float32)[None, :]
        else:
            y = bf16x2_matmul(x2, self.w, self.axis)                             # (R, out)
        return tnp.reshape(y, lead + (y.shape[-1],))                             # (..., out)


def split_int8x2(x):
    """x (R, in) float32 -> (terms int8 (2R, in): hi rows then lo rows, s1 (R, 1), s2 (R, 1)) float32."""
    amax = tnp.max(tnp.abs(x), axis=-1, keepdims=True)                          # (R, 1)
    s1 = tnp.where(amax > 0, amax / I8_MAX, np.float32(1.0))                    # (R, 1)
    hi = tnp.clip(tnp.round(x / s1), -I8_MAX, I8_MAX)                           # (R, in) integral
    s2 = s1 * np.float32(1.0 / 254.0)                                           # (R, 1)
    lo = tnp.clip(tnp.round((x - hi * s1) / s2), -I8_MAX, I8_MAX)               # (R, in) integral
    terms = tnp.concatenate([hi, lo], axis=0)                                   # (2R, in)
    return tnp.astype(terms, tnp.int8), s1, s2


def int8x2_matmul(x, w, axis: int = 0):
    """x (R, in) float32 against int8 w ((in, out) for axis 0, (out, in) for axis 1) -> (R, out)
    float32, without the weight's per-channel scale. One i8 x i8 -> i32 dot over 2R rows."""
    R = x.shape[0]
    terms, s1, s2 = split_int8x2(x)
    acc = lax.dot_general(terms, w, contracting=((1,), (axis,)), batch=((), ()),
                          preferred_element_type="int32")                       # (2R, out) int32
    acc = tnp.astype(acc, tnp.float32)
    return acc[:R] * s1 + acc[R:] * s2                                           # (R, out)


def bf16x2_matmul(x, w, axis: int = 0):
    """x (R, in) float32 against bfloat16 w ((in, out) for axis 0, (out, in) for axis 1) ->
    (R, out) float32. One bf16 x bf16 -> f32 dot over 2R rows (hi and lo terms of x)."""
    R = x.shape[0]
    hi = tnp.astype(x, tnp.bfloat16)                                            # (R, in)
    lo = tnp.astype(x - tnp.astype(hi, tnp.float32), tnp.bfloat16)              # (R, in)
    acc = lax.dot_general(tnp.concatenate([hi, lo], axis=0), w, contracting=((1,), (axis,)),
                          batch=((), ()), preferred_element_type="float32")     # (2R, out)
    return acc[:R] + acc[R:]                                                     # (R, out)


__all__ = ["LowpMatrix", "split_int8x2", "int8x2_matmul", "bf16x2_matmul", "ENABLED"]
