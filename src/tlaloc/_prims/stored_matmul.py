"""``stored_matmul``: ``x @ W`` with the weight W as an artifact stores it, as one node.

=========  =====================================================  ==============================
format     parts                                                  W (K, N) float32
=========  =====================================================  ==============================
``f32``    w (K, N) float32                                       w
``bf16``   w (K, N) bfloat16                                      w
``i8ch``   q (K, N) int8, scale (N,) float32                      q * scale[None, :]
``q8_0``   q (K, N) int8, scale (K/32, N) float16,                q * scale[k // G]
           or (K/16, N) float32 (G = 16: Q6_K)
``q4_1``   q (K/2, N) uint8, scale, offset (K/G, N) float16       nibble * scale[k // G] + offset[k // G]
           or float32 (both alike), G = 32 or 64
``f32_t``  w (N, K) float32                                       w.T
``bf16_t`` w (N, K) bfloat16                                      w.T
``i8ch_t`` q (N, K) int8, scale (N,) float32                      (q * scale[:, None]).T
``q8_0_t`` q (N, K) int8, scale (N, K/32) float16                 (q * scale[:, k // 32]).T
=========  =====================================================  ==============================

The ``_t`` formats hold W transposed, row by row: an embedding table used as the output
head of a model with tied embeddings.

GGUF's Q8_0 and Q4_1 blocks (ggml ``block_q8_0`` / ``block_q4_1``) along the input axis:
in Q4_1 byte ``16 b + j`` of block ``b`` holds input row ``32 b + j`` in its low nibble and
``32 b + j + 16`` in its high nibble. ``x`` (..., K) float32 -> (..., N) float32.
The ``q4_1`` parts also hold the serving artifacts' ``int4`` (group G = 64: one scale and
offset per 64 input rows, the nibbles packed per 32 rows all the same) and ``q4_k`` (ggml's
Q4_K, whose sub-block scale ``d * sc`` and offset ``-dmin * m`` are exact in float32 and not
in float16: float32 sides). G is the input size over the scale's rows.
The ``q8_0`` parts with float32 scales of 16 rows each hold ggml's Q6_K exactly: ``q - 32``
as int8 and ``d * sc`` (exact in float32) per 16 input rows
(``tlaloc.serving.export.gguf_blocks.unpack_q6_k``).

The serving programs bind it only when they are traced for the CPU kernels
(:func:`kernel_calls`): it is then emitted as ``stablehlo.custom_call`` of the kernel
(``tlaloc._runtime.cpu_kernels``). The portable programs never contain it: they compute
the same product with primitives (``tlaloc.models.quantized``, ``tlaloc.models.lowp``).
Its NumPy implementation is the definition the kernels are tested against. Inference
only: the transforms refuse it by name.
"""
from __future__ import annotations

import contextlib
import threading

import ml_dtypes
import numpy as np

from .._core.primitive import Primitive
from ..errors import ShapeError

BLOCK = 32
#: format -> the names of its parts, in argument order
FORMATS = {"f32": ("w",), "bf16": ("w",), "i8ch": ("q", "scale"), "q8_0": ("q", "scale"),
           "q4_1": ("q", "scale", "offset"),
           "f32_t": ("w",), "bf16_t": ("w",), "i8ch_t": ("q", "scale"), "q8_0_t": ("q", "scale")}
_DTYPES = {"f32": (np.float32,), "bf16": (ml_dtypes.bfloat16,), "i8ch": (np.int8, np.float32),
           "q8_0": (np.int8, (np.float16, np.float32)), "q4_1": (np.uint8, (np.float16, np.float32), (np.float16, np.float32))}
_DTYPES.update({f + "_t": _DTYPES[f] for f in ("f32", "bf16", "i8ch")})
_DTYPES["q8_0_t"] = (np.int8, np.float16)
#: input rows per scale and offset that the ``q4_1`` parts may have (``group``)
GROUPS = (32, 64)
#: scale dtype -> input rows per scale of the ``q8_0`` parts
Q8_0_GROUPS = {np.dtype(np.float16): 32, np.dtype(np.float32): 16}
_local = threading.local()


@contextlib.contextmanager
def kernel_calls(formats=tuple(FORMATS)):
    """While active (this thread), products by weights of ``formats`` are traced as ``stored_matmul``
    (and ops named there, ``"paged_attention"``, for their CPU kernels)."""
    old = getattr(_local, "formats", frozenset())
    _local.formats = frozenset(formats)
    try:
        yield
    finally:
        _local.formats = old


def kernel_op_wanted(op: str) -> bool:
    """Whether op ``op`` (``"paged_attention"``) is traced for its CPU kernel now (:func:`kernel_calls`)."""
    return op in getattr(_local, "formats", frozenset())


#: the (K, N) kernels compute whole tiles of this many output columns
TILE = 64


def kernel_call_wanted(fmt: str, n_out, n_in=None) -> bool:
    """Whether a product by a weight of format ``fmt`` with ``n_out`` outputs (and ``n_in``
    inputs, for the ``_t`` formats) is traced as a ``stored_matmul`` node now: inside
    :func:`kernel_calls`, for sizes the kernels take (N a multiple of 64; for ``_t``, K of 32)."""
    if fmt not in getattr(_local, "formats", frozenset()) or type(n_out) is not int:
        return False
    if fmt.endswith("_t"):
        return type(n_in) is int and n_in % BLOCK == 0
    return n_out % TILE == 0


def dequantize(fmt: str, *parts) -> np.ndarray:
    """W (K, N) float32 from the stored ``parts`` of format ``fmt`` (NumPy)."""
    if fmt.endswith("_t"):
        if fmt == "i8ch_t":
            return (np.asarray(parts[0]).astype(np.float32) * np.asarray(parts[1], np.float32)[:, None]).T
        if fmt == "q8_0_t":
            q, scale = np.asarray(parts[0]), np.asarray(parts[1]).astype(np.float32)
            return dequantize("q8_0", q.T, scale.T)
        return dequantize(fmt[:-2], *parts).T
    if fmt in ("f32", "bf16"):
        return np.asarray(parts[0]).astype(np.float32)
    q = np.asarray(parts[0])
    scale = np.asarray(parts[1]).astype(np.float32)
    if fmt == "i8ch":
        return q.astype(np.float32) * scale[None, :]
    if fmt == "q8_0":
        K, N = q.shape
        G = K // scale.shape[0]
        return (q.astype(np.float32).reshape(K // G, G, N) * scale[:, None, :]).reshape(K, N)
    offset = np.asarray(parts[2]).astype(np.float32)
    half, N = q.shape
    nb, per = 2 * half // BLOCK, 2 * half // scale.shape[0] // BLOCK          # blocks; blocks per group
    packed = q.reshape(nb, BLOCK // 2, N)
    nibbles = np.concatenate([packed & 15, packed >> 4], axis=1).astype(np.float32)   # (nb, 32, N)
    s, m = np.repeat(scale, per, axis=0), np.repeat(offset, per, axis=0)              # (nb, N)
    return (nibbles * s[:, None, :] + m[:, None, :]).reshape(2 * half, N)


def _impl(x, *parts, format):
    x = np.asarray(x, np.float32)
    return np.matmul(x, dequantize(format, *parts)).astype(np.float32)


def _stored_k(fmt, parts) -> int | None:
    shape = parts[0].shape
    if shape is None:
        return None
    if fmt.endswith("_t"):
        return shape[1]
    return 2 * shape[0] if fmt == "q4_1" else shape[0]


def _stored_n(fmt, parts) -> int:
    return parts[0].shape[0] if fmt.endswith("_t") else parts[0].shape[1]


def _shape(x, *parts, format):
    if format not in FORMATS:
        raise ShapeError(f"stored_matmul: format must be one of {sorted(FORMATS)}, got {format!r}")
    if len(parts) != len(FORMATS[format]):
        raise ShapeError(f"stored_matmul: format {format!r} takes parts {FORMATS[format]}, got {len(parts)}")
    for part, name, dtype in zip(parts, FORMATS[format], _DTYPES[format]):
        allowed = [np.dtype(d) for d in (dtype if isinstance(dtype, tuple) else (dtype,))]
        if np.dtype(part.dtype) not in allowed:
            raise ShapeError(f"stored_matmul: {format} part {name} must be {' or '.join(d.name for d in allowed)}, "
                             f"got {np.dtype(part.dtype).name}")
    K = _stored_k(format, parts)
    if x.shape is None or parts[0].shape is None:
        return None
    if format == "q4_1":
        _check_q4_1(parts, K)
    if format == "q8_0":
        _check_q8_0(parts, K)
    if x.shape[-1] != K:
        raise ShapeError(f"stored_matmul: x's last axis ({x.shape[-1]}) must equal the weight's input "
                         f"size ({K}) for weight parts of shapes {[tuple(p.shape) for p in parts]}")
    return tuple(x.shape[:-1]) + (_stored_n(format, parts),)


def _check_q4_1(parts, K) -> None:
    q, scale, offset = parts
    if np.dtype(scale.dtype) != np.dtype(offset.dtype) or tuple(scale.shape) != tuple(offset.shape):
        raise ShapeError(f"stored_matmul: q4_1 scale and offset must have one dtype and shape, got "
                         f"{np.dtype(scale.dtype).name}{tuple(scale.shape)} and {np.dtype(offset.dtype).name}"
                         f"{tuple(offset.shape)}")
    fits = [g for g in GROUPS if tuple(scale.shape) == (K // g, q.shape[1]) and K % g == 0]
    if not fits:
        raise ShapeError(f"stored_matmul: q4_1 scale {tuple(scale.shape)} must be (K/32, N) or (K/64, N) for q "
                         f"{tuple(q.shape)} (K = {K}, N = {q.shape[1]})")


def _check_q8_0(parts, K) -> None:
    q, scale = parts
    G = Q8_0_GROUPS[np.dtype(scale.dtype)]
    if K % G or tuple(scale.shape) != (K // G, q.shape[1]):
        raise ShapeError(f"stored_matmul: q8_0 scale {np.dtype(scale.dtype).name}{tuple(scale.shape)} must be "
                         f"(K/32, N) float16 or (K/16, N) float32 for q {tuple(q.shape)} (K = {K}, N = {q.shape[1]})")


stored_matmul_p = Primitive("stored_matmul", impl=_impl, shape_rule=_shape,
                            dtype_rule=lambda x, *parts, format: np.dtype(np.float32),
                            hlo="stablehlo.custom_call", inference_only=True)


def stored_matmul(x, *parts, format: str):
    """``x`` (..., K) float32 @ W (K, N) -> (..., N) float32, W given by its stored ``parts`` (see the table).

    Raises ShapeError for an unknown format, a part of the wrong dtype or count, or an x whose
    last axis is not the weight's input size.
    """
    _shape(x, *parts, format=format)              # arrays and traced values alike: refused here by name
    return stored_matmul_p.bind(x, *parts, format=format)


__all__ = ["stored_matmul", "stored_matmul_p", "kernel_calls", "kernel_call_wanted", "kernel_op_wanted", "dequantize", "FORMATS", "GROUPS",
           "Q8_0_GROUPS"]
