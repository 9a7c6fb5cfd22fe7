"""Rotary position embedding (f32, the half-split "NeoX/Llama" layout).

x (tokens, heads, dim), cos (max_pos, dim/2), sin (max_pos, dim/2),
positions (tokens,) int32 -> out (tokens, heads, dim):

    c, s = cos[positions[t]], sin[positions[t]]          # (dim/2,)
    out[t, h, :half] = x1 * c - x2 * s                   # x1 = x[t, h, :half]
    out[t, h, half:] = x2 * c + x1 * s                   # x2 = x[t, h, half:]

One block per (token, head) (grid (tokens, heads)); thread i < dim/2 rotates
pair i. Every operation is one rounded f32 multiply or add, so the result is
bit-identical to NumPy's float32 evaluation of the same formula.
"""
from __future__ import annotations

import numpy as np

from ..ptx import KernelTemplate, ctaid, f32, inst, label, mem, param, place, pred, r32, tid
from .common import block_threads, global_ptr, offset


def _build(k, *, tokens, heads, dim, max_pos):
    if dim % 2:
        raise ValueError(f"rope: dim must be even, got {dim}")
    half = dim // 2
    x, cs, sn, pos, out = (global_ptr(param("u64", n)) for n in ("x", "cos", "sin", "positions", "out"))
    i, t, h, row, p = r32(), r32(), r32(), r32(), r32()
    inst("mov.u32", i, tid.x)
    done, past = label("done"), pred()
    inst("setp.ge.u32", past, i, half)
    inst("bra", done, guard=past)
    inst("mov.u32", t, ctaid.x)
    inst("mov.u32", h, ctaid.y)
    inst("mad.lo.u32", row, t, heads, h)                        # row = t * heads + h
    inst("ld.global.u32", p, mem(offset(pos, t, 4)))
    inst("mad.lo.u32", p, p, half, i)                           # p = positions[t] * half + i
    c, s, x1, x2, a, b = (f32() for _ in range(6))
    inst("ld.global.f32", c, mem(offset(cs, p, 4)))
    inst("ld.global.f32", s, mem(offset(sn, p, 4)))
    xi = offset(offset(x, row, dim * 4), i, 4)
    oi = offset(offset(out, row, dim * 4), i, 4)
    inst("ld.global.f32", x1, mem(xi))
    inst("ld.global.f32", x2, mem(xi, 4 * half))
    inst("mul.rn.f32", a, x1, c)
    inst("mul.rn.f32", b, x2, s)
    inst("sub.rn.f32", a, a, b)
    inst("st.global.f32", mem(oi), a)
    inst("mul.rn.f32", a, x2, c)
    inst("mul.rn.f32", b, x1, s)
    inst("add.rn.f32", a, a, b)
    inst("st.global.f32", mem(oi, 4 * half), a)
    place(done)
    inst("ret")


F32 = np.float32
rope = KernelTemplate(
    "rope", _build,
    launch=lambda tokens, heads, dim, max_pos: ((tokens, heads), (block_threads(dim // 2, 1024),)),
    signature=lambda tokens, heads, dim, max_pos: (
        [("x", (tokens, heads, dim), F32), ("cos", (max_pos, dim // 2), F32), ("sin", (max_pos, dim // 2), F32),
         ("positions", (tokens,), np.int32)], [("out", (tokens, heads, dim), F32)]))
