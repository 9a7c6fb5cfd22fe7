"""The simulated GPU: threads, warps, blocks, memories and the scheduler.

Every thread of the whole grid is one row of NumPy arrays (registers, program
counter); an instruction runs at once for all threads that are at it. The
scheduler always runs the lowest program counter among runnable threads
(min-PC), which makes diverged threads of a structured program reconverge
where real hardware does. ``bar.sync`` parks threads until every live thread of
their block has arrived; ``shfl.sync``/``vote.sync``/``redux.sync`` check that
every lane of their member mask executes them together (otherwise the program
is wrong, and ``SimError`` says which lanes were missing and where they were).

Addresses: global buffer ``k`` lives at ``(k + 1) << 40``; a load or store
outside every buffer, or misaligned, raises ``SimError`` naming the buffer, the
offset, the thread and the user's line. Shared arrays live at ``0x100`` and up
in each block's own window. Registers start undefined: reading one before any
write (in a thread that executes the read) raises ``SimError``.
"""
from __future__ import annotations

import numpy as np

from ...errors import TlalocError
from ..ptx.ir import Instruction, Kernel, Label, Mem, Not, Param, Place, Reg, Shared, Special, Imm, bits, kind

GLOBAL_SHIFT = 40
SHARED_BASE = 0x100
NP = {"u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
      "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
      "b8": np.uint8, "b16": np.uint16, "b32": np.uint32, "b64": np.uint64,
      "f16": np.float16, "f32": np.float32, "f64": np.float64, "pred": np.bool_}
STORE = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64, 1: np.bool_}


class SimError(TlalocError, RuntimeError):
    """The simulated kernel did something a GPU would not define (an access out of
    bounds, a read of an unwritten register, a shuffle with absent lanes, a
    deadlocked barrier) or something the simulator does not model (named)."""


class Machine:
    """One launch of ``kernel`` over ``grid`` x ``block`` with ``args`` bound to its params."""

    def __init__(self, kernel: Kernel, grid, block, args, max_steps: int = 5_000_000):
        self.kernel = kernel
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.block = tuple(block) + (1,) * (3 - len(block))
        nb = int(np.prod(self.grid))
        nt = int(np.prod(self.block))
        if nt > 1024 or nt < 1:
            raise SimError(f"a block of {self.block} threads is not launchable (1..1024 threads)")
        if kernel.maxntid is not None and nt > int(np.prod(kernel.maxntid)):
            raise SimError(f"block {self.block} exceeds the kernel's .maxntid {kernel.maxntid}")
        self.nblocks, self.nthreads = nb, nt
        n = nb * nt
        t = np.arange(n)
        self.block_of, local = t // nt, t % nt
        bx, by, _ = self.block
        gx, gy, _ = self.grid
        self.specials = {
            "%tid.x": local % bx, "%tid.y": (local // bx) % by, "%tid.z": local // (bx * by),
            "%ntid.x": np.full(n, bx), "%ntid.y": np.full(n, by), "%ntid.z": np.full(n, self.block[2]),
            "%ctaid.x": self.block_of % gx, "%ctaid.y": (self.block_of // gx) % gy,
            "%ctaid.z": self.block_of // (gx * gy), "%nctaid.x": np.full(n, gx), "%nctaid.y": np.full(n, gy),
            "%nctaid.z": np.full(n, self.grid[2]), "%laneid": local % 32, "%warpid": local // 32,
            "%nwarpid": np.full(n, -(-nt // 32)), "%smid": np.zeros(n),
        }
        self.lane, self.warp = local % 32, local // 32
        self.regs = {r.name: np.zeros(n, STORE[bits(r.ty)]) for rs in kernel.regs.values() for r in rs}
        self.written = {name: np.zeros(n, bool) for name in self.regs}
        self.shared_addr, off = {}, SHARED_BASE
        for s in kernel.shared:
            off = -(-off // s.align) * s.align
            self.shared_addr[s.name] = off
            off += s.nbytes
        self.shared = np.zeros((nb, -(-off // 16) * 16), np.uint8)
        self.shared_end = off
        self.buffers: list = []       # (name, uint8 view)
        self.params = self._bind(args)
        self.program, self.targets = [], {}
        for item in kernel.body:
            if isinstance(item, Place):
                self.targets[item.label.name] = len(self.program)
            else:
                self.program.append(item)
        self.pc = np.zeros(n, np.int64)
        self.done = np.zeros(n, bool)
        self.waiting = np.zeros(n, bool)
        self.barrier = np.full(n, -1, np.int64)      # the barrier id a waiting thread waits at
        self.max_steps = max_steps
        self.steps = 0

    # -- arguments -------------------------------------------------------------------------
    def _bind(self, args):
        params = self.kernel.params
        if len(args) != len(params):
            raise SimError(f"kernel `{self.kernel.name}` takes {len(params)} arguments "
                           f"({', '.join(p.name for p in params)}), got {len(args)}")
        values = {}
        for p, a in zip(params, args):
            if isinstance(a, np.ndarray):
                if p.ty not in ("u64", "b64", "s64"):
                    raise SimError(f"parameter {p.name} is .{p.ty}; only .u64 parameters take arrays")
                if not a.flags.c_contiguous:
                    raise SimError(f"argument for {p.name} must be C-contiguous")
                self.buffers.append((p.name, a.reshape(-1).view(np.uint8)))
                values[p.name] = len(self.buffers) << GLOBAL_SHIFT
            else:
                values[p.name] = a
        return values

    # -- running ---------------------------------------------------------------------------
    def run(self):
        from .semantics import HANDLERS, execute_control
        big = np.iinfo(np.int64).max
        nprog = len(self.program)
        while True:
            runnable = ~(self.done | self.waiting)
            if not runnable.any():
                if self.waiting.any():
                    self._deadlock()
                return self
            pcs = np.where(runnable, self.pc, big)
            p = int(pcs.min())
            idx = np.nonzero(pcs == p)[0]
            if p >= nprog:
                raise SimError(f"threads ran past the end of kernel `{self.kernel.name}` (no ret/exit)")
            ins = self.program[p]
            self.steps += 1
            if self.steps > self.max_steps:
                raise SimError(f"kernel `{self.kernel.name}` ran over {self.max_steps} steps; an endless loop? "
                               f"(last at {ins.loc})")
            run_idx = idx
            if ins.guard is not None:
                g = self.read_pred(ins.guard, idx, ins)
                run_idx = idx[g]
            if ins.opcode in ("bra", "ret", "exit", "bar"):
                execute_control(self, ins, idx, run_idx)
                continue
            handler = HANDLERS.get(ins.opcode)
            if handler is None:
                raise SimError(f"{ins.loc}: the simulator does not model `{ins.text}`")
            if len(run_idx):
                handler(self, ins, run_idx)
            self.pc[idx] += 1

    def _deadlock(self):
        b = int(self.block_of[self.waiting][0])
        mine = self.block_of == b
        where = sorted({f"bar.sync {int(self.barrier[t])} at {self.program[int(self.pc[t])].loc}"
                        for t in np.nonzero(mine & self.waiting)[0]})
        raise SimError(f"deadlock: in block {b}, threads wait at {'; '.join(where)}, "
                       f"which the other live threads never reach")

    def release_barriers(self, blocks):
        """Release a block whose live threads all wait at the same barrier id."""
        for b in np.unique(blocks):
            mine = self.block_of == b
            live = mine & ~self.done
            if np.array_equal(live, mine & self.waiting) and len(np.unique(self.barrier[live])) == 1:
                self.waiting[mine] = False
                self.pc[live] += 1

    # -- operands --------------------------------------------------------------------------
    def fail(self, ins: Instruction, message: str, tid=None):
        who = ""
        if tid is not None:
            b = int(self.block_of[tid])
            who = f" (block {b}, thread {int(tid) - b * self.nthreads})"
        raise SimError(f"{ins.loc}: {ins.text}{who}: {message}")

    def read_pred(self, x, idx, ins):
        neg = isinstance(x, Not)
        r = x.reg if neg else x
        v = self.read_reg(r, idx, ins)
        return ~v if neg else v

    def read_reg(self, r: Reg, idx, ins):
        w = self.written[r.name][idx]
        if not w.all():
            self.fail(ins, f"reads register {r.name} before anything was written to it",
                      idx[np.argmin(w)])
        return self.regs[r.name][idx]

    def read(self, x, ty: str, idx, ins):
        """Operand ``x`` as a NumPy array of type ``ty`` for threads ``idx``."""
        dt = NP[ty]
        if isinstance(x, Reg):
            raw = self.read_reg(x, idx, ins)
            if ty == "pred":
                return raw
            if bits(x.ty) != bits(ty):
                raw = raw.astype(STORE[bits(ty)])
            return raw.view(dt)
        if isinstance(x, Not):
            return ~self.read_pred(x, idx, ins)
        if isinstance(x, Imm):
            if x.is_float:
                return np.full(len(idx), x.value, dt)
            mask = (1 << bits(ty)) - 1
            return np.full(len(idx), x.value & mask, STORE[bits(ty)]).view(dt)
        if isinstance(x, Special):
            return self.specials[x.name][idx].astype(dt)
        if isinstance(x, Shared):
            return np.full(len(idx), self.shared_addr[x.name], dt)
        raise SimError(f"{ins.loc}: cannot read operand {x!r} of {ins.text}")

    def write(self, r: Reg, ty: str, idx, value):
        value = np.asarray(value)
        store = self.regs[r.name]
        if r.ty == "pred":
            store[idx] = value.astype(bool)
        elif bits(r.ty) == bits(ty):
            store[idx] = np.asarray(value, NP[ty]).view(store.dtype)
        else:     # ld/cvt into a wider register: extend by the source kind
            wide = value.astype(np.int64) if kind(ty) == "s" else value.astype(np.uint64)
            store[idx] = wide.astype(store.dtype)
        self.written[r.name][idx] = True

    # -- memory ----------------------------------------------------------------------------
    def address(self, m: Mem, idx, ins):
        base = m.base
        if isinstance(base, Shared):
            a = np.full(len(idx), self.shared_addr[base.name], np.uint64)
        elif isinstance(base, Param):
            raise SimError(f"{ins.loc}: {ins.text}: a parameter is not an address")
        else:
            a = self.read_reg(base, idx, ins).astype(np.uint64)
        return a + np.uint64(m.offset) if m.offset >= 0 else a - np.uint64(-m.offset)

    def _global(self, addr, size, idx, ins, verb):
        which = (addr >> np.uint64(GLOBAL_SHIFT)).astype(np.int64) - 1
        off = (addr & np.uint64((1 << GLOBAL_SHIFT) - 1)).astype(np.int64)
        bad = (which < 0) | (which >= len(self.buffers))
        if bad.any():
            k = int(np.argmax(bad))
            self.fail(ins, f"{verb} address {int(addr[k]):#x}, which is in no buffer", idx[k])
        for b in np.unique(which):
            sel = which == b
            name, buf = self.buffers[b]
            o = off[sel]
            oob = (o < 0) | (o + size > buf.size)
            if oob.any():
                k = int(np.argmax(oob))
                self.fail(ins, f"{verb} {size} bytes at byte {int(o[k])} of `{name}` ({buf.size} bytes): "
                               f"out of bounds", idx[sel][k])
        mis = off % size != 0
        if mis.any():
            k = int(np.argmax(mis))
            self.fail(ins, f"{verb} {size} bytes at byte {int(off[k])}: misaligned", idx[k])
        return which, off

    def _shared(self, addr, size, idx, ins, verb):
        off = addr.astype(np.int64)
        oob = (off < SHARED_BASE) | (off + size > self.shared_end)
        if oob.any():
            k = int(np.argmax(oob))
            self.fail(ins, f"{verb} shared byte {int(off[k])}: outside the shared arrays", idx[k])
        if (off % size != 0).any():
            k = int(np.argmax(off % size != 0))
            self.fail(ins, f"{verb} shared byte {int(off[k])}: misaligned", idx[k])
        return off

    def load(self, space, addr, ty, idx, ins):
        size, dt = bits(ty) // 8, NP[ty]
        if space == ".shared":
            off = self._shared(addr, size, idx, ins, "reads")
            return self.shared.view(dt)[self.block_of[idx], off // size]
        which, off = self._global(addr, size, idx, ins, "reads")
        out = np.empty(len(idx), dt)
        for b in np.unique(which):
            sel = which == b
            out[sel] = self.buffers[b][1].view(dt)[off[sel] // size]
        return out

    def store(self, space, addr, ty, idx, values, ins):
        size, dt = bits(ty) // 8, NP[ty]
        values = np.asarray(values, dt)
        if space == ".shared":
            off = self._shared(addr, size, idx, ins, "writes")
            self.shared.view(dt)[self.block_of[idx], off // size] = values    # the last thread wins
            return
        which, off = self._global(addr, size, idx, ins, "writes")
        for b in np.unique(which):
            sel = which == b
            self.buffers[b][1].view(dt)[off[sel] // size] = values[sel]

    def label_pc(self, lab: Label) -> int:
        return self.targets[lab.name]
