"""PyTorch as the oracle for ``tl.nn``: comparison helpers and reference
modules built from torch primitives (PyTorch has no RoPE, GQA block or
SwiGLU module of its own).

Tolerance: ``|ours - torch| <= rtol · max|torch|`` elementwise (a relative
error measured against the array's scale, so cancellation near zero in one
element does not fail a correct layer, while a wrong element of any size
does). ``rtol`` follows the dtype (``RTOL_BY_DTYPE``): float64 is held to
1e-12, float32 to 2e-6. Measured worst cases over the layer table (outputs and
gradients): 1.0e-15 in float64 and 9.6e-7 in float32 (the tanh-GELU gradient;
every other layer is under 5.3e-7), so float32 is about 8 ulp above 1e-6 rather
than at it. Negative controls in the tests (an eps dropped on eps-sensitive rows,
a weight off by 1e-9 relative in float64) show that real faults exceed it.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is the test-only oracle here: pip install torch==2.13.0")
F = torch.nn.functional
torch.set_num_threads(1)   # tiny ops: threads only add overhead

RTOL_BY_DTYPE = {np.dtype(np.float32): 2e-6, np.dtype(np.float64): 1e-12}
RTOL = RTOL_BY_DTYPE[np.dtype(np.float32)]     # the loosest: what the controls must exceed


def rtol_for(dtype) -> float:
    """The tolerance of ``dtype`` (float32 or float64); any other dtype is a test bug."""
    return RTOL_BY_DTYPE[np.dtype(dtype)]


def rel_err(ours, ref) -> float:
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    assert ours.shape == ref.shape, f"shape {ours.shape} != {ref.shape}"
    scale = max(np.abs(ref).max(initial=0.0), np.finfo(np.float64).tiny)
    return float(np.abs(ours - ref).max(initial=0.0) / scale)


def assert_close(ours, ref, what="", rtol=None):
    """``ours`` and ``ref`` have the same dtype, are finite and agree to ``rtol``
    (by default the dtype's, ``rtol_for``)."""
    ours_a = np.asarray(ours)
    ref_a = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    assert ours_a.dtype == ref_a.dtype, f"{what}: dtype {ours_a.dtype} != {ref_a.dtype}"
    rtol = rtol_for(ours_a.dtype) if rtol is None else rtol
    assert np.all(np.isfinite(ours_a)), f"{what}: non-finite values"
    e = rel_err(ours_a, ref_a)
    assert e <= rtol, f"{what}: relative error {e:.3g} > {rtol:g}"


def t(a, grad=False):
    x = torch.from_numpy(np.array(a))
    return x.requires_grad_(grad) if grad else x


def rope_torch(x, theta):
    """Llama's rotate-half RoPE on ``x (B, H, T, D)``, angles in x's dtype."""
    T, D = x.shape[-2], x.shape[-1]
    inv = torch.from_numpy(1.0 / theta ** (np.arange(0, D, 2, dtype=np.float64) / D)).to(x.dtype)
    ang = torch.arange(T).to(x.dtype)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def linear_from(lin):
    m = torch.nn.Linear(lin.in_features, lin.out_features, bias=lin.bias is not None,
                        dtype=torch.from_numpy(np.asarray(lin.weight)).dtype)
    with torch.no_grad():
        m.weight.copy_(t(lin.weight))
        if lin.bias is not None:
            m.bias.copy_(t(lin.bias))
    return m


class TorchAttention(torch.nn.Module):
    """Grouped-query attention with RoPE via ``F.scaled_dot_product_attention(enable_gqa=True)``."""

    def __init__(self, ours, kv_layout="interleave"):
        super().__init__()
        self.q_proj, self.k_proj = linear_from(ours.q_proj), linear_from(ours.k_proj)
        self.v_proj, self.o_proj = linear_from(ours.v_proj), linear_from(ours.o_proj)
        self.H, self.G, self.D = ours.num_heads, ours.num_kv_heads, ours.head_dim
        self.theta, self.causal = ours.rope_theta, ours.causal
        self.kv_layout = kv_layout          # "tile" is a deliberately wrong head mapping (negative control)

    def forward(self, x):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, self.G, self.D).transpose(1, 2)  # (B, G, T, D)
        v = self.v_proj(x).view(B, T, self.G, self.D).transpose(1, 2)
        if self.theta is not None:
            q, k = rope_torch(q, self.theta), rope_torch(k, self.theta)
        if self.kv_layout == "tile":
            r = self.H // self.G
            k, v = k.repeat(1, r, 1, 1), v.repeat(1, r, 1, 1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.H * self.D))


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


class TorchMLP(torch.nn.Module):
    def __init__(self, ours, act):
        super().__init__()
        self.layers = torch.nn.ModuleList([linear_from(l) for l in ours.layers])
        self.act = act

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = self.act(layer(x))
        return self.layers[-1](x)


class TorchSwiGLU(torch.nn.Module):
    def __init__(self, ours):
        super().__init__()
        self.gate_proj, self.up_proj = linear_from(ours.gate_proj), linear_from(ours.up_proj)
        self.down_proj = linear_from(ours.down_proj)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def norm_from(ours):
    from tlaloc import nn
    dtype = torch.from_numpy(np.asarray(ours.weight)).dtype
    if isinstance(ours, nn.LayerNorm):
        m = torch.nn.LayerNorm(ours.normalized_shape, eps=ours.eps, bias=ours.bias is not None, dtype=dtype)
    else:
        m = torch.nn.RMSNorm(ours.normalized_shape, eps=ours.eps, dtype=dtype)
    with torch.no_grad():
        m.weight.copy_(t(ours.weight))
        if getattr(ours, "bias", None) is not None:
            m.bias.copy_(t(ours.bias))
    return m


class TorchBlock(torch.nn.Module):
    def __init__(self, ours):
        super().__init__()
        from tlaloc import nn
        self.norm1, self.norm2 = norm_from(ours.norm1), norm_from(ours.norm2)
        self.attn = TorchAttention(ours.attn)
        self.mlp = TorchSwiGLU(ours.mlp) if isinstance(ours.mlp, nn.SwiGLU) else TorchMLP(ours.mlp, gelu_tanh)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TorchLM(torch.nn.Module):
    """The tiny transformer LM of ``tiny_lm`` (tests): embedding, blocks, final norm, head."""

    def __init__(self, ours):
        super().__init__()
        self.embed = torch.nn.Embedding(ours.embed.num_embeddings, ours.embed.embedding_dim,
                                        dtype=torch.from_numpy(np.asarray(ours.embed.weight)).dtype)
        with torch.no_grad():
            self.embed.weight.copy_(t(ours.embed.weight))
        self.blocks = torch.nn.ModuleList([TorchBlock(b) for b in ours.blocks])
        self.norm = norm_from(ours.norm)
        self.head = linear_from(ours.head)

    def forward(self, ids):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def named_leaves(tree) -> dict:
    """``{path: leaf}`` of a tlaloc pytree, paths as in checkpoints without the root
    (``attn.q_proj.weight``), which the torch references above reuse as parameter names."""
    from tlaloc.checkpoint_io import _flatten
    leaves, _, paths, _ = _flatten("root", tree)
    return {p[len("root."):]: leaf for p, leaf in zip(paths, leaves)}
