"""The building blocks shared by the decoders and the encoder, written with ``tlaloc.numpy``.

Every function is pure: arrays in, arrays out. Eagerly they run on ``numpy.ndarray``;
under tracing they record DXIR. Axis names used in the shape comments:
B batch, T new tokens, S keys, D hidden, H query heads, K kv heads, G = H // K,
E head dim, F feed-forward width, V vocabulary.
"""
from __future__ import annotations

import math

import numpy as np

from .. import numpy as tnp
from .._prims.stored_matmul import kernel_call_wanted, stored_matmul
from .config import RopeConfig
from .lowp import LowpMatrix
from .quantized import QuantizedMatrix


# -- rotary position embedding -------------------------------------------------------------

def rope_inv_freq(rope: RopeConfig, head_dim: int) -> np.ndarray:
    """The inverse frequencies, shape (E/2,) float32, as transformers computes them (in float32)."""
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / (np.float32(rope.theta) ** exponents)).astype(np.float32)  # (E/2,)
    if rope.rope_type == "linear":
        inv_freq = inv_freq / np.float32(rope.factor)
    elif rope.rope_type == "llama3":
        inv_freq = _llama3_inv_freq(rope, inv_freq)
    if rope.freq_factors is not None:
        inv_freq = inv_freq / np.asarray(rope.freq_factors, np.float32)
    return inv_freq.astype(np.float32)


def _llama3_inv_freq(rope: RopeConfig, inv_freq: np.ndarray) -> np.ndarray:
    factor, low, high = rope.factor, rope.low_freq_factor, rope.high_freq_factor
    old_context = rope.original_max_position_embeddings
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    wavelen = np.float32(2 * math.pi) / inv_freq                               # (E/2,)
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / np.float32(factor), inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)                      # (E/2,)
    smoothed = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def rope_tables(inv_freq, positions):
    """cos and sin tables for integer positions (B, T): each (B, T, E), halves repeated."""
    freqs = tnp.multiply(tnp.astype(positions, tnp.float32)[..., None], inv_freq)  # (B, T, E/2)
    emb = tnp.concatenate([freqs, freqs], axis=-1)                                # (B, T, E)
    return tnp.cos(emb), tnp.sin(emb)


def apply_rope(x, cos, sin):
    """Rotate x (B, T, n, E) by the tables (B, T, E): x*cos + rotate_half(x)*sin."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]                                   # (B, T, n, E/2) each
    rotated = tnp.concatenate([tnp.negative(x2), x1], axis=-1)              # (B, T, n, E)
    return x * cos[:, :, None, :] + rotated * sin[:, :, None, :]            # (B, T, n, E)


# -- norms, projections, activations -------------------------------------------------------

def rms_norm(x, weight, eps: float):
    """x (..., D) * rsqrt(mean(x^2) + eps) * weight (D,)."""
    variance = tnp.mean(x * x, axis=-1, keepdims=True)                      # (..., 1)
    return weight * (x * tnp.rsqrt(variance + eps))                         # (..., D)


def layer_norm(x, weight, bias, eps: float):
    """LayerNorm over the last axis: x (..., D), weight and bias (D,)."""
    mean = tnp.mean(x, axis=-1, keepdims=True)                              # (..., 1)
    centered = x - mean                                                     # (..., D)
    variance = tnp.mean(centered * centered, axis=-1, keepdims=True)        # (..., 1)
    return centered * tnp.rsqrt(variance + eps) * weight + bias             # (..., D)


def linear(x, w, b=None):
    """x (..., in) @ w (in, out) [+ b (out,)] -> (..., out); w may be a :class:`QuantizedMatrix`
    or a :class:`~tlaloc.models.lowp.LowpMatrix`."""
    if isinstance(w, (QuantizedMatrix, LowpMatrix)):
        y = w.rmatmul(x)                                                    # (..., out)
    elif len(w.shape) == 2 and np.dtype(w.dtype) == np.float32 and kernel_call_wanted("f32", w.shape[1]):
        y = stored_matmul(x, w, format="f32")                               # the CPU kernel
    else:
        y = tnp.matmul(x, w)                                                # (..., out)
    return y if b is None else y + b


def silu(x):
    return x * tnp.sigmoid(x)


def gelu(x):
    """The exact GELU, 0.5 x (1 + erf(x / sqrt 2)), as BERT's ``hidden_act="gelu"``."""
    return 0.5 * x * (1.0 + tnp.erf(x * (1.0 / math.sqrt(2.0))))


def gelu_tanh(x):
    """The tanh GELU, HF's ``hidden_act="gelu_new"`` / ``"gelu_pytorch_tanh"``."""
    return 0.5 * x * (1.0 + tnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))))


#: HF ``hidden_act`` -> the function; ``config.py`` refuses any other name.
ACTIVATIONS = {"gelu": gelu, "gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh, "silu": silu}


# -- attention ------------------------------------------------------------------------------

def attention(q, k, v, q_pos, k_pos, *, window: int | None = None, causal: bool = True, key_valid=None):
    """Scaled dot-product attention with grouped kv heads.

    q (B, T, H, E); k, v (B, S, K, E); q_pos (B, T) and k_pos (B, S) integer positions;
    key_valid (B, S) bool or None. Query at position i sees key at position j when
    ``j <= i`` (causal), ``i - window < j`` (sliding window) and the key is valid.
    Returns (B, T, H, E).
    """
    B, T, H, E = q.shape
    K = k.shape[2]
    G = H // K
    qg = tnp.transpose(tnp.reshape(q, (B, T, K, G, E)), (0, 2, 3, 1, 4))     # (B, K, G, T, E)
    kt = tnp.transpose(k, (0, 2, 3, 1))[:, :, None]                         # (B, K, 1, E, S)
    vt = tnp.transpose(v, (0, 2, 1, 3))[:, :, None]                         # (B, K, 1, S, E)
    scores = tnp.matmul(qg, kt) * (E ** -0.5)                               # (B, K, G, T, S)
    allowed = None
    if causal:
        allowed = k_pos[:, None, :] <= q_pos[:, :, None]                    # (B, T, S)
        if window is not None:
            allowed = tnp.logical_and(allowed, k_pos[:, None, :] > q_pos[:, :, None] - window)
    if key_valid is not None:
        valid = tnp.broadcast_to(key_valid[:, None, :], (B, T, key_valid.shape[-1]))  # (B, T, S)
        allowed = valid if allowed is None else tnp.logical_and(allowed, valid)
    if allowed is not None:
        floor = np.float32(np.finfo(np.float32).min)
        scores = tnp.where(allowed[:, None, None], scores, floor)           # (B, K, G, T, S)
    probs = tnp.softmax(scores, axis=-1)                                    # (B, K, G, T, S)
    out = tnp.matmul(probs, vt)                                             # (B, K, G, T, E)
    return tnp.reshape(tnp.transpose(out, (0, 3, 1, 2, 4)), (B, T, H, E))   # (B, T, H, E)
