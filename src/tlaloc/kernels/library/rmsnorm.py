"""RMSNorm forward and backward (f32), one block per row.

forward:  x (rows, dim), w (dim,) -> y (rows, dim), rstd (rows,)
          rstd = 1 / sqrt(mean(x**2) + eps);  y = x * rstd * w
backward: dx (rows, dim) = rstd * g*w - x * (rstd**3 / dim) * sum(g*w*x)      [rmsnorm_bwd_dx]
          dw (dim,) = sum over rows of g * x * rstd                           [rmsnorm_bwd_dw]
"""
from __future__ import annotations

import numpy as np

from ..ptx import KernelTemplate, f32, inst, mem, param, pred, r32, shared, label, place, ctaid, tid
from .common import block_allreduce, block_threads, global_ptr, offset, strided, tail_pred, thread_ids


def _row_sum(accumulate, t, lane, warp, dim, T):
    """The f32 sum over one row of ``dim`` by a block of ``T`` threads (``t``: this thread).
    ``accumulate(step, guard, acc)`` adds this thread's term of unrolled ``step`` into ``acc``
    (``guard``: the tail predicate on a step some threads fall past, else None) and returns what
    the step keeps for later. Returns (the block-wide sum, the kept values in step order)."""
    tail = tail_pred(t, dim, T)
    acc = f32()
    inst("mov.f32", acc, 0.0)
    kept = [accumulate(step, tail if masked else None, acc) for step, masked in strided(dim, T)]
    block_allreduce(acc, shared("f32", "partial", T // 32), lane, warp, T // 32)
    return acc, kept


def _fwd(k, *, rows, dim, eps=1e-6, threads=None):
    T = threads or block_threads(dim)
    x, w, y, rs = (global_ptr(param("u64", n)) for n in ("x", "w", "y", "rstd"))
    t, lane, warp = thread_ids()
    row = r32()
    inst("mov.u32", row, ctaid.x)
    xr, yr = offset(x, row, dim * 4), offset(y, row, dim * 4)      # (dim,) rows
    xt, yt, wt = offset(xr, t, 4), offset(yr, t, 4), offset(w, t, 4)

    def square(step, g, acc):                                   # acc += x * x
        v = f32()
        inst("ld.global.f32", v, mem(xt, 4 * step * T), guard=g)
        inst("fma.rn.f32", acc, v, v, acc, guard=g)
        return v, g
    acc, vals = _row_sum(square, t, lane, warp, dim, T)
    r, s = f32(), f32()
    inst("div.rn.f32", acc, acc, float(dim))
    inst("add.rn.f32", acc, acc, float(np.float32(eps)))
    inst("sqrt.rn.f32", s, acc)
    inst("rcp.rn.f32", r, s)
    for step, (v, g) in enumerate(vals):
        wv = f32()
        inst("ld.global.f32", wv, mem(wt, 4 * step * T), guard=g)
        inst("mul.rn.f32", v, v, r, guard=g)
        inst("mul.rn.f32", v, v, wv, guard=g)
        inst("st.global.f32", mem(yt, 4 * step * T), v, guard=g)
    first = pred()
    inst("setp.eq.u32", first, t, 0)
    inst("st.global.f32", mem(offset(rs, row, 4)), r, guard=first)
    inst("ret")


def _bwd_dx(k, *, rows, dim, threads=None):
    T = threads or block_threads(dim)
    x, w, rs, gp, dx = (global_ptr(param("u64", n)) for n in ("x", "w", "rstd", "g", "dx"))
    t, lane, warp = thread_ids()
    row = r32()
    inst("mov.u32", row, ctaid.x)
    xt = offset(offset(x, row, dim * 4), t, 4)
    gt = offset(offset(gp, row, dim * 4), t, 4)
    dxt = offset(offset(dx, row, dim * 4), t, 4)
    wt = offset(w, t, 4)

    def gw_dot_x(step, g, dot):                                 # dot += (g * w) * x
        xv, gv, wv = f32(), f32(), f32()
        inst("ld.global.f32", xv, mem(xt, 4 * step * T), guard=g)
        inst("ld.global.f32", gv, mem(gt, 4 * step * T), guard=g)
        inst("ld.global.f32", wv, mem(wt, 4 * step * T), guard=g)
        inst("mul.rn.f32", gv, gv, wv, guard=g)                 # gw = g * w
        inst("fma.rn.f32", dot, gv, xv, dot, guard=g)
        return xv, gv, g
    dot, vals = _row_sum(gw_dot_x, t, lane, warp, dim, T)
    r, c = f32(), f32()
    inst("ld.global.f32", r, mem(offset(rs, row, 4)))
    inst("mul.rn.f32", c, r, r)
    inst("mul.rn.f32", c, c, r)                                 # rstd**3
    inst("mul.rn.f32", c, c, dot)
    inst("div.rn.f32", c, c, float(dim))
    for step, (xv, gv, g) in enumerate(vals):
        inst("mul.rn.f32", gv, gv, r, guard=g)
        inst("mul.rn.f32", xv, xv, c, guard=g)
        inst("sub.rn.f32", gv, gv, xv, guard=g)
        inst("st.global.f32", mem(dxt, 4 * step * T), gv, guard=g)
    inst("ret")


def _bwd_dw(k, *, rows, dim, threads=128):
    x, rs, gp, dw = (global_ptr(param("u64", n)) for n in ("x", "rstd", "g", "dw"))
    col, i, t = r32(), r32(), r32()
    inst("mov.u32", t, tid.x)
    inst("mov.u32", col, ctaid.x)
    inst("mad.lo.u32", col, col, threads, t)                    # column of this thread
    out, loop, done = pred(), label("loop"), label("done")
    inst("setp.ge.u32", out, col, dim)
    inst("bra", done, guard=out)
    xp, gp2, rp = offset(x, col, 4), offset(gp, col, 4), rs
    acc, xv, gv, rv = f32(), f32(), f32(), f32()
    inst("mov.f32", acc, 0.0)
    inst("mov.u32", i, 0)
    place(loop)                                                 # for i in range(rows)
    inst("ld.global.f32", xv, mem(xp))
    inst("ld.global.f32", gv, mem(gp2))
    inst("ld.global.f32", rv, mem(rp))
    inst("mul.rn.f32", gv, gv, xv)
    inst("fma.rn.f32", acc, gv, rv, acc)
    inst("add.u64", xp, xp, dim * 4)
    inst("add.u64", gp2, gp2, dim * 4)
    inst("add.u64", rp, rp, 4)
    inst("add.u32", i, i, 1)
    more = pred()
    inst("setp.lt.u32", more, i, rows)
    inst("bra", loop, guard=more)
    inst("st.global.f32", mem(offset(dw, col, 4)), acc)
    place(done)
    inst("ret")


def _rows_launch(rows, dim, threads=None, **_):
    return (rows,), (threads or block_threads(dim),)


F32 = np.float32
rmsnorm_fwd = KernelTemplate(
    "rmsnorm_fwd", _fwd, launch=_rows_launch,
    signature=lambda rows, dim, **_: ([("x", (rows, dim), F32), ("w", (dim,), F32)],
                                      [("y", (rows, dim), F32), ("rstd", (rows,), F32)]))
rmsnorm_bwd_dx = KernelTemplate(
    "rmsnorm_bwd_dx", _bwd_dx, launch=_rows_launch,
    signature=lambda rows, dim, **_: ([("x", (rows, dim), F32), ("w", (dim,), F32), ("rstd", (rows,), F32),
                                       ("g", (rows, dim), F32)], [("dx", (rows, dim), F32)]))
rmsnorm_bwd_dw = KernelTemplate(
    "rmsnorm_bwd_dw", _bwd_dw, launch=lambda rows, dim, threads=128: ((-(-dim // threads),), (threads,)),
    signature=lambda rows, dim, **_: ([("x", (rows, dim), F32), ("rstd", (rows,), F32), ("g", (rows, dim), F32)],
                                      [("dw", (dim,), F32)]))
