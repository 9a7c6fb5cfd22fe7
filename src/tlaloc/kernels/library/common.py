"""Instruction sequences the library kernels share: pointers, lanes, reductions.

Each helper emits instructions into the kernel being built (``ptx.current()``)
and returns the registers it made. Reductions are deterministic: every thread
combines the per-warp partials in the same order, so all threads of a block
hold the same bits.
"""
from __future__ import annotations

import math

from ..ptx import f32, inst, mem, pred, r32, r64, tid

FULL = 0xFFFFFFFF
LOG2E = math.log2(math.e)
LN2 = math.log(2.0)
NEG_INF = float("-inf")


def global_ptr(p):
    """The global address held by ``.u64`` parameter ``p``."""
    a = r64()
    inst("ld.param.u64", a, mem(p))
    inst("cvta.to.global.u64", a, a)
    return a


def offset(base, index, scale: int):
    """``base + index * scale`` (``index`` a u32 register, ``scale`` in bytes)."""
    t, out = r64(), r64()
    inst("mul.wide.u32", t, index, scale)
    inst("add.u64", out, base, t)
    return out


def thread_ids():
    """``(t, lane, warp)``: ``%tid.x``, ``t % 32`` and ``t / 32``."""
    t, lane, warp = r32(), r32(), r32()
    inst("mov.u32", t, tid.x)
    inst("and.b32", lane, t, 31)
    inst("shr.u32", warp, t, 5)
    return t, lane, warp


def const_f32(value: float):
    r = f32()
    inst("mov.f32", r, float(value))
    return r


def warp_allreduce(v, op: str = "add"):
    """Butterfly-reduce f32 ``v`` over the warp, in place: every lane gets the result."""
    t = f32()
    for delta in (16, 8, 4, 2, 1):
        inst("shfl.sync.bfly.b32", t, v, delta, 31, FULL)
        inst("add.rn.f32" if op == "add" else "max.f32", v, v, t)
    return v


def warp_allreduce_many(values, op: str = "add"):
    """``warp_allreduce`` of several registers, interleaved (independent shuffles overlap)."""
    tmps = [f32() for _ in values]
    for delta in (16, 8, 4, 2, 1):
        for v, t in zip(values, tmps):
            inst("shfl.sync.bfly.b32", t, v, delta, 31, FULL)
        for v, t in zip(values, tmps):
            inst("add.rn.f32" if op == "add" else "max.f32", v, v, t)
    return values


def block_allreduce(v, scratch, lane, warp, nwarps: int, op: str = "add"):
    """Reduce f32 ``v`` over the block, in place (``scratch``: a shared f32[nwarps])."""
    warp_allreduce(v, op)
    if nwarps == 1:
        return v
    first, addr, t = pred(), r32(), f32()
    inst("setp.eq.u32", first, lane, 0)
    inst("mov.u32", addr, scratch)
    inst("mad.lo.u32", addr, warp, 4, addr)
    inst("st.shared.f32", mem(addr), v, guard=first)
    inst("bar.sync", 0)
    inst("ld.shared.f32", v, mem(scratch))
    for w in range(1, nwarps):
        inst("ld.shared.f32", t, mem(scratch, 4 * w))
        inst("add.rn.f32" if op == "add" else "max.f32", v, v, t)
    inst("bar.sync", 0)      # scratch may be reused after this
    return v


def strided(count: int, threads: int):
    """The unrolled steps of ``for i in range(t, count, threads)``: ``(k, masked)``
    pairs, ``masked`` when some threads fall past ``count`` on step ``k``."""
    steps = -(-count // threads)
    return [(k, (k + 1) * threads > count) for k in range(steps)]


def tail_pred(t, count: int, threads: int):
    """A predicate true where thread ``t``'s last strided index is below ``count``."""
    p = pred()
    last = (-(-count // threads) - 1) * threads
    inst("setp.lt.u32", p, t, count - last)
    return p


def block_threads(n: int, cap: int = 256) -> int:
    """A block size for ``n`` items: a multiple of 32, at most ``cap``."""
    return max(32, min(cap, -(-n // 32) * 32))
