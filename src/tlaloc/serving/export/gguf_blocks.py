"""A GGUF file's Q4_K blocks as the ``q4_k`` format stores them: exactly, never through float32 weights.

ggml's Q4_K (``ggml-common.h`` ``block_q4_K``, ``ggml-quants.c`` ``dequantize_row_q4_K``) holds
256 weights of a row in 144 bytes: float16 ``d`` and ``dmin``, 12 bytes of eight 6-bit scales
``sc`` and eight 6-bit minimums ``m`` (``get_scale_min_k4``), and 128 bytes of nibbles, where
bytes ``32 c .. 32 c + 31`` hold sub-block ``2 c`` in their low nibbles and ``2 c + 1`` in their
high ones. Sub-block ``s`` (32 weights) is ``w = (d * sc[s]) * q - (dmin * m[s])`` in float32.

Both products are exact in float32 (11 significant bits times 6), not in float16, so the
artifact keeps them as float32 scale ``d * sc`` and offset ``-(dmin * m)`` per 32 rows, beside
the nibbles repacked as Q4_1 packs a block of 32 (byte ``j`` holds rows ``j`` and ``j + 16``):
``nibble * scale + offset`` is ggml's value bit for bit (the product is exact, one rounding
in the addition either way).
"""
from __future__ import annotations

import numpy as np

from ...models.quantized import BLOCK

QK_K = 256                     # weights per superblock
BLOCK_BYTES = 144              # 2 + 2 + 12 + 128
#: Hugging Face layer matrix -> the decoder pytree's name
_LAYER = {"self_attn.q_proj.weight": "wq", "self_attn.k_proj.weight": "wk", "self_attn.v_proj.weight": "wv",
          "self_attn.o_proj.weight": "wo", "mlp.gate_proj.weight": "w_gate", "mlp.up_proj.weight": "w_up",
          "mlp.down_proj.weight": "w_down"}


def scale_min_k4(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``get_scale_min_k4`` for every sub-block: ``scales`` uint8 (..., 12) -> (sc, m) uint8 (..., 8)."""
    q = scales.astype(np.uint8)
    sc = np.concatenate([q[..., 0:4] & 63, (q[..., 8:12] & 15) | ((q[..., 0:4] >> 6) << 4)], axis=-1)
    m = np.concatenate([q[..., 4:8] & 63, (q[..., 8:12] >> 4) | ((q[..., 4:8] >> 6) << 4)], axis=-1)
    return sc, m


def unpack_q4_k(raw: np.ndarray, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q4_K rows -> (nibbles packed as Q4_1 uint8 (rows, n_in / 2), scale float32 (rows, n_in / 32),
    offset float32 (rows, n_in / 32)), every row (an output feature) as ggml stores it.

    ``raw``: the tensor's bytes, uint8 (rows, n_in / 256 * 144). ValueError when ``n_in`` is not
    a multiple of 256 or the bytes do not fit.
    """
    raw = np.asarray(raw, np.uint8)
    if n_in % QK_K or raw.size % (n_in // QK_K * BLOCK_BYTES):
        raise ValueError(f"unpack_q4_k: {raw.size} bytes are not rows of {n_in} Q4_K weights")
    blocks = raw.reshape(-1, n_in // QK_K, BLOCK_BYTES)                       # (rows, nsb, 144)
    rows, nsb = blocks.shape[:2]
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)     # (rows, nsb)
    dmin = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    sc, m = scale_min_k4(blocks[..., 4:16])                                      # (rows, nsb, 8)
    scale = d[..., None] * sc.astype(np.float32)                                 # exact in float32
    offset = -(dmin[..., None] * m.astype(np.float32))
    qs = blocks[..., 16:].reshape(rows, nsb, 4, 1, 32)                           # 4 runs of 32 bytes
    nib = np.concatenate([qs & 15, qs >> 4], axis=3).reshape(rows, nsb * 8, BLOCK)   # (rows, nb, 32)
    packed = nib[..., :BLOCK // 2] | (nib[..., BLOCK // 2:] << 4)               # (rows, nb, 16): Q4_1's packing
    return packed.reshape(rows, n_in // 2), scale.reshape(rows, -1), offset.reshape(rows, -1)


def q4_k_parts(path: str, cfg) -> dict:
    """The Q4_K layer matrices of GGUF file ``path`` (decoder config ``cfg``) as stored ``q4_k`` parts:
    ``{"layers.<i>.<name>": (packed uint8 (in / 2, out), scale float32 (in / 32, out), offset float32)}``,
    in the model's (in, out) orientation (llama's q and k output features un-permuted, as the
    loader does). Tables and the output head are left out (stored as ``q8_0``)."""
    import gguf

    from ...models.gguf_file import _unpermute, hf_name
    out = {}
    for t in gguf.GGUFReader(path).tensors:
        if t.tensor_type != gguf.GGMLQuantizationType.Q4_K:
            continue
        name = hf_name(t.name) or ""
        prefix, _, rest = name.partition(".layers.")
        layer, _, key = rest.partition(".")
        if prefix != "model" or key not in _LAYER:
            continue
        parts = unpack_q4_k(np.asarray(t.data), int(t.shape[0]))                # rows are output features
        if cfg.model_type == "llama" and _LAYER[key] in ("wq", "wk"):
            heads = cfg.num_heads if _LAYER[key] == "wq" else cfg.num_kv_heads
            parts = tuple(_unpermute(p, heads) for p in parts)
        out[f"layers.{layer}.{_LAYER[key]}"] = tuple(np.ascontiguousarray(p.T) for p in parts)   # (in.., out)
    return out


def fuse_exact(exact: dict, fused: dict) -> dict:
    """``exact`` with the parts of each fused matrix (``weights_format.fuse_projections``'s mapping)
    concatenated along the output axis, as the fused float matrix is, where the GGUF holds every
    part in Q4_K. A fused matrix with a part in another type (a Q4_K_M file keeps ``attn_v`` in
    Q6_K) is left out, parts and all: ``stored_tensors`` stores it as ``q8_0`` from its float
    values, 8 bits for what the file holds in 6 or 4, rather than requantizing it to 4 bits."""
    out = dict(exact)
    for target, spec in fused.items():
        names = [n for n, _, _ in spec["parts"]]
        if not any(n in exact for n in names):
            continue
        if all(n in exact for n in names):
            out[target] = tuple(np.ascontiguousarray(np.concatenate([exact[n][i] for n in names], axis=1))
                                for i in range(3))
        for n in names:
            out.pop(n, None)
    return out


__all__ = ["q4_k_parts", "unpack_q4_k", "scale_min_k4", "fuse_exact"]
