"""Softmax cross-entropy over a vocabulary (f32), one block per row.

forward:  logits (rows, vocab), labels (rows,) int32 -> loss (rows,), lse (rows,)
          lse = log(sum(exp(logits))); loss = lse - logits[label]; a negative label
          (ignore_index, e.g. -100) gives loss 0 (lse is still written)
backward: logits, labels, lse, g (rows,) -> dlogits (rows, vocab)
          dlogits = g * (exp(logits - lse) - onehot(label)); 0 for ignored rows

Threads stride over the vocabulary (a loop, so any vocab size works); the
exponentials are ``ex2.approx`` of log2(e)-scaled differences.
"""
from __future__ import annotations

import numpy as np

from ..ptx import KernelTemplate, ctaid, f32, inst, label, mem, param, place, pred, r32, shared
from .common import LN2, LOG2E, NEG_INF, block_allreduce, global_ptr, offset, thread_ids


def _strided_loop(t, vocab, threads, row_ptrs, body):
    """``for j in range(t, vocab, threads): body(j, ptrs)`` where ``ptrs`` are the row
    pointers advanced to element j."""
    j, more = r32(), pred()
    ptrs = [offset(p, t, 4) for p in row_ptrs]
    top, end = label("loop"), label("end")
    inst("mov.u32", j, t)
    inst("setp.ge.u32", more, j, vocab)
    inst("bra", end, guard=more)
    place(top)
    body(j, ptrs)
    for p in ptrs:
        inst("add.u64", p, p, 4 * threads)
    inst("add.u32", j, j, threads)
    inst("setp.lt.u32", more, j, vocab)
    inst("bra", top, guard=more)
    place(end)


def _fwd(k, *, rows, vocab, threads=256):
    z, lab, loss, lse = (global_ptr(param("u64", n)) for n in ("logits", "labels", "loss", "lse"))
    t, lane, warp = thread_ids()
    row, y = r32(), r32()
    inst("mov.u32", row, ctaid.x)
    zr = offset(z, row, vocab * 4)
    scratch = shared("f32", "partial", threads // 32)
    m, v = f32(), f32()
    inst("mov.f32", m, NEG_INF)
    _strided_loop(t, vocab, threads, [zr], lambda j, p: (inst("ld.global.f32", v, mem(p[0])),
                                                        inst("max.f32", m, m, v)))
    block_allreduce(m, scratch, lane, warp, threads // 32, op="max")
    s, e = f32(), f32()
    inst("mov.f32", s, 0.0)

    def add_exp(j, p):
        inst("ld.global.f32", v, mem(p[0]))
        inst("sub.rn.f32", e, v, m)
        inst("mul.rn.f32", e, e, LOG2E)
        inst("ex2.approx.f32", e, e)
        inst("add.rn.f32", s, s, e)
    _strided_loop(t, vocab, threads, [zr], add_exp)
    block_allreduce(s, scratch, lane, warp, threads // 32)
    out, first, ignored, zy = f32(), pred(), pred(), f32()
    inst("lg2.approx.f32", s, s)
    inst("fma.rn.f32", out, s, LN2, m)                         # lse = m + ln(sum)
    inst("setp.eq.u32", first, t, 0)
    inst("ld.global.u32", y, mem(offset(lab, row, 4)))
    inst("setp.lt.s32", ignored, y, 0)
    inst("mov.f32", zy, 0.0)
    inst("st.global.f32", mem(offset(lse, row, 4)), out, guard=first)
    inst("ld.global.f32", zy, mem(offset(zr, y, 4)), guard=~ignored)
    inst("sub.rn.f32", zy, out, zy)
    inst("selp.f32", zy, 0.0, zy, ignored)
    inst("st.global.f32", mem(offset(loss, row, 4)), zy, guard=first)
    inst("ret")


def _bwd(k, *, rows, vocab, threads=256):
    z, lab, lse_p, g_p, dz = (global_ptr(param("u64", n)) for n in ("logits", "labels", "lse", "g", "dlogits"))
    t, _, _ = thread_ids()
    row, y = r32(), r32()
    inst("mov.u32", row, ctaid.x)
    lse, g, ignored = f32(), f32(), pred()
    inst("ld.global.f32", lse, mem(offset(lse_p, row, 4)))
    inst("ld.global.f32", g, mem(offset(g_p, row, 4)))
    inst("ld.global.u32", y, mem(offset(lab, row, 4)))
    inst("setp.lt.s32", ignored, y, 0)
    inst("selp.f32", g, 0.0, g, ignored)
    v, hit = f32(), pred()

    def grad(j, p):
        inst("ld.global.f32", v, mem(p[0]))
        inst("sub.rn.f32", v, v, lse)
        inst("mul.rn.f32", v, v, LOG2E)
        inst("ex2.approx.f32", v, v)                            # softmax
        inst("setp.eq.u32", hit, j, y)
        inst("sub.rn.f32", v, v, 1.0, guard=hit)
        inst("mul.rn.f32", v, v, g)
        inst("st.global.f32", mem(p[1]), v)
    _strided_loop(t, vocab, threads, [offset(z, row, vocab * 4), offset(dz, row, vocab * 4)], grad)
    inst("ret")


F32, I32 = np.float32, np.int32
cross_entropy_fwd = KernelTemplate(
    "cross_entropy_fwd", _fwd, launch=lambda rows, vocab, threads=256: ((rows,), (threads,)),
    signature=lambda rows, vocab, **_: ([("logits", (rows, vocab), F32), ("labels", (rows,), I32)],
                                        [("loss", (rows,), F32), ("lse", (rows,), F32)]))
cross_entropy_bwd = KernelTemplate(
    "cross_entropy_bwd", _bwd, launch=lambda rows, vocab, threads=256: ((rows,), (threads,)),
    signature=lambda rows, vocab, **_: ([("logits", (rows, vocab), F32), ("labels", (rows,), I32),
                                         ("lse", (rows,), F32), ("g", (rows,), F32)],
                                        [("dlogits", (rows, vocab), F32)]))
