"""A BERT encoder (all-MiniLM-L6-v2 style) with mean pooling and L2 normalization.

Weights (matrices stored as (in, out))::

    {"word": (V, D), "position": (P, D), "token_type": (2, D), "emb_ln_w": (D,), "emb_ln_b": (D,),
     "layers": ({"wq", "wk", "wv", "wo": (D, D), "bq", "bk", "bv", "bo": (D,),
                 "attn_ln_w", "attn_ln_b": (D,), "w_in": (D, F), "b_in": (F,),
                 "w_out": (F, D), "b_out": (D,), "out_ln_w", "out_ln_b": (D,)}, ...)}
"""
from __future__ import annotations

import numpy as np

from .. import numpy as tnp
from .config import EncoderConfig
from .layers import ACTIVATIONS, attention, layer_norm, linear


def encoder_layer(cfg: EncoderConfig, p: dict, x, key_valid):
    """One post-norm BERT block: x (B, T, D), key_valid (B, T) bool -> (B, T, D)."""
    B, T, D = x.shape
    H, E = cfg.num_heads, cfg.head_dim
    q = tnp.reshape(linear(x, p["wq"], p["bq"]), (B, T, H, E))           # (B, T, H, E)
    k = tnp.reshape(linear(x, p["wk"], p["bk"]), (B, T, H, E))           # (B, T, H, E)
    v = tnp.reshape(linear(x, p["wv"], p["bv"]), (B, T, H, E))           # (B, T, H, E)
    pos = np.zeros((B, T), np.int64)                                     # unused: not causal
    a = attention(q, k, v, pos, pos, causal=False, key_valid=key_valid)  # (B, T, H, E)
    a = linear(tnp.reshape(a, (B, T, D)), p["wo"], p["bo"])              # (B, T, D)
    x = layer_norm(x + a, p["attn_ln_w"], p["attn_ln_b"], cfg.layer_norm_eps)  # (B, T, D)
    h = ACTIVATIONS[cfg.hidden_act](linear(x, p["w_in"], p["b_in"]))    # (B, T, F)
    h = linear(h, p["w_out"], p["b_out"])                                # (B, T, D)
    return layer_norm(x + h, p["out_ln_w"], p["out_ln_b"], cfg.layer_norm_eps)  # (B, T, D)


def encoder_forward(cfg: EncoderConfig, weights: dict, token_ids, attention_mask, token_type_ids=None):
    """Token states (B, T, D) for token_ids (B, T) with attention_mask (B, T) (1 = real token)."""
    B, T = token_ids.shape
    types = np.zeros((B, T), np.int64) if token_type_ids is None else token_type_ids
    x = (tnp.take(weights["word"], token_ids, axis=0)                   # (B, T, D)
         + weights["position"][:T][None]                                 # (1, T, D)
         + tnp.take(weights["token_type"], types, axis=0))               # (B, T, D)
    x = layer_norm(x, weights["emb_ln_w"], weights["emb_ln_b"], cfg.layer_norm_eps)  # (B, T, D)
    key_valid = attention_mask > 0                                       # (B, T)
    for p in weights["layers"]:
        x = encoder_layer(cfg, p, x, key_valid)                          # (B, T, D)
    return x


def mean_pool(states, attention_mask, normalize: bool = True):
    """Masked mean over tokens: states (B, T, D), attention_mask (B, T) -> (B, D), L2-normalized."""
    m = tnp.astype(attention_mask, tnp.float32)[..., None]               # (B, T, 1)
    summed = tnp.sum(states * m, axis=1)                                 # (B, D)
    count = tnp.maximum(tnp.sum(m, axis=1), 1e-9)                        # (B, 1)
    pooled = summed / count                                              # (B, D)
    if not normalize:
        return pooled
    norm = tnp.sqrt(tnp.sum(pooled * pooled, axis=-1, keepdims=True))    # (B, 1)
    return pooled / tnp.maximum(norm, 1e-12)                             # (B, D)


def encode(cfg: EncoderConfig, weights: dict, token_ids, attention_mask, token_type_ids=None):
    """Sentence embeddings (B, D): encoder states, mean pooling, then L2 normalization."""
    states = encoder_forward(cfg, weights, token_ids, attention_mask, token_type_ids)  # (B, T, D)
    return mean_pool(states, attention_mask, cfg.normalize)              # (B, D)
