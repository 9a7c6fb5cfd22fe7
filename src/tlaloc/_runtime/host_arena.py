"""Read-only arrays for the CPU backend, placed together in host memory backed by 2 MiB pages.

A decode step on a CPU streams every weight from memory once per token. With the 4 KiB
pages the allocator gives XLA's buffers, each 4 KiB of the stream costs a TLB miss and a
page walk, and the hardware prefetchers stop at every page boundary. The same weights laid
out in one anonymous mapping that asks for transparent huge pages (``madvise(MADV_HUGEPAGE)``,
Linux's ``transparent_hugepage`` set to ``madvise`` or ``always``) stream 13-15% faster
(float32 SmolLM2 layers at batch 1, 2 threads: 29-30 -> 33-34 GB/s; benchmarks/RESULTS.md,
session 9).

XLA's CPU client uses a NumPy array in place when its data is aligned (zero copy), so a
weight uploaded from the arena *is* the arena's memory: the device array keeps the NumPy
view, and the view keeps the mapping, alive. Nothing here changes a value: the arrays are
byte-for-byte copies, and only where they live differs.

Set ``TLALOC_HUGE_PAGES=0`` to keep the allocator's pages (the A/B switch of
``benchmarks/decode_step.py``).
"""
from __future__ import annotations

import mmap
import os

import numpy as np

HUGE_PAGE = 2 << 20
ALIGN = 64          # bytes; XLA CPU aliases host data aligned to its minimum alignment (16 or 64)


def enabled() -> bool:
    """Whether uploads for the CPU backend go through an arena (``TLALOC_HUGE_PAGES`` is not "0")."""
    return os.environ.get("TLALOC_HUGE_PAGES", "1") != "0"


def arena_copies(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Copies of ``arrays`` (same dtypes, shapes and bytes), one after the other, each start
    ``ALIGN``-byte aligned, in one anonymous private mapping aligned to 2 MiB and advised
    ``MADV_HUGEPAGE`` where the platform has it. The copies are read-only.

    Raises nothing beyond what ``mmap`` raises when memory is short (``OSError``).
    """
    sizes = [int(np.asarray(a).nbytes) for a in arrays]
    offsets, total = [], 0
    for n in sizes:
        offsets.append(total)
        total += -(-max(n, 1) // ALIGN) * ALIGN
    if total == 0:
        return [np.array(a, copy=True) for a in arrays]
    region = mmap.mmap(-1, total + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        region.madvise(mmap.MADV_HUGEPAGE)
    raw = np.frombuffer(region, np.uint8)
    start = (-raw.ctypes.data) % HUGE_PAGE
    out = []
    for a, off, n in zip(arrays, offsets, sizes):
        a = np.ascontiguousarray(a)
        view = raw[start + off:start + off + n].view(a.dtype).reshape(a.shape)
        view[...] = a
        view.flags.writeable = False
        out.append(view)
    return out


__all__ = ["arena_copies", "enabled", "HUGE_PAGE"]
