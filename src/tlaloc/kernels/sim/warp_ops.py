"""Warp instructions: ``shfl.sync``, ``vote.sync``, ``redux.sync`` and the member-mask
convergence check they and ``bar.warp.sync`` share."""
from __future__ import annotations

import numpy as np


def _val(m, ins, k, idx):
    return m.read(ins.operands[k], ins.types[k], idx, ins)


def _put(m, ins, idx, v, k=0):
    m.write(ins.operands[k], ins.types[k], idx, v)


def converged(m, ins, idx, mask):
    """Raise unless every existing lane named by ``mask`` (per thread) executes now."""
    warp_key = m.block_of[idx] * 64 + m.warp[idx]
    here = np.zeros(int(warp_key.max()) + 1, np.uint64)
    np.bitwise_or.at(here, warp_key, (np.uint64(1) << m.lane[idx].astype(np.uint64)))
    exists = np.uint64(0xFFFFFFFF)
    nt = m.nthreads
    last_warp = (nt - 1) // 32
    partial = np.uint64((1 << (nt - 32 * last_warp)) - 1)
    want = mask.astype(np.uint64) & np.where(m.warp[idx] == last_warp, partial, exists)
    have = here[warp_key]
    missing = want & ~have
    if missing.any():
        k = int(np.argmax(missing != 0))
        lanes = [i for i in range(32) if int(missing[k]) >> i & 1]
        tid = int(idx[k])
        mine = (m.block_of == m.block_of[tid]) & (m.warp == m.warp[tid])
        where = {int(m.lane[t]): ("exited" if m.done[t] else str(m.program[int(m.pc[t])].loc)
                                  if m.pc[t] < len(m.program) else "the end")
                 for t in np.nonzero(mine)[0] if int(m.lane[t]) in lanes}
        m.fail(ins, f"lanes {lanes} of the member mask are not converged here "
                    f"(they are at {sorted(set(where.values()))})", tid)
    if ((mask.astype(np.uint64) >> m.lane[idx].astype(np.uint64)) & np.uint64(1) == 0).any():
        k = int(np.argmax(((mask.astype(np.uint64) >> m.lane[idx].astype(np.uint64)) & np.uint64(1)) == 0))
        m.fail(ins, "a thread executes a .sync warp instruction whose member mask excludes its own lane", idx[k])
    return warp_key


def shfl(m, ins, idx):
    a = _val(m, ins, 1, idx)
    b = _val(m, ins, 2, idx).astype(np.int64) & 31
    c = _val(m, ins, 3, idx).astype(np.int64)
    mask = _val(m, ins, 4, idx)
    converged(m, ins, idx, mask)
    lane = m.lane[idx].astype(np.int64)
    cval, seg = c & 31, (c >> 8) & 31
    min_lane = lane & seg
    max_lane = min_lane | (cval & ~seg)
    mode = next(x for x in ins.mods if x in (".up", ".down", ".bfly", ".idx"))
    if mode == ".up":
        j = lane - b
        ok = j >= max_lane
    else:
        j = {".down": lane + b, ".bfly": lane ^ b, ".idx": min_lane | (b & ~seg)}[mode]
        ok = j <= max_lane
    j = np.where(ok, j, lane)
    src = idx - lane + j                        # the source lane's thread
    pos = np.full(len(m.pc), -1, np.int64)
    pos[idx] = np.arange(len(idx))
    where = pos[src]
    if (where < 0).any():
        k = int(np.argmax(where < 0))
        m.fail(ins, f"reads lane {int(j[k])}, which does not execute this shfl", idx[k])
    _put(m, ins, idx, a[where])


def vote(m, ins, idx):
    a = _val(m, ins, 1, idx).astype(bool)
    mask = _val(m, ins, 2, idx)
    key = converged(m, ins, idx, mask)
    ballot = np.zeros(int(key.max()) + 1, np.uint64)
    np.bitwise_or.at(ballot, key[a], np.uint64(1) << m.lane[idx][a].astype(np.uint64))
    bal = ballot[key] & mask.astype(np.uint64)
    mode = next(x for x in ins.mods if x in (".all", ".any", ".uni", ".ballot"))
    members = mask.astype(np.uint64) & _lanes_here(m, idx, key)
    if mode == ".ballot":
        return _put(m, ins, idx, bal.astype(np.uint32))
    r = {".all": bal == members, ".any": bal != 0, ".uni": (bal == members) | (bal == 0)}[mode]
    _put(m, ins, idx, r)


def _lanes_here(m, idx, key):
    here = np.zeros(int(key.max()) + 1, np.uint64)
    np.bitwise_or.at(here, key, np.uint64(1) << m.lane[idx].astype(np.uint64))
    return here[key]


def redux(m, ins, idx):
    a = _val(m, ins, 1, idx)
    mask = _val(m, ins, 2, idx)
    key = converged(m, ins, idx, mask)
    op = next(x for x in ins.mods if x in (".add", ".min", ".max", ".and", ".or", ".xor"))
    ufunc = {".add": np.add, ".min": np.minimum, ".max": np.maximum, ".and": np.bitwise_and,
             ".or": np.bitwise_or, ".xor": np.bitwise_xor}[op]
    out = np.empty_like(a)
    for k in np.unique(key):
        sel = key == k
        with np.errstate(all="ignore"):
            out[sel] = ufunc.reduce(a[sel])
    _put(m, ins, idx, out)
