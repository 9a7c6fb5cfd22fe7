"""Rotary position embeddings, multi-head attention (grouped-query, causal),
and the pre-norm transformer block.

Heads are split without reshaping activations: the projection weights are
reshaped (their sizes are static hyperparameters) and einsum produces the
per-head layout directly, so the code never needs the batch or sequence
length as a Python int and differentiates under both ``tl.grad`` and
``tl.capture``. Axis names: B batch, T (q) and S (k) positions, C d_model,
G key/value heads, R query heads per key/value head (H = G·R), D head_dim.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from .. import numpy as tnp
from .._prims.broadcasting import cast_like
from ..errors import ArgumentError
from . import functional as F
from ._linear import MLP, Dropout, Linear, SwiGLU
from ._module import Module, as_key, check_input, size_arg, split_key, static_field
from ._norm import LayerNorm, RMSNorm

_frozen = dataclasses.dataclass(frozen=True, eq=False, repr=False)


def rope(x, positions, theta: float = 10000.0):
    """Rotary position embedding (Llama's "rotate half" layout).

    With ``half = D // 2``, ``inv_freq[i] = theta ** (-2i / D)``, angle
    ``a[t, i] = positions[t] · inv_freq[i]``, and ``x = [x1, x2]`` split in
    halves: ``[x1 cos a - x2 sin a, x2 cos a + x1 sin a]``.

    Args:
      x: ``(..., T, D)`` with D even.
      positions: ``(T,)`` integer or float positions.
      theta: the base.
    Returns:
      ``(..., T, D)``, x's dtype (angles are computed in x's dtype).
    """
    d = tnp.shape(x)[-1]
    if type(d) is not int:
        raise ArgumentError("rope: the head dimension must be known (use MultiHeadAttention, which knows it, "
                            "or rope_halves)")
    return rope_halves(x, positions, d, theta)


def rope_halves(x, positions, head_dim: int, theta: float = 10000.0):
    """``rope`` with the head dimension given as a Python int (``x (..., T, head_dim)``)."""
    if head_dim % 2:
        raise ArgumentError(f"rope: head_dim must be even, got {head_dim}")
    half = head_dim // 2
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)   # (half,)
    pos = cast_like(positions, x)                                                      # (T,)
    angle = tnp.expand_dims(pos, -1) * cast_like(inv_freq, x)                          # (T, half)
    c, s = tnp.cos(angle), tnp.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]                                              # (..., T, half)
    return tnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)               # (..., T, D)


def causal_mask(t_q, t_k=None):
    """Boolean ``(T, S)``: query ``i`` may attend to key ``j`` iff ``j <= i``."""
    t_k = t_q if t_k is None else t_k
    i = tnp.arange(t_q)
    j = tnp.arange(t_k)
    return tnp.greater_equal(tnp.expand_dims(i, 1), tnp.expand_dims(j, 0))


@_frozen
class MultiHeadAttention(Module):
    """Multi-head self-attention with grouped-query heads, RoPE and a causal mask.

    Args:
      d_model: C, the model width.
      num_heads: H query heads.
      num_kv_heads: G key/value heads (H must be a multiple of G; default H,
        i.e. plain multi-head; 1 is multi-query). Query head ``h`` reads
        key/value head ``h // (H / G)`` (PyTorch's ``enable_gqa`` convention).
      head_dim: D (default C / H).
      bias: biases on the four projections.
      rope_theta: RoPE base, or None for no position embedding.
      causal: mask out keys after the query.
      dtype, key: parameter dtype and random key (or int seed).

    Fields: ``q_proj (C → H·D)``, ``k_proj``, ``v_proj (C → G·D)``,
    ``o_proj (H·D → C)``, Linear layers with PyTorch's init and layout.

    Call: ``x (B, T, C) -> (B, T, C)``; scores are scaled by ``1/√D``.
    """
    q_proj: Linear
    k_proj: Linear
    v_proj: Linear
    o_proj: Linear
    d_model: int = static_field()
    num_heads: int = static_field()
    num_kv_heads: int = static_field()
    head_dim: int = static_field()
    rope_theta: Optional[float] = static_field()
    causal: bool = static_field()

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: Optional[int] = None,
                 head_dim: Optional[int] = None, *, bias: bool = False, rope_theta: Optional[float] = 10000.0,
                 causal: bool = True, dtype=np.float32, key=None):
        who, example = "MultiHeadAttention", "MultiHeadAttention(512, 8) or MultiHeadAttention(512, 8, 2)"
        d_model = size_arg(d_model, "d_model", who, "the size of the input's last axis", example)
        num_heads = size_arg(num_heads, "num_heads", who, "the number of query heads", example)
        g = num_heads if num_kv_heads is None else size_arg(num_kv_heads, "num_kv_heads", who,
                                                            "the number of key/value heads", example)
        if num_heads % g:
            raise ArgumentError(f"MultiHeadAttention: num_heads={num_heads} must be a multiple of "
                                f"num_kv_heads={g}")
        if head_dim is None:
            if d_model % num_heads:
                raise ArgumentError(f"MultiHeadAttention: d_model={d_model} is not divisible by "
                                    f"num_heads={num_heads}; pass head_dim")
            head_dim = d_model // num_heads
        head_dim = size_arg(head_dim, "head_dim", who, "the size of each head", example)
        if rope_theta is not None and head_dim % 2:
            raise ArgumentError(f"{who}: head_dim must be even for rotary position embeddings (rope_theta="
                                f"{rope_theta}), got head_dim={head_dim}; pass an even head_dim, or "
                                f"rope_theta=None for no position embedding")
        kq, kk, kv, ko = split_key(as_key(key, "MultiHeadAttention"), 4)
        hd = int(head_dim)
        self._set(q_proj=Linear(d_model, num_heads * hd, bias=bias, dtype=dtype, key=kq),
                  k_proj=Linear(d_model, g * hd, bias=bias, dtype=dtype, key=kk),
                  v_proj=Linear(d_model, g * hd, bias=bias, dtype=dtype, key=kv),
                  o_proj=Linear(num_heads * hd, d_model, bias=bias, dtype=dtype, key=ko),
                  d_model=int(d_model), num_heads=int(num_heads), num_kv_heads=g, head_dim=hd,
                  rope_theta=None if rope_theta is None else float(rope_theta), causal=bool(causal))

    def _project(self, x, lin: Linear, heads: tuple, spec: str):
        w = tnp.reshape(lin.weight, heads + (self.head_dim, self.d_model))
        y = tnp.einsum(spec, x, w)
        if lin.bias is not None:
            y = y + tnp.reshape(lin.bias, heads + (1, self.head_dim))
        return y

    def __call__(self, x):
        x = check_input(x, "MultiHeadAttention", f"(batch, time, d_model={self.d_model})", trailing=(self.d_model,),
                    rank=3)
        G, D = self.num_kv_heads, self.head_dim
        R = self.num_heads // G
        q = self._project(x, self.q_proj, (G, R), "btc,grdc->bgrtd")      # (B, G, R, T, D)
        k = self._project(x, self.k_proj, (G,), "btc,gdc->bgtd")          # (B, G, S, D)
        v = self._project(x, self.v_proj, (G,), "btc,gdc->bgtd")          # (B, G, S, D)
        t = tnp.shape(x)[1]
        if self.rope_theta is not None:
            pos = tnp.arange(t)                                            # (T,)
            q = rope_halves(q, pos, D, self.rope_theta)
            k = rope_halves(k, pos, D, self.rope_theta)
        s = tnp.einsum("bgrqd,bgkd->bgrqk", q, k) * (1.0 / math.sqrt(D))  # (B, G, R, T, S)
        if self.causal:
            s = tnp.where(causal_mask(t), s, -np.inf)
        a = F.softmax(s, axis=-1)                                          # (B, G, R, T, S)
        y = tnp.einsum("bgrqk,bgkd->bgrqd", a, v)                          # (B, G, R, T, D)
        wo = tnp.reshape(self.o_proj.weight, (self.d_model, G, R, D))     # (C, G, R, D)
        out = tnp.einsum("bgrtd,cgrd->btc", y, wo)                         # (B, T, C)
        if self.o_proj.bias is not None:
            out = out + self.o_proj.bias
        return out


@_frozen
class TransformerBlock(Module):
    """A pre-norm transformer block: ``x + attn(norm1(x))``, then ``+ mlp(norm2(x))``.

    Args:
      d_model, num_heads, num_kv_heads, head_dim, rope_theta, causal: as ``MultiHeadAttention``.
      mlp: ``'gelu'`` (MLP C → hidden → C, tanh GELU) or ``'swiglu'`` (Llama's).
      mlp_hidden: hidden width (default 4·C for gelu, 8·C/3 rounded up to a multiple of 8 for swiglu).
      norm: ``'layernorm'`` or ``'rmsnorm'``; ``norm_eps`` its eps (default 1e-5).
      bias: biases in the attention and MLP projections and in LayerNorm (nanoGPT's
        ``bias`` switch; off by default).
      dropout: probability on both residual branches (used when called with a key).

    Call: ``x (B, T, C) -> (B, T, C)``; ``key=`` enables dropout, ``inference=True`` disables it.
    """
    norm1: Module
    attn: MultiHeadAttention
    norm2: Module
    mlp: Module
    dropout: float = static_field()

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: Optional[int] = None, *,
                 head_dim: Optional[int] = None, mlp: str = "gelu", mlp_hidden: Optional[int] = None,
                 norm: str = "layernorm", norm_eps: float = 1e-5, bias: bool = False,
                 rope_theta: Optional[float] = 10000.0, causal: bool = True, dropout: float = 0.0,
                 dtype=np.float32, key=None):
        ka, km = split_key(as_key(key, "TransformerBlock"), 2)
        d_model = size_arg(d_model, "d_model", "TransformerBlock", "the size of the input's last axis",
                           "TransformerBlock(512, 8)")
        if mlp_hidden is not None:
            mlp_hidden = size_arg(mlp_hidden, "mlp_hidden", "TransformerBlock", "the MLP's hidden width",
                                  "TransformerBlock(512, 8, mlp_hidden=2048)")
        if isinstance(dropout, (bool, np.bool_)) or not isinstance(dropout, (int, float, np.integer, np.floating)) \
                or not 0.0 <= dropout <= 1.0:
            raise ArgumentError(f"TransformerBlock: dropout must be a probability in [0, 1] (on both residual "
                                f"branches), got {dropout!r}; pass e.g. dropout=0.1, or 0.0 for none")
        if norm == "layernorm":
            mk = lambda: LayerNorm(d_model, eps=norm_eps, bias=bias, dtype=dtype)  # noqa: E731
        elif norm == "rmsnorm":
            mk = lambda: RMSNorm(d_model, eps=norm_eps, dtype=dtype)  # noqa: E731
        else:
            raise ArgumentError(f"TransformerBlock: norm must be 'layernorm' or 'rmsnorm', got {norm!r}")
        if mlp == "gelu":
            hidden = 4 * d_model if mlp_hidden is None else int(mlp_hidden)
            ff = MLP((d_model, hidden, d_model), activation=F.gelu_tanh, bias=bias, dtype=dtype, key=km)
        elif mlp == "swiglu":
            hidden = (-(-8 * d_model // 3) + 7) // 8 * 8 if mlp_hidden is None else int(mlp_hidden)
            ff = SwiGLU(d_model, hidden, bias=bias, dtype=dtype, key=km)
        else:
            raise ArgumentError(f"TransformerBlock: mlp must be 'gelu' or 'swiglu', got {mlp!r}")
        attn = MultiHeadAttention(d_model, num_heads, num_kv_heads, head_dim, bias=bias, rope_theta=rope_theta,
                                  causal=causal, dtype=dtype, key=ka)
        self._set(norm1=mk(), attn=attn, norm2=mk(), mlp=ff, dropout=float(dropout))

    def __call__(self, x, *, key=None, inference: bool = False):
        drop = Dropout(self.dropout)
        k1 = k2 = None
        if key is not None:
            k1, k2 = split_key(key, 2)
        h = self.attn(self.norm1(x))                                      # (B, T, C)
        x = x + drop(h, key=k1, inference=inference or key is None)
        h = self.mlp(self.norm2(x))                                       # (B, T, C)
        return x + drop(h, key=k2, inference=inference or key is None)
