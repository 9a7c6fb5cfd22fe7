"""A pre-norm transformer block written with tlaloc.numpy, for the recognizer tests:
RMSNorm → attention (grouped-query, RoPE, causal) → residual → RMSNorm → SwiGLU
→ residual, and a softmax cross-entropy loss on top.

tlaloc reads the source of these functions, so each is a plain module-level function.
"""
import math

import numpy as np

import tlaloc.numpy as tnp

# The sizes are module constants (the front end folds them): reshapes need Python ints.
B, T, D, F, V = 2, 6, 16, 24, 11     # batch, tokens, model width, SwiGLU width, vocabulary
N_HEADS = 4                          # query heads
N_KV_HEADS = 2                       # key/value heads (grouped-query: 2 query heads per kv head)
HD = D // N_HEADS                    # head dim
EPS = 1e-6


def rms_norm(x, w):
    """x (..., D), w (D,) -> (..., D)."""
    return x * tnp.rsqrt(tnp.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def rotate_half(x):
    half = HD // 2
    return tnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope(x, cos, sin):
    """x (B, H, T, hd), cos/sin (T, hd) -> (B, H, T, hd)."""
    return x * cos + rotate_half(x) * sin


def attention(q, k, v, mask):
    """q (B, H, T, hd), k/v (B, Hkv, T, hd), mask (T, T) bool -> (B, H, T, hd)."""
    G = N_HEADS // N_KV_HEADS
    k = tnp.broadcast_to(k[:, :, None], (B, N_KV_HEADS, G, T, HD)).reshape(B, N_HEADS, T, HD)   # (B, H, T, hd)
    v = tnp.broadcast_to(v[:, :, None], (B, N_KV_HEADS, G, T, HD)).reshape(B, N_HEADS, T, HD)
    s = (q @ k.swapaxes(-1, -2)) * (1.0 / math.sqrt(HD))                                  # (B, H, T, T)
    s = tnp.where(mask, s, -1e30)
    m = tnp.max(s, axis=-1, keepdims=True)
    e = tnp.exp(s - m)
    p = e / tnp.sum(e, axis=-1, keepdims=True)                                            # (B, H, T, T)
    return p @ v                                                                          # (B, H, T, hd)


def swiglu(x, wg, wu, wd):
    """x (B, T, D) -> (B, T, D); silu(x @ wg) * (x @ wu) @ wd."""
    g = x @ wg
    return (g * tnp.sigmoid(g) * (x @ wu)) @ wd


def block(x, p, cos, sin, mask):
    """x (B, T, D) -> (B, T, D)."""
    h = rms_norm(x, p["attn_norm"])                                                      # (B, T, D)
    q = (h @ p["wq"]).reshape(B, T, N_HEADS, HD).transpose(0, 2, 1, 3)                   # (B, H, T, hd)
    k = (h @ p["wk"]).reshape(B, T, N_KV_HEADS, HD).transpose(0, 2, 1, 3)                # (B, Hkv, T, hd)
    v = (h @ p["wv"]).reshape(B, T, N_KV_HEADS, HD).transpose(0, 2, 1, 3)
    q = rope(q, cos, sin)
    k = rope(k, cos, sin)
    o = attention(q, k, v, mask).transpose(0, 2, 1, 3).reshape(B, T, D)                 # (B, T, D)
    x = x + o @ p["wo"]
    h = rms_norm(x, p["mlp_norm"])
    return x + swiglu(h, p["wg"], p["wu"], p["wd"])


def cross_entropy(logits, labels):
    """logits (N, V), labels (N,) int -> mean of -log softmax(logits)[n, labels[n]]."""
    logp = tnp.log_softmax(logits, axis=-1)                                              # (N, V)
    return -tnp.mean(logp[np.arange(B * T), labels])


def loss(x, p, cos, sin, mask, labels, w_out):
    """Mean softmax cross-entropy of the block's logits at ``labels`` (B, T) int."""
    logits = block(x, p, cos, sin, mask) @ w_out                                         # (B, T, V)
    return cross_entropy(logits.reshape(B * T, V), labels.reshape(B * T))


def make_inputs(rng, dtype=np.float64):
    """Random inputs and parameters of the block (and the loss)."""
    hd = HD
    kv = N_KV_HEADS * hd

    def w(*shape):
        return (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(dtype)

    p = {"attn_norm": (1.0 + 0.1 * rng.standard_normal(D)).astype(dtype), "wq": w(D, D), "wk": w(D, kv),
         "wv": w(D, kv), "wo": w(D, D), "mlp_norm": (1.0 + 0.1 * rng.standard_normal(D)).astype(dtype),
         "wg": w(D, F), "wu": w(D, F), "wd": w(F, D)}
    x = rng.standard_normal((B, T, D)).astype(dtype)
    inv = 1.0 / (10000.0 ** (np.arange(0, hd, 2) / hd))
    ang = np.arange(T)[:, None] * inv[None, :]                                           # (T, hd/2)
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1).astype(dtype)                       # (T, hd)
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1).astype(dtype)
    mask = np.tril(np.ones((T, T), bool))
    labels = rng.integers(0, V, (B, T))
    w_out = w(D, V)
    return x, p, cos, sin, mask, labels, w_out


def norms_in_a_loop(x, w):
    """RMSNorm inside a for loop: recognized in the loop body (a region)."""
    for i in range(3):
        x = rms_norm(x, w) * 1.5
    return x.sum()
