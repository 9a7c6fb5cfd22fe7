"""Decoder-only transformers of the Llama family as pure functions over a weights pytree.

One body serves Llama (SmolLM2, TinyLlama), Qwen2 (q/k/v bias), Qwen3 (q/k RMSNorm over
the head dim, optionally tied embeddings) and Mistral (sliding window); the differences
are fields of :class:`~tlaloc.models.config.DecoderConfig`.

Weights (matrices stored as (in, out), so every projection is ``x @ w``)::

    {"embed": (V, D), "norm": (D,), "lm_head": (D, V) unless tied,
     "layers": ({"attn_norm": (D,), "wq": (D, H*E), "wk": (D, K*E), "wv": (D, K*E),
                 "wo": (H*E, D), ["bq", "bk", "bv", "bo"], ["q_norm": (E,), "k_norm": (E,)],
                 "mlp_norm": (D,), "w_gate": (D, F), "w_up": (D, F), "w_down": (F, D)}, ...)}

A layer may instead hold its projections fused along the output axis, as the serving
export stores them (one dot each instead of three and two; the same values per column):
``"wqkv": (D, (H+2K)*E)`` = [wq | wk | wv] (with ``"bqkv"`` = [bq | bk | bv]) and
``"w_gate_up": (D, 2F)`` = [w_gate | w_up] (with ``"b_gate_up"``).
"""
from __future__ import annotations

from .. import numpy as tnp
from .config import DecoderConfig
from .kv_cache import NoCache
from .layers import apply_rope, linear, rms_norm, rope_inv_freq, rope_tables, silu
from .lowp import LowpMatrix
from .quantized import StoredProduct


def attention_block(cfg: DecoderConfig, layer_idx: int, p: dict, x, cos, sin, positions, backend):
    """Self-attention of one layer: x (B, T, D) -> (B, T, D).

    The projections, q/k norms and rotary embedding are computed here; storing keys
    and attending over the cache is the backend's job (``backend.attend``).
    """
    B, T, _ = x.shape
    H, K, E = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    if "wqkv" in p:
        qkv = linear(x, p["wqkv"], p.get("bqkv"))                         # (B, T, (H+2K)*E)
        q, k, v = qkv[..., :H * E], qkv[..., H * E:(H + K) * E], qkv[..., (H + K) * E:]
    else:
        q, k, v = (linear(x, p[w], p.get(b)) for w, b in (("wq", "bq"), ("wk", "bk"), ("wv", "bv")))
    q = tnp.reshape(q, (B, T, H, E))                                      # (B, T, H, E)
    k = tnp.reshape(k, (B, T, K, E))                                      # (B, T, K, E)
    v = tnp.reshape(v, (B, T, K, E))                                      # (B, T, K, E)
    if cfg.qk_norm:
        q = rms_norm(q, p["q_norm"], cfg.rms_norm_eps)                    # (B, T, H, E)
        k = rms_norm(k, p["k_norm"], cfg.rms_norm_eps)                    # (B, T, K, E)
    q = apply_rope(q, cos, sin)                                           # (B, T, H, E)
    k = apply_rope(k, cos, sin)                                           # (B, T, K, E)
    window = cfg.sliding_windows[layer_idx] if cfg.sliding_windows else None
    out = backend.attend(layer_idx, q, k, v, positions, window)           # (B, T, H, E)
    return linear(tnp.reshape(out, (B, T, H * E)), p["wo"], p.get("bo"))  # (B, T, D)


def mlp_block(cfg: DecoderConfig, p: dict, x):
    """SwiGLU feed-forward: x (B, T, D) -> (B, T, D)."""
    if "w_gate_up" in p:
        gate_up = linear(x, p["w_gate_up"], p.get("b_gate_up"))           # (B, T, 2F)
        F = gate_up.shape[-1] // 2
        gate, up = gate_up[..., :F], gate_up[..., F:]                     # (B, T, F) each
    else:
        gate = linear(x, p["w_gate"], p.get("b_gate"))                    # (B, T, F)
        up = linear(x, p["w_up"], p.get("b_up"))                          # (B, T, F)
    gate = silu(gate)                                                     # (B, T, F)
    return linear(gate * up, p["w_down"], p.get("b_down"))               # (B, T, D)


def decoder_layer(cfg: DecoderConfig, layer_idx: int, p: dict, x, cos, sin, positions, backend):
    """One pre-norm block: x (B, T, D) -> (B, T, D)."""
    h = rms_norm(x, p["attn_norm"], cfg.rms_norm_eps)                     # (B, T, D)
    x = x + attention_block(cfg, layer_idx, p, h, cos, sin, positions, backend)  # (B, T, D)
    h = rms_norm(x, p["mlp_norm"], cfg.rms_norm_eps)                      # (B, T, D)
    return x + mlp_block(cfg, p, h)                                       # (B, T, D)


def decoder_hidden(cfg: DecoderConfig, weights: dict, token_ids, positions, backend=None):
    """The final normed hidden states (B, T, D) for token_ids and positions, both (B, T) ints."""
    backend = NoCache() if backend is None else backend
    inv_freq = rope_inv_freq(cfg.rope, cfg.head_dim)                      # (E/2,)
    cos, sin = rope_tables(inv_freq, positions)                           # (B, T, E) each
    x = tnp.take(weights["embed"], token_ids, axis=0)                     # (B, T, D)
    for i, p in enumerate(weights["layers"]):
        x = decoder_layer(cfg, i, p, x, cos, sin, positions, backend)     # (B, T, D)
    return rms_norm(x, weights["norm"], cfg.rms_norm_eps)                 # (B, T, D)


def lm_head(cfg: DecoderConfig, weights: dict, h, head_parts=None):
    """Logits (..., V) from hidden states h (..., D); tied models reuse the embedding.

    ``head_parts``, if given, replaces the table: the head split along the vocabulary, in
    order, each part in the table's own layout ((n, D) tied, (D, n) untied). Each part's
    logits come from their own dot (the same contraction, so the same values) and are
    concatenated. The serving programs pass parts converted from bf16 or int8 one at a
    time, so no float32 copy of the whole table is made (``tlaloc.serving.export.programs``).
    """
    if head_parts is None:
        head_parts = [weights["embed"] if cfg.tie_word_embeddings else weights["lm_head"]]
    logits = [_head_dot(cfg, h, part) for part in head_parts]            # [(..., n)]
    return logits[0] if len(logits) == 1 else tnp.concatenate(logits, axis=-1)  # (..., V)


def _head_dot(cfg: DecoderConfig, h, table):
    """h (..., D) against a head table (n, D) tied or (D, n) untied: (..., n)."""
    if isinstance(table, (LowpMatrix, StoredProduct)):                    # int8 / bf16 dots, CPU kernels
        return table.rmatmul(h)                                           # (..., n)
    if cfg.tie_word_embeddings:
        # contract D with the table's own axis 1: a transpose here made XLA CPU copy the
        # whole (V, D) table into (D, V) order at every step before its dot
        return tnp.tensordot(h, table, axes=(-1, 1))                    # (..., n)
    return tnp.matmul(h, table)                                           # (..., n)


def decoder_forward(cfg: DecoderConfig, weights: dict, token_ids, positions, backend=None, *,
                    last_only: bool = False):
    """Logits for token_ids (B, T) at positions (B, T): (B, T, V), or (B, V) with ``last_only``.

    ``backend`` holds the keys and values of earlier calls (:class:`KVCache`); ``None``
    attends within this call only.
    """
    h = decoder_hidden(cfg, weights, token_ids, positions, backend)       # (B, T, D)
    if last_only:
        h = h[:, -1]                                                      # (B, D)
    return lm_head(cfg, weights, h)                                       # (B, T, V) or (B, V)
