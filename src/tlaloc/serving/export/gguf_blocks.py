"""A GGUF file's Q4_K, Q6_K and Q8_0 layer matrices as the ``q4_k`` format stores them: exactly,
never through float32 weights.

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

ggml's Q6_K (``block_q6_K``, ``dequantize_row_q6_K``) holds 256 weights in 210 bytes: 128 bytes
``ql`` (low 4 bits), 64 bytes ``qh`` (high 2 bits), 16 int8 ``scales`` (one per 16 weights) and
float16 ``d``; ``w = (d * scales[s]) * (q - 32)``, q in 0..63. ``d * sc`` (11 significant bits
times 8) and its product by ``q - 32`` (6 bits) are exact in float32, so the artifact keeps
``q - 32`` as int8 with a float32 scale ``d * sc`` per 16 rows (the ``q8_0`` kernel's group 16):
``q * scale`` is ggml's value bit for bit. A Q8_0 layer matrix (34 bytes a block: float16 ``d``,
32 int8) is kept as its own int8 values and float16 scales, ``q8_0`` as it is.
"""
from __future__ import annotations

import numpy as np

from ...models.quantized import BLOCK

QK_K = 256                     # weights per superblock
BLOCK_BYTES = 144              # 2 + 2 + 12 + 128
Q6_K_BYTES = 210               # 128 + 64 + 16 + 2
Q8_0_BYTES = 34                # 2 + 32
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


def unpack_q6_k(raw: np.ndarray, n_in: int) -> tuple[np.ndarray, np.ndarray]:
    """Q6_K rows -> (q int8 (rows, n_in) in -32..31, scale float32 (rows, n_in / 16)), each row (an
    output feature) as ggml stores it: weight ``i`` is ``q[i] * scale[i // 16]``, bit for bit.

    ``raw``: the tensor's bytes, uint8 (rows, n_in / 256 * 210). ValueError when ``n_in`` is not
    a multiple of 256 or the bytes do not fit.
    """
    raw = np.asarray(raw, np.uint8)
    if n_in % QK_K or raw.size % (n_in // QK_K * Q6_K_BYTES):
        raise ValueError(f"unpack_q6_k: {raw.size} bytes are not rows of {n_in} Q6_K weights")
    blocks = raw.reshape(-1, n_in // QK_K, Q6_K_BYTES)                         # (rows, nsb, 210)
    rows, nsb = blocks.shape[:2]
    # dequantize_row_q6_K: in half h (128 weights) of a superblock, for l < 32, weights
    # 32 k + l (k = 0..3) take the low nibble of ql[64 h + l], of ql[64 h + 32 + l], the high
    # nibble of ql[64 h + l], of ql[64 h + 32 + l], and bits 2 k, 2 k + 1 of qh[32 h + l] above them
    ql = blocks[..., :128].reshape(rows, nsb, 2, 1, 2, 32)                     # (.., h, nibble, half, l)
    low = np.concatenate([ql & 15, ql >> 4], axis=3).reshape(rows, nsb, 2, 4, 32)   # k = 2 nibble + half
    qh = blocks[..., 128:192].reshape(rows, nsb, 2, 1, 32)
    high = (qh >> np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)) & 3           # (rows, nsb, 2, 4, 32)
    q = (low | (high << 4)).astype(np.int8) - np.int8(32)                        # -32 .. 31
    sc = blocks[..., 192:208].copy().view(np.int8).astype(np.float32)           # (rows, nsb, 16)
    d = blocks[..., 208:210].copy().view(np.float16).astype(np.float32)         # (rows, nsb, 1)
    scale = d * sc                                                               # exact in float32
    return q.reshape(rows, n_in), scale.reshape(rows, n_in // 16)


def unpack_q8_0(raw: np.ndarray, n_in: int) -> tuple[np.ndarray, np.ndarray]:
    """Q8_0 rows -> (q int8 (rows, n_in), scale float16 (rows, n_in / 32)), as ggml stores them.

    ``raw``: uint8 (rows, n_in / 32 * 34). ValueError when the bytes do not fit."""
    raw = np.asarray(raw, np.uint8)
    if n_in % BLOCK or raw.size % (n_in // BLOCK * Q8_0_BYTES):
        raise ValueError(f"unpack_q8_0: {raw.size} bytes are not rows of {n_in} Q8_0 weights")
    blocks = raw.reshape(-1, n_in // BLOCK, Q8_0_BYTES)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0]                         # (rows, nb)
    q = blocks[..., 2:].copy().view(np.int8).reshape(blocks.shape[0], n_in)
    return q, d


def exact_parts(path: str, cfg) -> dict:
    """The Q4_K, Q6_K and Q8_0 layer matrices of GGUF file ``path`` (decoder config ``cfg``) as
    stored ``q4_k`` parts, in the model's (in, out) orientation (llama's q and k output features
    un-permuted, as the loader does):

    * Q4_K: ``(packed uint8 (in / 2, out), scale float32 (in / 32, out), offset float32)``;
    * Q6_K: ``(q int8 (in, out), scale float32 (in / 16, out))``, the ``q8_0`` parts of group 16;
    * Q8_0: ``(q int8 (in, out), scale float16 (in / 32, out))``, ``q8_0`` as GGUF has it.

    Keys are ``layers.<i>.<name>``. Other types (float, other k-quants), tables and the output
    head are left out: ``stored_tensors`` stores them from their values (tables and head as ``q8_0``).
    """
    import gguf

    from ...models.gguf_file import _unpermute, hf_name, open_reader
    T = gguf.GGMLQuantizationType
    unpack = {T.Q4_K: unpack_q4_k, T.Q6_K: unpack_q6_k, T.Q8_0: unpack_q8_0}
    out = {}
    for t in open_reader(path)[0].tensors:
        if t.tensor_type not in unpack:
            continue
        name = hf_name(t.name) or ""
        prefix, _, rest = name.partition(".layers.")
        layer, _, key = rest.partition(".")
        if prefix != "model" or key not in _LAYER:
            continue
        parts = unpack[t.tensor_type](np.asarray(t.data), int(t.shape[0]))     # rows are output features
        if cfg.model_type == "llama" and _LAYER[key] in ("wq", "wk"):
            heads = cfg.num_heads if _LAYER[key] == "wq" else cfg.num_kv_heads
            parts = tuple(_unpermute(p, heads) for p in parts)
        out[f"layers.{layer}.{_LAYER[key]}"] = tuple(np.ascontiguousarray(p.T) for p in parts)   # (in.., out)
    return out


def q4_k_parts(path: str, cfg) -> dict:
    """The Q4_K layer matrices alone of :func:`exact_parts`."""
    return {n: p for n, p in exact_parts(path, cfg).items() if len(p) == 3}


def layout(parts: tuple) -> tuple:
    """What identifies the stored layout of exact ``parts`` of one matrix (the same for matrices
    with one input size): each part's dtype and rows."""
    return tuple((np.dtype(p.dtype).str, p.shape[0]) for p in parts)


def unfused_groups(exact: dict, flat: dict) -> set:
    """The names of the parts (``weights_format.FUSED``, per layer) that must not be fused: those of
    a fused q/k/v or gate/up whose parts are not all of one stored layout (a Q4_K_M file's Q4_K
    ``attn_q`` and ``attn_k`` with a Q6_K ``attn_v``; or some kept exactly and some not). Kept
    apart, each part is stored exactly in its own layout (the decoder takes a layer's q/k/v and
    gate/up fused or not, layer by layer)."""
    from .weights_format import FUSED
    keep = set()
    layers = {k.rsplit(".", 1)[0] for k in flat if k.startswith("layers.")}
    for prefix in layers:
        for parts in FUSED.values():
            names = [f"{prefix}.{n}" for n in parts]
            if not any(n in exact for n in names):
                continue
            kinds = {layout(exact[n]) if n in exact else None for n in names}
            if len(kinds) > 1:
                keep.update(names)
    return keep


def fuse_exact(exact: dict, fused: dict) -> dict:
    """``exact`` with the parts of each fused matrix (``weights_format.fuse_projections``'s mapping)
    concatenated along the output axis, as the fused float matrix is. The export fuses only
    matrices whose parts the file holds in one stored layout (:func:`unfused_groups`); a fused
    matrix with a part not in ``exact`` is left out, parts and all (stored from its values)."""
    out = dict(exact)
    for target, spec in fused.items():
        names = [n for n, _, _ in spec["parts"]]
        if not any(n in exact for n in names):
            continue
        if all(n in exact for n in names) and len({layout(exact[n]) for n in names}) == 1:
            out[target] = tuple(np.ascontiguousarray(np.concatenate([exact[n][i] for n in names], axis=1))
                                for i in range(len(exact[names[0]])))
        for n in names:
            out.pop(n, None)
    return out


__all__ = ["exact_parts", "q4_k_parts", "unpack_q4_k", "unpack_q6_k", "unpack_q8_0", "scale_min_k4", "layout",
           "unfused_groups", "fuse_exact"]
