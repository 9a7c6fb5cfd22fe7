"""Weight matrices kept as stored (int8 values and float scales) and multiplied without a float32 copy of the whole.

A :class:`QuantizedMatrix` stands in a weights pytree where a float (in, out) matrix
would be; :func:`tlaloc.models.layers.linear` multiplies by it. Two layouts:

``channel``  q (in, out) int8, scale (out,): ``w[i, o] = q[i, o] * scale[o]`` (the serving
             artifacts' ``int8`` format).
``block``    q (in, out) int8, scale (in / BLOCK, out): ``w[i, o] = q[i, o] * scale[i // BLOCK, o]``
             (GGUF's Q8_0: blocks of 32 consecutive input features share one scale; the
             scale may be float16, as GGUF stores it). With a float32 scale (in / 16, out),
             groups of 16: ``w[i, o] = q[i, o] * scale[i // 16, o]`` (ggml's Q6_K kept
             exactly, ``q - 32`` and ``d * sc``: ``serving.export.gguf_blocks.unpack_q6_k``).
``q4_1``     GGUF's Q4_1: q (in / 2, out) uint8 holds two 4-bit values per byte, as GGUF packs
             a block: byte ``j`` of block ``b`` (row ``16 b + j``) holds input feature
             ``32 b + j`` in its low nibble and ``32 b + j + 16`` in its high nibble; with
             scale and offset (in / BLOCK, out), ``w = nibble * scale + offset``. The same
             packing with scale and offset (in / 64, out) is the ``int4`` format's group 64
             (one scale and offset per 64 input rows: ``w = nibble * scale[i // 64] +
             offset[i // 64]``); scale and offset may be float16 or float32 (``q4_k``).

:meth:`QuantizedMatrix.rmatmul` computes ``x @ w`` by ``chunk`` input rows at a time: each
chunk of q is converted and scaled to float32 just before its own dot, and the partial
products are summed. XLA CPU has no int8 matrix-vector kernel and converts a whole int8
operand to float32 before a dot; chunk by chunk, only ``chunk x out`` float32 values exist
at once, small enough to stay in cache (``benchmarks/quant_dot.py`` measures the
formulations). The sum over chunks reassociates the dot's additions, so results differ
from one float32 dot in the last bits.
"""
from __future__ import annotations

import numpy as np

from .. import numpy as tnp
from .._prims.stored_matmul import GROUPS, Q8_0_GROUPS, kernel_call_wanted, stored_matmul

BLOCK = 32
#: input rows per partial dot (a multiple of BLOCK)
CHUNK = 64


class QuantizedMatrix:
    """An (in, out) matrix as int8 ``q`` with ``scale`` per output column or per (block, column).

    ``chunk``: input rows per partial dot (default: the module's CHUNK when the program is
    traced; 0: one dot over the whole converted matrix).
    """

    def __init__(self, q, scale, offset=None, *, chunk: int | None = None):
        self.q, self.scale, self.offset = q, scale, offset
        self.chunk = CHUNK if chunk is None else int(chunk)
        n_in, n_out = q.shape
        self.group = BLOCK
        if offset is not None:
            n_in *= 2
            groups = [g for g in GROUPS if n_in % g == 0 and tuple(scale.shape) == (n_in // g, n_out)]
            if not groups or tuple(offset.shape) != tuple(scale.shape):
                raise ValueError(f"QuantizedMatrix: q4_1 scale {tuple(scale.shape)} and offset "
                                 f"{tuple(offset.shape)} must both be ({n_in // BLOCK}, {n_out}) or "
                                 f"({n_in // 64}, {n_out}) (groups of 32 or 64 rows) for q {tuple(q.shape)}")
            self.layout, self.group = "q4_1", groups[0]
        elif tuple(scale.shape) == (n_out,):
            self.layout = "channel"
        elif tuple(scale.shape) == (n_in // BLOCK, n_out) and n_in % BLOCK == 0:
            self.layout = "block"
        elif (tuple(scale.shape) == (n_in // 16, n_out) and n_in % BLOCK == 0
              and np.dtype(scale.dtype) == np.dtype(np.float32)):
            self.layout, self.group = "block", 16                          # Q6_K: float32 d * sc per 16 rows
        else:
            raise ValueError(f"QuantizedMatrix: scale shape {tuple(scale.shape)} fits neither per-channel "
                             f"({n_out},) nor blocks of {BLOCK} ({n_in // BLOCK}, {n_out}) (nor float32 groups "
                             f"of 16, ({n_in // 16}, {n_out})) for q {tuple(q.shape)}")

    @property
    def shape(self) -> tuple:
        n_in, n_out = self.q.shape
        return (2 * n_in if self.layout == "q4_1" else n_in, n_out)

    def rows(self, start: int, stop: int):
        """Input rows [start, stop) as float32 (stop - start, out); block layouts need BLOCK-aligned bounds."""
        if self.layout == "q4_1":
            return self._q4_1_rows(start, stop)
        q = tnp.astype(self.q[start:stop], tnp.float32)                      # (n, out)
        s = tnp.astype(self.scale, tnp.float32)
        if self.layout == "channel":
            return q * s[None, :]                                           # (n, out)
        n, n_out, G = stop - start, self.q.shape[1], self.group
        sb = s[start // G:stop // G]                                        # (n / G, out)
        w = tnp.reshape(q, (n // G, G, n_out)) * sb[:, None, :]             # (n / G, G, out)
        return tnp.reshape(w, (n, n_out))                                   # (n, out)

    def _q4_1_rows(self, start: int, stop: int, scale_offset=None):
        n_out = self.q.shape[1]
        nb, b0 = (stop - start) // BLOCK, start // BLOCK
        packed = tnp.astype(self.q[start // 2:stop // 2], tnp.float32)        # (n / 2, out) bytes 0..255
        packed = tnp.reshape(packed, (nb, BLOCK // 2, n_out))                # (nb, 16, out)
        high = tnp.floor(packed * np.float32(1 / 16))                        # exact: 16 is a power of two
        low = packed - high * np.float32(16)
        nibbles = tnp.concatenate([low, high], axis=1)                       # (nb, 32, out)
        if scale_offset is None:
            s, m = self._q4_1_scale_offset(b0, b0 + nb)
        else:
            s, m = (a[b0:b0 + nb] for a in scale_offset)
        return tnp.reshape(nibbles * s + m, (stop - start, n_out))           # (n, out)

    def _q4_1_scale_offset(self, b0: int, b1: int):
        """Scale and offset of blocks [b0, b1) as float32 (b1 - b0, 1, out), one per block of BLOCK rows."""
        per = self.group // BLOCK                                           # blocks per scale
        g0, g1 = b0 // per, (b1 + per - 1) // per
        s, m = (tnp.astype(a[g0:g1], tnp.float32) for a in (self.scale, self.offset))   # (groups, out)
        if per > 1:                                                          # a scale per block: (nb, out)
            s, m = (tnp.repeat(a, per, axis=0)[b0 - g0 * per:b1 - g0 * per] for a in (s, m))
        return s[:, None, :], m[:, None, :]                                  # (nb, 1, out)

    def dequantize(self):
        """The whole matrix as float32 (in, out)."""
        return self.rows(0, self.shape[0])

    def kernel_format(self) -> str | None:
        """The ``stored_matmul`` format of this matrix's parts, or None when they have none."""
        if self.layout == "channel":
            return "i8ch" if np.dtype(self.q.dtype) == np.int8 and np.dtype(self.scale.dtype) == np.float32 else None
        if self.layout == "block":                                          # float16 per 32 rows, float32 per 16
            ok = np.dtype(self.q.dtype) == np.int8 and Q8_0_GROUPS.get(np.dtype(self.scale.dtype)) == self.group
            return "q8_0" if ok else None
        sides = {np.dtype(self.scale.dtype), np.dtype(self.offset.dtype)}
        ok = sides in ({np.dtype(np.float16)}, {np.dtype(np.float32)})
        return "q4_1" if ok and np.dtype(self.q.dtype) == np.uint8 else None

    def rmatmul(self, x):
        """x (..., in) @ w -> (..., out) float32, ``chunk`` input rows per partial dot (0: one dot);
        one ``stored_matmul`` (the CPU kernel) when the program is traced for the kernels."""
        fmt = self.kernel_format()
        if fmt is not None and kernel_call_wanted(fmt, self.shape[1]):
            parts = (self.q, self.scale) if self.offset is None else (self.q, self.scale, self.offset)
            return stored_matmul(x, *parts, format=fmt)
        n_in = self.shape[0]
        step = self.chunk if 0 < self.chunk < n_in else n_in
        if self.layout != "channel" and step % BLOCK:
            raise ValueError(f"QuantizedMatrix: chunk={self.chunk} must be a multiple of the block size {BLOCK}")
        # q4_1: the scales and offsets converted once for the matrix, not once a chunk (fewer ops to trace)
        whole = self._q4_1_scale_offset(0, n_in // BLOCK) if self.layout == "q4_1" and step < n_in else None
        out = None
        for a in range(0, n_in, step):
            b = min(a + step, n_in)
            w = self.rows(a, b) if whole is None else self._q4_1_rows(a, b, whole)
            part = tnp.matmul(x[..., a:b], w)                               # (..., out)
            out = part if out is None else out + part
        return out


class StoredProduct:
    """A weight kept in the parts of a ``stored_matmul`` format (``tlaloc._prims.stored_matmul``),
    multiplied by its CPU kernel: ``rmatmul(x)`` is ``x (..., K) @ W (K, N)`` float32. The serving
    programs use it for an output head traced for the kernels (a ``_t`` format for a tied
    embedding table)."""

    def __init__(self, fmt: str, *parts):
        self.format, self.parts = fmt, parts

    def rmatmul(self, x):
        return stored_matmul(x, *self.parts, format=self.format)


def block_quantize(w: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """GGUF Q8_0 of a float matrix, blocks of BLOCK along ``axis``: (q int8 like w, scale float16).

    Per block, ``d = max|w| / 127`` (kept in float16, as GGUF does) and ``q = round(w / d)``.
    The scale has ``axis`` shortened BLOCK-fold. Quantizing values that came from Q8_0 blocks
    gives those blocks back exactly (their largest element is ``±127 d``).
    """
    w = np.asarray(w, np.float32)
    if w.shape[axis] % BLOCK:
        raise ValueError(f"block_quantize: axis {axis} of shape {w.shape} is not a multiple of {BLOCK}")
    moved = np.moveaxis(w, axis, 0)                                         # (n, m)
    blocks = moved.reshape(moved.shape[0] // BLOCK, BLOCK, *moved.shape[1:])
    d = (np.max(np.abs(blocks), axis=1) / np.float32(127.0)).astype(np.float16)   # (n / BLOCK, m)
    d32 = d.astype(np.float32)
    safe = np.where(d32 == 0, np.float32(1.0), d32)
    q = np.clip(np.rint(blocks / safe[:, None]), -127, 127).astype(np.int8).reshape(moved.shape)
    return np.ascontiguousarray(np.moveaxis(q, 0, axis)), np.ascontiguousarray(np.moveaxis(d, 0, axis))


def block_quantize_q4_1(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GGUF Q4_1 of a float (in, out) matrix, blocks of BLOCK along ``in``: (packed uint8 (in/2, out),
    scale float16 (in/BLOCK, out), offset float16 (in/BLOCK, out)).

    Per block, as llama.cpp's ``quantize_row_q4_1_ref``: ``m = min w``, ``d = (max w - m) / 15``,
    ``nibble = min(15, floor((w - m) / d + 0.5))``; d and m kept in float16. Quantizing the
    values of Q4_1 blocks (each has a 0 and a 15 nibble) gives those blocks back.

    A block that holds the values of a GGUF Q4_0 block, ``(n - 8) * d`` with ``d`` float16
    and the largest magnitude at ``n = 0`` (llama.cpp's ``quantize_row_q4_0_ref``), is kept
    exactly instead: scale ``d``, offset ``-8 d``, the same nibbles (a Q4_0 GGUF served as
    ``q4_1`` loses nothing).
    """
    w = np.asarray(w, np.float32)
    n_in, n_out = w.shape
    if n_in % BLOCK:
        raise ValueError(f"block_quantize_q4_1: {n_in} input rows are not a multiple of {BLOCK}")
    blocks = w.reshape(n_in // BLOCK, BLOCK, n_out)                          # (nb, 32, out)
    lo, hi = blocks.min(axis=1), blocks.max(axis=1)                          # (nb, out)
    d = ((hi - lo) / np.float32(15)).astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), np.float32(0))
    nib = np.minimum(15, np.floor((blocks - lo[:, None]) * inv[:, None] + np.float32(0.5))).astype(np.uint8)
    d16, lo16 = d.astype(np.float16), lo.astype(np.float16)
    nib, d16, lo16 = _keep_q4_0_blocks(blocks, nib, d16, lo16)
    packed = nib[:, :BLOCK // 2] | (nib[:, BLOCK // 2:] << 4)                # (nb, 16, out)
    return np.ascontiguousarray(packed.reshape(n_in // 2, n_out)), d16, lo16


def block_quantize_int4(w: np.ndarray, group: int = BLOCK) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric 4-bit of a float (in, out) matrix, one scale and offset per ``group`` input rows:
    (packed uint8 (in/2, out), scale float16 (in/group, out), offset float16 (in/group, out)).

    ``group`` 32 is :func:`block_quantize_q4_1` (GGUF's Q4_1). ``group`` 64 applies the same
    rule (``m = min w``, ``d = (max w - m) / 15``, ``nibble = min(15, floor((w - m) / d + 0.5))``,
    d and m kept in float16) to 64 rows at a time, and packs the nibbles per 32 rows as Q4_1
    does. Raises ValueError for a group other than 32 or 64, or ``in`` not a multiple of it.
    """
    if group not in GROUPS:
        raise ValueError(f"block_quantize_int4: group={group!r}; use one of {GROUPS}")
    w = np.asarray(w, np.float32)
    n_in, n_out = w.shape
    if n_in % group:
        raise ValueError(f"block_quantize_int4: {n_in} input rows are not a multiple of group={group}")
    if group == BLOCK:
        return block_quantize_q4_1(w)
    groups = w.reshape(n_in // group, group, n_out)                          # (ng, group, out)
    lo, hi = groups.min(axis=1), groups.max(axis=1)                          # (ng, out)
    d = ((hi - lo) / np.float32(15)).astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), np.float32(0))
    nib = np.minimum(15, np.floor((groups - lo[:, None]) * inv[:, None] + np.float32(0.5))).astype(np.uint8)
    nib = nib.reshape(n_in // BLOCK, BLOCK, n_out)                           # (nb, 32, out)
    packed = nib[:, :BLOCK // 2] | (nib[:, BLOCK // 2:] << 4)                # (nb, 16, out)
    return np.ascontiguousarray(packed.reshape(n_in // 2, n_out)), d.astype(np.float16), lo.astype(np.float16)


def _keep_q4_0_blocks(blocks, nib, d16, lo16):
    """Where a (32, out) block is exactly a Q4_0 block's values and the Q4_1 rule does not give
    them back, use the Q4_0 form (scale d, offset -8 d, nibbles n)."""
    f32 = np.float32
    exact = (nib.astype(f32) * d16.astype(f32)[:, None] + lo16.astype(f32)[:, None]) == blocks
    amax_at = np.argmax(np.abs(blocks), axis=1)                              # (nb, out)
    extreme = np.take_along_axis(blocks, amax_at[:, None], axis=1)[:, 0]      # the Q4_0 n = 0 value
    d = (extreme / f32(-8)).astype(np.float16)                               # (nb, out)
    d32 = d.astype(f32)
    safe = np.where(d32 == 0, f32(1), d32)
    n = blocks / safe[:, None] + f32(8)                                       # (nb, 32, out)
    n_int = np.rint(n)
    q4_0 = ((n == n_int) & (n_int >= 0) & (n_int <= 15)).all(axis=1) & (d32 != 0) & np.isfinite(d32)
    q4_0 &= ((n_int - f32(8)) * d32[:, None] == blocks).all(axis=1)          # bit-exact values back
    q4_0 &= np.isfinite((d32 * f32(-8)).astype(np.float16))
    use = q4_0 & ~exact.all(axis=1)                                           # (nb, out)
    if not use.any():
        return nib, d16, lo16
    nib = np.where(use[:, None], n_int.astype(np.uint8), nib)
    return nib, np.where(use, d, d16), np.where(use, (d32 * f32(-8)).astype(np.float16), lo16)


__all__ = ["QuantizedMatrix", "StoredProduct", "block_quantize", "block_quantize_q4_1", "block_quantize_int4", "BLOCK", "CHUNK"]
