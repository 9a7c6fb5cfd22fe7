"""Float64 NumPy oracles for the library kernels, written from each kernel's
documented formula and independent of ``kernels/library/reference.py`` (that
module is also the fallback of a claimed op, so it cannot judge the kernels).
The RMSNorm input gradient comes from JAX's float64 ``vjp`` of the forward
formula, not from a hand-derived expression.
"""
from __future__ import annotations

import numpy as np


def rmsnorm(x, w, eps):
    """x (rows, dim), w (dim,) -> y (rows, dim), rstd (rows,) with rstd = 1/√(mean(x²) + eps)."""
    x, w = np.float64(x), np.float64(w)
    rstd = 1.0 / np.sqrt((x ** 2).sum(-1) / x.shape[-1] + eps)
    return x * rstd[:, None] * w[None, :], rstd


def rmsnorm_grads(x, w, g, eps):
    """(dx (rows, dim), dw (dim,)) of sum(g · rmsnorm(x, w)) by JAX float64 reverse mode."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def f(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w
    _, vjp = jax.vjp(f, jnp.asarray(x, jnp.float64), jnp.asarray(w, jnp.float64))
    dx, dw = vjp(jnp.asarray(g, jnp.float64))
    return np.asarray(dx), np.asarray(dw)


def rope(x, cos, sin, positions):
    """Rotate-half RoPE: pairs (i, i + dim/2) rotated by the angle of their token's position."""
    x = np.float64(x)
    out = np.empty_like(x)
    half = x.shape[-1] // 2
    for t, p in enumerate(positions):
        c, s = np.float64(cos[p]), np.float64(sin[p])
        a, b = x[t, :, :half], x[t, :, half:]
        out[t, :, :half] = a * c - b * s
        out[t, :, half:] = b * c + a * s
    return out


def cross_entropy(z, labels):
    """loss (rows,), lse (rows,), and d loss/d z for a unit cotangent; label < 0 is ignored (loss and grad 0)."""
    z = np.float64(z)
    m = z.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[:, 0]
    loss = np.zeros(len(z))
    dz = np.exp(z - lse[:, None])
    for i, y in enumerate(labels):
        if y < 0:
            dz[i] = 0.0
        else:
            loss[i] = lse[i] - z[i, y]
            dz[i, y] -= 1.0
    return loss, lse, dz


def _softmax_rows(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def attention(q, k, v, causal):
    """softmax(q kᵀ / √d [+ causal mask]) v over (batch, heads, seq, head_dim)."""
    q, k, v = np.float64(q), np.float64(k), np.float64(v)
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        n = q.shape[2]
        s = np.where(np.arange(n)[None, :] <= np.arange(n)[:, None], s, -np.inf)
    return _softmax_rows(s) @ v


def paged_attention(q, k_cache, v_cache, tables, lens):
    """Decode attention: query head h of sequence b attends to KV head h // (Hq/Hkv) over its
    first lens[b] tokens, token t stored at page tables[b, t // block] slot t % block."""
    B, Hq, D = q.shape
    BS, Hkv = k_cache.shape[1], k_cache.shape[2]
    out = np.zeros((B, Hq, D))
    for b in range(B):
        toks = range(int(lens[b]))
        for h in range(Hq):
            kvh = h // (Hq // Hkv)
            K = np.array([k_cache[tables[b, t // BS], t % BS, kvh] for t in toks], np.float64)
            V = np.array([v_cache[tables[b, t // BS], t % BS, kvh] for t in toks], np.float64)
            out[b, h] = _softmax_rows(K @ np.float64(q[b, h]) / np.sqrt(D)) @ V
    return out
