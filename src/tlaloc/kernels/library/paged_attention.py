"""Paged attention for decode (f32): one new query token per sequence, GQA.

q (batch, q_heads, head_dim); k_cache, v_cache (num_blocks, block_size,
kv_heads, head_dim); block_tables (batch, max_blocks) int32; seq_lens (batch,)
int32 (each >= 1; padding uses 1) -> out (batch, q_heads, head_dim):

    token t of sequence b lives in page block_tables[b, t // block_size], slot
    t % block_size; query head h reads kv head h // (q_heads // kv_heads);
    out[b, h] = softmax(q[b, h] . K[b, :len]^T * scale) @ V[b, :len]

One block per (kv head, sequence): the G = q_heads / kv_heads query heads that
share a kv head are done together, so each K/V row is read once. Warps split
the tokens (``unroll`` tokens per step, loads issued together) and keep an
online softmax (running max, sum, accumulator) per head; lane l holds dims
[l*E, l*E+E) with E = head_dim / 32, loaded as .v4/.v2 vectors. The warps'
partial results meet in shared memory and are combined exactly once.
"""
from __future__ import annotations

import math

import numpy as np

from ..ptx import KernelTemplate, ctaid, f32, inst, label, mem, param, place, pred, r32, r64, shared, vec
from .common import LOG2E, NEG_INF, global_ptr, offset, thread_ids, warp_allreduce_many


def _chunks(E):
    """How a lane's E contiguous floats split into vector accesses: (first, width)."""
    w = 4 if E % 4 == 0 else 2 if E % 2 == 0 else 1
    return [(i, w) for i in range(0, E, w)]


def _load(dst_regs, addr, space, guard=None):
    E = len(dst_regs)
    for i, w in _chunks(E):
        dst = dst_regs[i] if w == 1 else vec(dst_regs[i:i + w])
        inst(f"ld.{space}{'' if w == 1 else f'.v{w}'}.f32", dst, mem(addr, 4 * i), guard=guard)


def _store(src_regs, addr, space):
    for i, w in _chunks(len(src_regs)):
        src = src_regs[i] if w == 1 else vec(src_regs[i:i + w])
        inst(f"st.{space}{'' if w == 1 else f'.v{w}'}.f32", mem(addr, 4 * i), src)


def _build(k, *, batch, q_heads, kv_heads, head_dim, num_blocks, block_size, max_blocks,
           scale=None, nwarps=4, unroll=2):
    D, BS, NW, U = head_dim, block_size, nwarps, unroll
    if D % 32 or q_heads % kv_heads:
        raise ValueError(f"paged_attention: head_dim must be a multiple of 32 and q_heads of kv_heads "
                         f"(got {D}, {q_heads}, {kv_heads})")
    G, E = q_heads // kv_heads, D // 32
    c = float(np.float32((scale if scale is not None else 1.0 / math.sqrt(D)) * LOG2E))
    qp, kc, vc, bt, sl, op = (global_ptr(param("u64", n)) for n in
                              ("q", "k_cache", "v_cache", "block_tables", "seq_lens", "out"))
    t, lane, warp = thread_ids()
    hkv, b, length = r32(), r32(), r32()
    inst("mov.u32", hkv, ctaid.x)
    inst("mov.u32", b, ctaid.y)
    inst("ld.global.u32", length, mem(offset(sl, b, 4)))
    table = offset(bt, b, max_blocks * 4)
    heads0 = offset(offset(offset(qp, b, q_heads * D * 4), hkv, G * D * 4), lane, E * 4)
    q = [[f32() for _ in range(E)] for _ in range(G)]           # (G, E), pre-scaled by scale*log2(e)
    for g in range(G):
        _load(q[g], heads0 if g == 0 else _plus(heads0, g * D * 4), "global")
        for x in q[g]:
            inst("mul.rn.f32", x, x, c)
    kl, vl = offset(kc, lane, E * 4), offset(vc, lane, E * 4)   # this lane's dims
    acc = [[f32() for _ in range(E)] for _ in range(G)]
    m, l = [f32() for _ in range(G)], [f32() for _ in range(G)]
    for g in range(G):
        inst("mov.f32", m[g], NEG_INF)
        inst("mov.f32", l[g], 0.0)
        for x in acc[g]:
            inst("mov.f32", x, 0.0)
    tok, cond = r32(), pred()
    top, end = label("tokens"), label("tokens_end")
    inst("mov.u32", tok, warp)
    inst("setp.ge.u32", cond, tok, length)
    inst("bra", end, guard=cond)
    place(top)
    kv, valid = [], []
    for u in range(U):                                          # issue every load of this step first
        tu, blk, slot, page, ok = r32(), r32(), r32(), r32(), pred()
        inst("add.u32", tu, tok, u * NW)
        inst("setp.lt.u32", ok, tu, length)
        if BS & (BS - 1) == 0:
            inst("shr.u32", blk, tu, BS.bit_length() - 1)
            inst("and.b32", slot, tu, BS - 1)
        else:
            inst("div.u32", blk, tu, BS)
            inst("rem.u32", slot, tu, BS)
        inst("mov.u32", page, 0)                                # a harmless row for a token past the end
        inst("ld.global.u32", page, mem(offset(table, blk, 4)), guard=ok)
        inst("mad.lo.u32", page, page, BS, slot, guard=ok)
        inst("mad.lo.u32", page, page, kv_heads, hkv, guard=ok)   # row of (page, slot, hkv)
        kr, vr = [f32() for _ in range(E)], [f32() for _ in range(E)]
        _load(kr, offset(kl, page, D * 4), "global", guard=ok)
        _load(vr, offset(vl, page, D * 4), "global", guard=ok)
        kv.append((kr, vr))
        valid.append(ok)
    s = [[f32() for _ in range(G)] for _ in range(U)]           # (U, G) scores
    for u in range(U):
        for g in range(G):
            inst("mov.f32", s[u][g], 0.0)
            for e in range(E):
                inst("fma.rn.f32", s[u][g], q[g][e], kv[u][0][e], s[u][g], guard=valid[u])
    warp_allreduce_many([x for row in s for x in row])
    for u in range(U):
        for g in range(G):
            inst("selp.f32", s[u][g], s[u][g], NEG_INF, valid[u])
    mnew, corr, p = f32(), f32(), f32()
    for g in range(G):                                          # online softmax update
        inst("max.f32", mnew, m[g], s[0][g])
        for u in range(1, U):
            inst("max.f32", mnew, mnew, s[u][g])
        inst("sub.rn.f32", corr, m[g], mnew)
        inst("ex2.approx.f32", corr, corr)
        inst("mul.rn.f32", l[g], l[g], corr)
        for x in acc[g]:
            inst("mul.rn.f32", x, x, corr)
        for u in range(U):
            inst("sub.rn.f32", p, s[u][g], mnew)
            inst("ex2.approx.f32", p, p)
            inst("add.rn.f32", l[g], l[g], p)
            for e in range(E):
                inst("fma.rn.f32", acc[g][e], p, kv[u][1][e], acc[g][e], guard=valid[u])
        inst("mov.f32", m[g], mnew)
    inst("add.u32", tok, tok, NW * U)
    inst("setp.lt.u32", cond, tok, length)
    inst("bra", top, guard=cond)
    place(end)
    _combine(k, m, l, acc, lane, warp, b, hkv, op, G=G, E=E, D=D, NW=NW, q_heads=q_heads)


def _plus(base, nbytes):
    out = r64()
    inst("add.u64", out, base, nbytes)
    return out


def _combine(k, m, l, acc, lane, warp, b, hkv, op, *, G, E, D, NW, q_heads):
    """Warps publish (m, l, acc) per head; warp g % NW merges head g and stores it."""
    sm, sls = shared("f32", "part_max", NW * G), shared("f32", "part_sum", NW * G)
    sacc = shared("f32", "part_acc", NW * G * D, align=16)
    first, a = pred(), r32()
    inst("setp.eq.u32", first, lane, 0)
    for g in range(G):
        inst("mov.u32", a, sm)
        inst("mad.lo.u32", a, warp, 4 * G, a)
        inst("st.shared.f32", mem(a, 4 * g), m[g], guard=first)
        inst("mov.u32", a, sls)
        inst("mad.lo.u32", a, warp, 4 * G, a)
        inst("st.shared.f32", mem(a, 4 * g), l[g], guard=first)
        inst("mov.u32", a, sacc)
        inst("mad.lo.u32", a, warp, 4 * G * D, a)
        inst("mad.lo.u32", a, lane, 4 * E, a)
        _store(acc[g], _shared_at(a, 4 * g * D), "shared")
    inst("bar.sync", 0)
    out0 = offset(offset(op, b, q_heads * D * 4), hkv, G * D * 4)
    M, L, f, x = f32(), f32(), f32(), f32()
    o = [f32() for _ in range(E)]
    for g in range(G):
        skip, other = label(f"skip_head{g}"), pred()
        inst("setp.ne.u32", other, warp, g % NW)
        inst("bra", skip, guard=other)
        inst("ld.shared.f32", M, mem(sm, 4 * g))
        for w in range(1, NW):
            inst("ld.shared.f32", x, mem(sm, 4 * (w * G + g)))
            inst("max.f32", M, M, x)
        inst("mov.f32", L, 0.0)
        for e in range(E):
            inst("mov.f32", o[e], 0.0)
        part = [f32() for _ in range(E)]
        for w in range(NW):
            inst("ld.shared.f32", f, mem(sm, 4 * (w * G + g)))
            inst("sub.rn.f32", f, f, M)
            inst("ex2.approx.f32", f, f)                        # exp(m_w - M), 0 for an idle warp
            inst("ld.shared.f32", x, mem(sls, 4 * (w * G + g)))
            inst("fma.rn.f32", L, x, f, L)
            inst("mov.u32", a, sacc)
            inst("mad.lo.u32", a, lane, 4 * E, a)
            _load(part, _shared_at(a, 4 * (w * G + g) * D), "shared")
            for e in range(E):
                inst("fma.rn.f32", o[e], part[e], f, o[e])
        for e in range(E):
            inst("div.rn.f32", o[e], o[e], L)
        _store(o, offset(_plus(out0, g * D * 4), lane, E * 4), "global")
        place(skip)
    inst("ret")


def _shared_at(a, nbytes):
    if nbytes == 0:
        return a
    out = r32()
    inst("add.u32", out, a, nbytes)
    return out


F32, I32 = np.float32, np.int32


def _signature(batch, q_heads, kv_heads, head_dim, num_blocks, block_size, max_blocks, **_):
    cache = (num_blocks, block_size, kv_heads, head_dim)
    return ([("q", (batch, q_heads, head_dim), F32), ("k_cache", cache, F32), ("v_cache", cache, F32),
             ("block_tables", (batch, max_blocks), I32), ("seq_lens", (batch,), I32)],
            [("out", (batch, q_heads, head_dim), F32)])


paged_attention = KernelTemplate(
    "paged_attention", _build,
    launch=lambda batch, kv_heads, nwarps=4, **_: ((kv_heads, batch), (32 * nwarps,)),
    signature=_signature)
