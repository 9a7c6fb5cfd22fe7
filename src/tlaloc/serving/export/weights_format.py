"""How an artifact stores weights, and how a program turns its weight inputs back into the model's pytree.

Slot names flatten the model's weights pytree with dots: ``embed``, ``norm``,
``lm_head``, ``layers.<i>.<name>`` (decoders); ``word``, ``position``, ...,
``layers.<i>.<name>`` (the encoder). Formats:

``f32``   every tensor float32.
``bf16``  every tensor bfloat16; programs compute in float32 (matrices: bf16 x bf16 -> f32 dots).
``int8``  every matrix int8 with one float32 scale per output channel, stored as
          ``<name>.scale``: matrices are (in, out) so the scale is (out,); embedding tables
          (rows are tokens or positions, also the tied output head's channels) get one
          scale per row. ``q = round(w / s)``, ``s = max|w| / 127`` over the channel;
          programs compute ``q * s`` in float32. Vectors (norms, biases) stay float32.
``q8_0``  GGUF's Q8_0: every matrix int8 in blocks of 32 along its input features (the
          contraction axis: rows of an (in, out) matrix, columns of a table) with one
          float16 scale per block and output channel, ``<name>.scale`` of shape
          (in / 32, out), or (rows, D / 32) for tables (``models.quantized.block_quantize``;
          blocks read from a Q8_0 GGUF come back exactly). A matrix whose input axis is not
          a multiple of 32 is stored as ``int8``.
``q4_1``  GGUF's Q4_1 for the (in, out) matrices: two 4-bit values a byte, ``<name>`` uint8
          (in / 2, out), with ``<name>.scale`` and ``<name>.offset`` float16 (in / 32, out)
          (``models.quantized.block_quantize_q4_1``; a Q4_1 GGUF's blocks come back exactly,
          and so do a Q4_0 GGUF's values, stored with scale d and offset -8 d);
          the tables and an untied output head as ``q8_0``, as llama.cpp's Q4_1 files keep them.
``int4``  asymmetric 4-bit for the (in, out) matrices with one scale and minimum per ``group``
          input rows (the manifest's ``weights.group``, 32 or 64): ``<name>`` uint8 (in / 2, out)
          packed per 32 rows as Q4_1, ``<name>.scale`` and ``<name>.offset`` float16
          (in / group, out) (``models.quantized.block_quantize_int4``); group 32 is ``q4_1``'s
          layout exactly. A matrix whose input axis is not a multiple of the group is stored as
          ``q8_0`` (or ``int8``), the tables and an untied output head as ``q8_0``.
``q4_k``  a GGUF's layer matrices kept exactly (:mod:`tlaloc.serving.export.gguf_blocks`), each in
          the layout of its type in the file, which the loader infers from the parts:
          ggml's Q4_K (``ggml-common.h`` ``block_q4_K``, ``dequantize_row_q4_K``): each 32-row
          sub-block's ``d * sc`` and ``-dmin * m`` as float32 ``.scale`` and ``.offset``
          (in / 32, out) beside the Q4_1-packed nibbles (uint8 (in / 2, out));
          Q6_K (``block_q6_K``, which Q4_K_M files use for ``attn_v`` and some ``ffn_down``):
          ``q - 32`` int8 (in, out) with ``d * sc`` as a float32 ``.scale`` (in / 16, out), one
          per 16 input rows (the ``q8_0`` kernel's group 16); Q8_0: its int8 values and float16
          scales (in / 32, out), ``q8_0``. A layer's q/k/v (gate/up) are fused only when the
          file holds them in one of these layouts alike; otherwise that layer keeps them
          apart, each exact. A layer matrix of another type (float, other k-quants) is stored
          as ``q8_0`` from its values; tables and an untied head as ``q8_0``.

bf16 and per-channel int8 (in, out) matrices reach the model as
:class:`~tlaloc.models.lowp.LowpMatrix` (low-precision dots: i8 x i8 -> i32, bf16 x bf16 -> f32,
the weight never converted), the output head too (``programs.head_parts``); with
``lowp.ENABLED = False``, and for the block formats, quantized (in, out) matrices reach it
as :class:`~tlaloc.models.quantized.QuantizedMatrix` (multiplied a chunk of input rows at a
time, never converted to float32 whole). Tables, which are gathered by row, are
dequantized, and a head that is not a LowpMatrix is converted a slice of the vocabulary at
a time.
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np

from ... import numpy as tnp
from ...models import lowp
from ...models.quantized import BLOCK, QuantizedMatrix, block_quantize, block_quantize_int4

FORMATS = ("f32", "bf16", "int8", "q8_0", "q4_1", "int4", "q4_k")
#: the formats that store the (in, out) matrices in 4 bits (nibbles, scale and offset)
FOUR_BIT = ("q4_1", "int4", "q4_k")
#: input rows per scale that ``int4`` takes (``group``)
GROUPS = (32, 64)
#: per-tensor companions of a quantized matrix (role weight_scale in the manifest)
SIDE = (".scale", ".offset")
#: tables indexed by row (token, position or type ids): quantized per row
_TABLES = {"embed", "word", "position", "token_type"}


def flatten(weights: dict) -> dict[str, np.ndarray]:
    """``{"layers": ({"wq": a}, ...), "embed": b}`` -> ``{"layers.0.wq": a, "embed": b}`` (natural order)."""
    flat = {}

    def walk(prefix, node):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}{k}.", v)
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(f"{prefix}{i}.", v)
        else:
            flat[prefix[:-1]] = np.asarray(node)
    walk("", weights)
    return {k: flat[k] for k in sorted(flat, key=_natural)}


def _natural(key: str):
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", key) if t]


def unflatten(flat: dict):
    """The inverse of :func:`flatten` (numbered levels become tuples)."""
    root: dict = {}
    for name, value in flat.items():
        parts = name.split(".")
        node = root
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return _tuples(root)


def _tuples(node):
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node):
        return tuple(_tuples(node[str(i)]) for i in range(len(node)))
    return {k: _tuples(v) for k, v in node.items()}


#: fused matrix -> its parts, concatenated along the output axis (then the bias, fused alike)
FUSED = {"wqkv": ("wq", "wk", "wv"), "w_gate_up": ("w_gate", "w_up")}
_FUSED_BIAS = {"wqkv": ("bqkv", ("bq", "bk", "bv")), "w_gate_up": ("b_gate_up", ("b_gate", "b_up"))}


def fuse_projections(flat: dict, keep=()) -> tuple[dict, dict]:
    """Each decoder layer's q/k/v and gate/up matrices concatenated along their output axis.

    ``layers.<i>.wq`` (D, H*E), ``.wk``, ``.wv`` (D, K*E) become ``layers.<i>.wqkv``
    (D, (H+2K)*E); ``.w_gate``, ``.w_up`` (D, F) become ``.w_gate_up`` (D, 2F); their
    biases, if any, become ``bqkv`` / ``b_gate_up`` (a missing part's bias is zeros).
    Per-output-channel quantization gives every column the scale it had alone.

    Returns (the new flat dict, in natural order; the mapping written to the manifest
    as ``weights.fused``): ``{fused name: {"axis": -1, "parts": [[part name, start, stop], ...]}}``,
    the column range [start, stop) of the fused tensor that each original tensor fills.
    ``keep``: names of parts (``layers.<i>.wv``) whose q/k/v or gate/up is left unfused in that layer
    (``q4_k``: parts the GGUF holds in different types, :func:`~tlaloc.serving.export.gguf_blocks.unfused_groups`).
    """
    out, fused = dict(flat), {}
    layers = sorted({k.rsplit(".", 1)[0] for k in flat if k.startswith("layers.")}, key=_natural)
    for prefix in layers:
        for target, parts in FUSED.items():
            names = [f"{prefix}.{n}" for n in parts]
            if not all(n in out and out[n].ndim == 2 for n in names) or any(n in keep for n in names):
                continue
            mats = [out.pop(n) for n in names]
            out[f"{prefix}.{target}"] = np.concatenate(mats, axis=1)
            fused[f"{prefix}.{target}"] = {"axis": -1, "parts": _ranges(names, [m.shape[1] for m in mats])}
            bias, bias_parts = _FUSED_BIAS[target]
            bias_names = [f"{prefix}.{n}" for n in bias_parts]
            if any(n in out for n in bias_names):
                vecs = [out.pop(n) if n in out else np.zeros(m.shape[1], m.dtype) for n, m in zip(bias_names, mats)]
                out[f"{prefix}.{bias}"] = np.concatenate(vecs)
                fused[f"{prefix}.{bias}"] = {"axis": -1, "parts": _ranges(bias_names, [v.shape[0] for v in vecs])}
    return {k: out[k] for k in sorted(out, key=_natural)}, fused


def _ranges(names: list, sizes: list) -> list:
    starts = np.cumsum([0] + sizes)
    return [[n, int(a), int(b)] for n, a, b in zip(names, starts[:-1], starts[1:])]


def is_table(name: str) -> bool:
    return name.split(".")[-1] in _TABLES


def quantize_int8(name: str, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q int8, scale float32): per row for tables, per output column for (in, out) matrices."""
    w = np.asarray(w, np.float32)
    axis = 1 if is_table(name) else 0
    amax = np.max(np.abs(w), axis=axis)                                   # (channels,)
    scale = np.where(amax > 0, amax / np.float32(127.0), np.float32(1.0)).astype(np.float32)
    s = scale[:, None] if axis == 1 else scale[None, :]
    q = np.clip(np.rint(w / s), -127, 127).astype(np.int8)
    return q, scale


def stored_tensors(flat: dict, fmt: str, group: int = BLOCK, exact: dict | None = None) -> dict[str, np.ndarray]:
    """The tensors the artifact's safetensors file holds for ``fmt``.

    ``group``: input rows per scale of the ``int4`` matrices (32 or 64; the other formats use 32).
    ``exact``: ``{name: (values, scale[, offset])}`` stored as given (``<name>``, ``.scale``, ``.offset``)
    instead of quantizing ``flat[name]`` (``q4_k``: a GGUF's own Q4_K, Q6_K and Q8_0 blocks,
    :func:`~tlaloc.serving.export.gguf_blocks.exact_parts`).
    """
    out, exact = {}, exact or {}
    four_bit_group = group if fmt == "int4" else BLOCK
    for name, w in flat.items():
        if name in exact:
            out[name], *sides = exact[name]
            out.update({name + suffix: a for suffix, a in zip(SIDE, sides)})
            continue
        w = np.asarray(w, np.float32)
        blockable = w.ndim == 2 and w.shape[1 - channel_axis(name)] % BLOCK == 0
        # q4_k: only the file's own blocks (in ``exact``) are 4-bit or Q6_K's group 16; any other
        # layer matrix is stored as q8_0 below, not requantized to 4 bits
        four_bit = fmt in ("q4_1", "int4") and w.ndim == 2 and not is_table(name) and name != "lm_head"
        if four_bit and w.shape[0] % four_bit_group == 0:
            out[name], out[name + ".scale"], out[name + ".offset"] = block_quantize_int4(w, four_bit_group)
        elif fmt in ("q8_0",) + FOUR_BIT and blockable:
            out[name], out[name + ".scale"] = block_quantize(w, axis=1 - channel_axis(name))
        elif fmt in ("int8", "q8_0") + FOUR_BIT and w.ndim == 2:
            out[name], out[name + ".scale"] = quantize_int8(name, w)
        elif fmt == "bf16":
            out[name] = w.astype(ml_dtypes.bfloat16)
        else:
            out[name] = np.ascontiguousarray(w)
    return out


def head_copy(stored: dict, formats) -> dict:
    """``stored`` with an ``lm_head`` (D, V) copied from a tied embedding table (V, D) (float32,
    bfloat16, ``q8_0`` or per-row ``int8``), when the CPU kernels of ``formats`` take that format
    as an (in, out) matrix; else ``stored`` itself.

    The copy is exact (the table's values, or integers and scales, transposed: the blocks of a
    row of the table are the blocks of a column of the head), so every logit is unchanged. The
    output head then runs in the panel-order kernel of the layers' (in, out) matrices
    (``tlaloc/kernels/cpu/matmul.cc``): about 3x the speed of the row-by-row kernel of the
    table (``matmul_rows.cc``) on SmolLM2-135M's 49152 x 576 Q8_0 head, and float32 decode at
    batch 16 1.15x (docs/cpu_kernels.md), at the cost of storing the table twice (30 MB in
    Q8_0, 113 MB in float32 there). The embedding lookup still gathers rows of the table.
    """
    if "embed" not in stored or "lm_head" in stored:
        return stored
    q, scale = stored["embed"], stored.get("embed.scale")
    if scale is None:
        fmt = {np.dtype(np.float32): "f32", np.dtype(ml_dtypes.bfloat16): "bf16"}.get(np.dtype(q.dtype))
    else:
        fmt = "q8_0" if scale.ndim == 2 else "i8ch"
    if fmt not in formats or q.shape[0] % 64:
        return stored
    out = dict(stored)
    out["lm_head"] = np.ascontiguousarray(q.T)                                   # (D, V)
    if scale is not None:
        out["lm_head.scale"] = np.ascontiguousarray(scale.T) if fmt == "q8_0" else scale   # (D / 32, V) or (V,)
    return out


def dequantize(stored: dict) -> dict:
    """The weights pytree a program computes with, from its weight inputs (traced or eager).

    bf16 and per-channel int8 (in, out) matrices become :class:`~tlaloc.models.lowp.LowpMatrix`
    (while ``lowp.ENABLED``), other quantized ones :class:`QuantizedMatrix`; everything else float32.
    """
    flat = {name: _weight(name, v, stored.get(name + ".scale"), stored.get(name + ".offset"))
            for name, v in stored.items() if not name.endswith(SIDE)}
    return unflatten(flat)


def _weight(name: str, v, scale, offset=None):
    if lowp.ENABLED and not is_table(name) and len(v.shape) == 2 and offset is None:
        if scale is None and np.dtype(v.dtype) == tnp.bfloat16:
            return lowp.LowpMatrix(v)                                     # bf16 x bf16 -> f32 dots
        if scale is not None and len(scale.shape) == 1:
            return lowp.LowpMatrix(v, scale)                              # int8 x int8 -> i32 dots
    if scale is not None and not is_table(name):
        return QuantizedMatrix(v, scale, offset)
    return _float32(name, v, scale)


def _float32(name: str, v, scale):
    """One stored tensor as float32: ``q * s`` (int8 with its scale), a conversion, or ``v`` itself."""
    if scale is not None and scale.ndim == 2:                             # blocks along the input axis
        s = tnp.astype(scale, tnp.float32)
        if is_table(name):                                                # v (n, D), s (n, D / BLOCK)
            n, d = v.shape
            w = tnp.reshape(tnp.astype(v, tnp.float32), (n, d // BLOCK, BLOCK)) * s[:, :, None]
        else:                                                             # v (D, n), s (D / G, n)
            d, n = v.shape
            g = d // s.shape[0]                                           # 32, or 16 (q4_k's Q6_K)
            w = tnp.reshape(tnp.astype(v, tnp.float32), (d // g, g, n)) * s[:, None, :]
        return tnp.reshape(w, (n, d) if is_table(name) else (d, n))
    if scale is not None:
        s = scale[:, None] if is_table(name) else scale[None, :]
        return tnp.astype(v, tnp.float32) * s
    if np.dtype(v.dtype) != np.float32:
        return tnp.astype(v, tnp.float32)
    return v


def channel_axis(name: str) -> int:
    """The axis of a stored matrix that holds its output channels: rows for tables, else columns."""
    return 0 if is_table(name) else 1


def dequantize_channels(stored: dict, name: str, start: int, stop: int):
    """Output channels [start, stop) of matrix ``name`` as float32, sliced before converting.

    Each element is computed as in :func:`dequantize` (same conversion, same scale), so a
    dot over the slice gives the same values as the matching part of a dot over the whole.
    Returns (stop - start, in) for tables, (in, stop - start) otherwise.
    """
    v, scale = stored[name], stored.get(name + ".scale")
    if channel_axis(name) == 0:
        part = v[start:stop]                                              # (n, in)
        part_scale = None if scale is None else scale[start:stop]         # (n,) or (n, in / BLOCK)
    else:
        part = v[:, start:stop]                                           # (in, n)
        part_scale = None if scale is None else scale[..., start:stop]    # (n,) or (in / BLOCK, n)
    return _float32(name, part, part_scale)


__all__ = ["FORMATS", "FOUR_BIT", "GROUPS", "SIDE", "FUSED", "fuse_projections", "flatten", "unflatten", "quantize_int8", "stored_tensors", "head_copy", "dequantize", "dequantize_channels",
           "channel_axis", "is_table"]
