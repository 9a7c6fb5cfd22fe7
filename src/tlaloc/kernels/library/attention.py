"""Softmax attention (f32), one block per (batch, head).

q, k, v (batch, heads, seq, head_dim) -> out (batch, heads, seq, head_dim):

    out[b, h] = softmax(q[b, h] @ k[b, h].T * scale  [+ causal mask]) @ v[b, h]

Each warp takes query rows ``warp, warp + nwarps, ...``. For one row it stages q
in shared memory, lanes compute the scores of keys ``lane, lane + 32, ...`` (in
log2 units, kept in shared memory), reduce max and sum over the warp, then each
lane accumulates output dims ``lane, lane + 32, ...`` over all keys. Causal rows
stop at their own position. Shared memory: nwarps * (head_dim + seq) floats.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import ArgumentError
from ..ptx import KernelTemplate, ctaid, f32, inst, label, mem, param, place, pred, r32, shared
from .common import FULL, LOG2E, NEG_INF, global_ptr, offset, thread_ids, warp_allreduce


def _loop(counter, start, stop, step, body):
    """``for counter in range(start, stop, step): body()`` (``stop`` a register or int)."""
    top, end, cond = label("loop"), label("end"), pred()
    inst("mov.u32", counter, start)
    inst("setp.ge.u32", cond, counter, stop)
    inst("bra", end, guard=cond)
    place(top)
    body()
    inst("add.u32", counter, counter, step)
    inst("setp.lt.u32", cond, counter, stop)
    inst("bra", top, guard=cond)
    place(end)


def _build(k, *, batch, heads, seq, head_dim, causal=False, scale=None, nwarps=4):
    D, S, NW = head_dim, seq, nwarps
    if NW * (D + S) * 4 > 48 * 1024:
        raise ArgumentError(f"attention: {NW} warps x (head_dim {D} + seq {S}) floats exceed the 48 KiB of "
                            f"static shared memory; use fewer warps or paged attention")
    E = -(-D // 32)                                             # output dims per lane
    c = float(np.float32((scale if scale is not None else 1.0 / math.sqrt(D)) * LOG2E))
    qp, kp, vp, op = (global_ptr(param("u64", n)) for n in ("q", "k", "v", "out"))
    qs, ps = shared("f32", "q_row", NW * D), shared("f32", "probs", NW * S)
    t, lane, warp = thread_ids()
    bh = r32()
    inst("mov.u32", bh, ctaid.x)                                # b * heads + h
    qb, kb, vb, ob = (offset(p, bh, S * D * 4) for p in (qp, kp, vp, op))
    my_q, my_p = r32(), r32()                                   # this warp's shared rows
    inst("mov.u32", my_q, qs)
    inst("mad.lo.u32", my_q, warp, D * 4, my_q)
    inst("mov.u32", my_p, ps)
    inst("mad.lo.u32", my_p, warp, S * 4, my_p)
    row, j, kend = r32(), r32(), r32()
    dims = []                                                   # (dim register, in-range predicate)
    for e in range(E):
        d, ok = r32(), pred()
        inst("add.u32", d, lane, 32 * e)
        inst("setp.lt.u32", ok, d, D)
        dims.append((d, ok))

    def one_row():
        qrow = offset(qb, row, D * 4)
        x = f32()
        for d, ok in dims:                                      # stage q[row] in shared memory
            inst("ld.global.f32", x, mem(offset(qrow, d, 4)), guard=ok)
            a = r32()
            inst("mad.lo.u32", a, d, 4, my_q)
            inst("st.shared.f32", mem(a), x, guard=ok)
        inst("bar.warp.sync", FULL)
        if causal:
            inst("add.u32", kend, row, 1)
        else:
            inst("mov.u32", kend, S)
        m, s, acc, kv, qv, pa = f32(), f32(), f32(), f32(), f32(), r32()
        inst("mov.f32", m, NEG_INF)
        krow = r32()

        def score():                                            # key j: q . k[j] in log2 units
            inst("mov.f32", acc, 0.0)
            kj = offset(kb, j, D * 4)
            for dd in range(D):
                inst("ld.shared.f32", qv, mem(my_q, 4 * dd))
                inst("ld.global.f32", kv, mem(kj, 4 * dd))
                inst("fma.rn.f32", acc, qv, kv, acc)
            inst("mul.rn.f32", acc, acc, c)
            inst("mad.lo.u32", pa, j, 4, my_p)
            inst("st.shared.f32", mem(pa), acc)
            inst("max.f32", m, m, acc)
        _loop(j, lane, kend, 32, score)
        warp_allreduce(m, "max")
        inst("mov.f32", s, 0.0)

        def expo():
            inst("mad.lo.u32", pa, j, 4, my_p)
            inst("ld.shared.f32", acc, mem(pa))
            inst("sub.rn.f32", acc, acc, m)
            inst("ex2.approx.f32", acc, acc)
            inst("st.shared.f32", mem(pa), acc)
            inst("add.rn.f32", s, s, acc)
        _loop(j, lane, kend, 32, expo)
        warp_allreduce(s, "add")
        inst("bar.warp.sync", FULL)
        outs = [f32() for _ in dims]
        for o in outs:
            inst("mov.f32", o, 0.0)
        vcol = [offset(vb, d, 4) for d, _ in dims]

        def accumulate():
            inst("mad.lo.u32", pa, j, 4, my_p)
            inst("ld.shared.f32", qv, mem(pa))
            inst("mul.lo.u32", krow, j, D * 4)
            for (d, ok), o, vc in zip(dims, outs, vcol):
                a = offset(vc, krow, 1)
                inst("ld.global.f32", kv, mem(a), guard=ok)
                inst("fma.rn.f32", o, qv, kv, o, guard=ok)
        _loop(j, 0, kend, 1, accumulate)
        orow = offset(ob, row, D * 4)
        for (d, ok), o in zip(dims, outs):
            inst("div.rn.f32", o, o, s, guard=ok)
            inst("st.global.f32", mem(offset(orow, d, 4)), o, guard=ok)
        inst("bar.warp.sync", FULL)                             # shared rows are reused next
    _loop(row, warp, S, NW, one_row)
    inst("ret")


F32 = np.float32
attention = KernelTemplate(
    "attention", _build,
    launch=lambda batch, heads, seq, head_dim, nwarps=4, **_: ((batch * heads,), (32 * nwarps,)),
    signature=lambda batch, heads, seq, head_dim, **_: (
        [(n, (batch, heads, seq, head_dim), F32) for n in ("q", "k", "v")],
        [("out", (batch, heads, seq, head_dim), F32)]))
