"""The analytic gradient bodies of the coarsened ops.

Each ``<op>(ins, g, attrs)`` builds, with ``tlaloc.numpy`` on symbolic values
of concrete shapes, the cotangent of every operand from the operands and the
output cotangent ``g``; ``grad_body`` turns it into a specialised graph. The
formulas are the textbook ones (softmax backward as ``p * (dp - Σ dp·p)``,
RMSNorm backward through ``rstd``), not the autodiff of the forward body: the
gradient body is what a backward kernel would compute.
"""
from __future__ import annotations

import numpy as np

from .. import numpy as tnp
from .._core.builder import Builder
from .._core.graph import Graph


def sum_to(v, shape):
    """``v`` summed down to ``shape`` (the inverse of broadcasting ``shape`` up to ``v``)."""
    vs, shape = tuple(v.shape), tuple(shape)
    if vs == shape:
        return v
    lead = len(vs) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + k for k, d in enumerate(shape) if d == 1 and vs[lead + k] != 1)
    if axes:
        v = tnp.sum(v, axis=axes, keepdims=True)
    return tnp.reshape(v, shape)


def _t(x):
    return tnp.swapaxes(x, -1, -2)


def _rows(x):
    """``x`` as a matrix: every leading axis folded into the rows."""
    return tnp.reshape(x, (int(np.prod(x.shape[:-1])), x.shape[-1]))


# -- the ops ------------------------------------------------------------------------------------

def rms_norm(ins, g, attrs):
    x, w = ins
    d = x.shape[-1]
    r = tnp.rsqrt(tnp.sum(x * x, axis=-1, keepdims=True) / d + attrs["eps"])       # (..., 1)
    gw = g * w
    dot = tnp.sum(gw * x, axis=-1, keepdims=True)
    dx = r * gw - x * (r * r * r) * dot / d
    return [dx, sum_to(g * x * r, w.shape)]


def _rotate_half(x, half):
    return tnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope(ins, g, attrs):
    x, c, s = ins
    half = attrs["half"]
    u = g * s
    dx = g * c + tnp.concatenate([u[..., half:], -u[..., :half]], axis=-1)         # R^T (g * sin)
    return [dx, sum_to(g * x, c.shape), sum_to(g * _rotate_half(x, half), s.shape)]


def swiglu(ins, g, attrs):
    x, wg, wu, wd = ins
    a = tnp.matmul(x, wg)                                                           # (..., F)
    b = tnp.matmul(x, wu)
    sg = tnp.sigmoid(a)
    h = a * sg * b
    dh = tnp.matmul(g, _t(wd))
    da = dh * b * (sg * (1.0 + a * (1.0 - sg)))                                     # silu'(a)
    db = dh * a * sg
    dx = tnp.matmul(da, _t(wg)) + tnp.matmul(db, _t(wu))
    xr = _t(_rows(x))
    return [dx, tnp.matmul(xr, _rows(da)), tnp.matmul(xr, _rows(db)), tnp.matmul(_t(_rows(h)), _rows(g))]


def attention(ins, g, attrs):
    q, k, v = ins[:3]
    mask = ins[3] if attrs["masked"] else None
    n_rep, scale = attrs["n_rep"], attrs["scale"]
    b, hkv, s_len, hd = k.shape

    def rep(t):                                                                     # (B, Hkv, S, hd) -> (B, H, S, hd)
        if n_rep == 1:
            return t
        t = tnp.broadcast_to(t[:, :, None], (b, hkv, n_rep, s_len, hd))
        return tnp.reshape(t, (b, hkv * n_rep, s_len, hd))

    def unrep(t):
        if n_rep == 1:
            return t
        return tnp.sum(tnp.reshape(t, (b, hkv, n_rep, s_len, hd)), axis=2)

    kk, vv = rep(k), rep(v)
    s = tnp.matmul(q, _t(kk)) * scale                                               # (B, H, T, S)
    if mask is not None:
        s = tnp.where(mask, s, attrs["fill"])
    e = tnp.exp(s - tnp.max(s, axis=-1, keepdims=True))
    p = e / tnp.sum(e, axis=-1, keepdims=True)
    dv = tnp.matmul(_t(p), g)                                                       # (B, H, S, hd)
    dp = tnp.matmul(g, _t(vv))                                                      # (B, H, T, S)
    ds = p * (dp - tnp.sum(dp * p, axis=-1, keepdims=True))
    if mask is not None:
        ds = tnp.where(mask, ds, 0.0)
    ds = ds * scale
    dq = tnp.matmul(ds, kk)
    dk = tnp.matmul(_t(ds), q)
    out = [dq, unrep(dk), unrep(dv)]
    return out + ([None] if mask is not None else [])


def cross_entropy(ins, g, attrs):
    logits, labels = ins
    n, vocab = logits.shape
    e = tnp.exp(logits - tnp.max(logits, axis=-1, keepdims=True))
    p = e / tnp.sum(e, axis=-1, keepdims=True)
    onehot = tnp.astype(tnp.equal(np.arange(vocab)[None, :], labels[:, None]), logits.dtype)
    return [(p - onehot) * (g / n), None]


GRADIENTS = {"rms_norm": rms_norm, "rope": rope, "swiglu": swiglu, "attention": attention,
             "cross_entropy": cross_entropy}


def grad_body(op: str, in_avals, out_aval, attrs: dict, diff) -> Graph:
    """The specialised gradient graph of ``op``: inputs (operands, g), outputs the
    cotangents of the operands where ``diff``."""
    from .._core.specialize import specialize
    b = Builder(name=f"{op}_grad")
    with b.active():
        ins = [b.new_input(a, f"in{k}") for k, a in enumerate(in_avals)]
        g = b.new_input(out_aval, "g")
        bars = GRADIENTS[op](ins, g, attrs)
        outs = [bar for bar, d in zip(bars, diff) if d]
        if any(o is None for o in outs):                   # pragma: no cover  (a pattern bug)
            raise AssertionError(f"{op}: no gradient formula for a differentiated operand")
        graph = b.finish(outs)
    return specialize(graph, list(in_avals) + [out_aval])


__all__ = ["grad_body", "GRADIENTS", "sum_to"]
