"""Memory instructions: ``ld``, ``st``, ``atom``/``red`` and ``cp.async`` (see ``machine.py``
for the address spaces and their checks)."""
from __future__ import annotations

import numpy as np

from ..ptx.ir import Vec, bits, kind
from .machine import NP, STORE, SimError


def _put(m, ins, idx, v, k=0):
    m.write(ins.operands[k], ins.types[k], idx, v)


def _space(ins):
    return next((x for x in ins.mods if x in (".global", ".shared", ".param", ".local", ".const")), None)


def ld(m, ins, idx):
    dst, addr = ins.operands
    ty, space = ins.types[0], _space(ins)
    regs = dst.regs if isinstance(dst, Vec) else (dst,)
    if space == ".param":
        v = m.params[addr.base.name]
        if kind(ty) == "f":
            return m.write(dst, ty, idx, np.full(len(idx), v, NP[ty]))
        if isinstance(v, (float, np.floating)):
            raise SimError(f"{ins.loc}: parameter {addr.base.name} holds a float; read it as .f32/.f64")
        raw = np.full(len(idx), int(v) & ((1 << bits(ty)) - 1), STORE[bits(ty)])
        return m.write(dst, ty, idx, raw.view(NP[ty]))
    if space in (".local", ".const"):
        raise SimError(f"{ins.loc}: the simulator does not model {space} memory ({ins.text})")
    base = m.address(addr, idx, ins)
    size = bits(ty) // 8
    if len(regs) > 1 and (base % np.uint64(size * len(regs)) != 0).any():
        k = int(np.argmax(base % np.uint64(size * len(regs)) != 0))
        m.fail(ins, f"a {len(regs)}-vector access must be {size * len(regs)}-byte aligned", idx[k])
    for j, r in enumerate(regs):
        m.write(r, ty, idx, m.load(space, base + np.uint64(j * size), ty, idx, ins))


def st(m, ins, idx):
    addr, src = ins.operands
    ty, space = ins.types[1], _space(ins)
    if space in (".local", ".param"):
        raise SimError(f"{ins.loc}: the simulator does not model stores to {space} ({ins.text})")
    base = m.address(addr, idx, ins)
    size = bits(ty) // 8
    regs = src.regs if isinstance(src, Vec) else (src,)
    if len(regs) > 1 and (base % np.uint64(size * len(regs)) != 0).any():
        k = int(np.argmax(base % np.uint64(size * len(regs)) != 0))
        m.fail(ins, f"a {len(regs)}-vector access must be {size * len(regs)}-byte aligned", idx[k])
    for j, r in enumerate(regs):
        m.store(space, base + np.uint64(j * size), ty, idx, m.read(r, ty, idx, ins), ins)


_ATOM = {".add": lambda old, b, c: old + b, ".min": lambda old, b, c: min(old, b),
         ".max": lambda old, b, c: max(old, b), ".and": lambda old, b, c: old & b,
         ".or": lambda old, b, c: old | b, ".xor": lambda old, b, c: old ^ b, ".exch": lambda old, b, c: b,
         ".cas": lambda old, b, c: c if old == b else old,
         ".inc": lambda old, b, c: 0 if old >= b else old + 1,
         ".dec": lambda old, b, c: b if (old == 0 or old > b) else old - 1}


def atom(m, ins, idx, returns=True):
    ops = ins.operands
    k0 = 1 if returns else 0
    addr, ty, space = ops[k0], ins.types[k0 + 1], _space(ins) or ".global"
    op = next(x for x in ins.mods if x in _ATOM)
    base = m.address(addr, idx, ins)
    b = m.read(ops[k0 + 1], ty, idx, ins)
    c = m.read(ops[k0 + 2], ty, idx, ins) if len(ops) > k0 + 2 else b
    olds = np.empty(len(idx), NP[ty])
    with np.errstate(all="ignore"):
        for i in range(len(idx)):        # one thread at a time, in thread order
            one = idx[i:i + 1]
            old = m.load(space, base[i:i + 1], ty, one, ins)
            olds[i] = old[0]
            new = np.asarray(_ATOM[op](old[0], b[i], c[i]), NP[ty])
            m.store(space, base[i:i + 1], ty, one, new.reshape(1), ins)
    if returns:
        _put(m, ins, idx, olds)


def cp_async(m, ins, idx):
    if ins.has(".commit_group") or ins.has(".wait_all") or ins.has(".wait_group"):
        return      # copies complete at once in the simulator
    dst, src, size = ins.operands
    n = size.value
    if n not in (4, 8, 16):
        m.fail(ins, f"cp.async copies 4, 8 or 16 bytes, not {n}")
    sa, ga = m.address(dst, idx, ins), m.address(src, idx, ins)
    for j in range(0, n, 4):
        v = m.load(".global", ga + np.uint64(j), "b32", idx, ins)
        m.store(".shared", sa + np.uint64(j), "b32", idx, v, ins)
