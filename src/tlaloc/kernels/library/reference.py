"""The library kernels' reference programs, written with ``tlaloc.numpy``.

Each takes the kernel's inputs (any float dtype; pass float64 for the oracle)
and returns its outputs in the same order as the kernel's signature. They are
the ground truth in the simulator tests and in the GPU check script, and the
``reference`` a claimed op falls back to.
"""
from __future__ import annotations

import math

import numpy as np

from ... import numpy as tnp


def rmsnorm_fwd(x, w, *, eps=1e-6):
    """x (rows, dim), w (dim,) -> y (rows, dim), rstd (rows,)."""
    rstd = 1.0 / tnp.sqrt(tnp.mean(x * x, axis=-1) + eps)
    return x * tnp.expand_dims(rstd, -1) * w, rstd


def rmsnorm_bwd_dx(x, w, rstd, g):
    """dx (rows, dim) of y = x * rstd * w for cotangent g (rstd from the forward)."""
    gw = g * w
    dot = tnp.sum(gw * x, axis=-1, keepdims=True)
    r = tnp.expand_dims(rstd, -1)
    return (r * gw - x * (r * r * r) * dot / x.shape[-1],)


def rmsnorm_bwd_dw(x, rstd, g):
    """dw (dim,) = sum over rows of g * x * rstd."""
    return (tnp.sum(g * x * tnp.expand_dims(rstd, -1), axis=0),)


def rope(x, cos, sin, positions):
    """x (tokens, heads, dim), cos/sin (max_pos, dim/2), positions (tokens,) -> (tokens, heads, dim)."""
    half = x.shape[-1] // 2
    c = tnp.expand_dims(tnp.take(cos, positions, axis=0), 1)       # (tokens, 1, half)
    s = tnp.expand_dims(tnp.take(sin, positions, axis=0), 1)
    x1, x2 = x[..., :half], x[..., half:]
    return (tnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1),)


def cross_entropy_fwd(logits, labels):
    """logits (rows, vocab), labels (rows,) -> loss (rows,), lse (rows,); label < 0 is ignored."""
    lse = tnp.logsumexp(logits, axis=-1)
    rows, vocab = logits.shape
    flat = np.arange(rows) * vocab + np.maximum(labels, 0)
    picked = tnp.take(tnp.reshape(logits, (-1,)), flat)                  # logits[row, label]
    return tnp.where(labels >= 0, lse - picked, 0.0 * lse), lse


def cross_entropy_bwd(logits, labels, lse, g):
    """dlogits (rows, vocab) = g * (softmax - onehot(label)); 0 for ignored rows."""
    p = tnp.exp(logits - tnp.expand_dims(lse, -1))
    onehot = (np.arange(logits.shape[-1])[None, :] == labels[:, None]).astype(p.dtype)
    keep = tnp.expand_dims(tnp.where(labels >= 0, g, 0.0 * g), -1)
    return (keep * (p - onehot),)


def attention(q, k, v, *, causal=False, scale=None):
    """q, k, v (batch, heads, seq, head_dim) -> out (batch, heads, seq, head_dim)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = tnp.einsum("bhqd,bhkd->bhqk", q, k) * scale                   # (B, H, S, S)
    if causal:
        n = q.shape[2]
        s = tnp.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    return (tnp.einsum("bhqk,bhkd->bhqd", tnp.softmax(s, axis=-1), v),)


def paged_attention(q, k_cache, v_cache, block_tables, seq_lens, *, scale=None):
    """Decode attention over a paged KV cache with GQA; see ``paged_attention.py``."""
    B, Hq, D = q.shape
    BS, Hkv = k_cache.shape[1], k_cache.shape[2]
    G = Hq // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    outs = []
    for b in range(B):
        t = np.arange(int(seq_lens[b]))
        pages, slots = block_tables[b, t // BS], t % BS
        kv_head = np.arange(Hq) // G
        K = tnp.take(k_cache[pages, slots], kv_head, axis=1)             # (len, Hq, D)
        V = tnp.take(v_cache[pages, slots], kv_head, axis=1)
        s = tnp.einsum("hd,thd->ht", q[b], K) * scale                     # (Hq, len)
        outs.append(tnp.einsum("ht,thd->hd", tnp.softmax(s, axis=-1), V))
    return (tnp.stack(outs, axis=0),)


REFERENCES = {
    "rmsnorm_fwd": rmsnorm_fwd, "rmsnorm_bwd_dx": rmsnorm_bwd_dx, "rmsnorm_bwd_dw": rmsnorm_bwd_dw,
    "rope": rope, "cross_entropy_fwd": cross_entropy_fwd, "cross_entropy_bwd": cross_entropy_bwd,
    "attention": attention, "paged_attention": paged_attention,
}
