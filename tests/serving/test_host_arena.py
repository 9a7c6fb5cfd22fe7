"""Weights on the CPU backend in a huge-page arena (``tlaloc._runtime.host_arena``), used in place.

The copies must be the same bytes, dtypes and shapes as the arrays given; the device arrays
must be the arena's memory (not one more copy) and hold the same values; with
``TLALOC_HUGE_PAGES=0`` every weight is copied into a buffer of its own.
"""
import os

import ml_dtypes
import numpy as np
import pytest

from tlaloc._runtime import host_arena
from tlaloc.serving.runtime import device


def _arrays():
    rng = np.random.default_rng(0)
    return [
        rng.standard_normal((300, 577)).astype(np.float32),
        np.arange(-5, 6, dtype=np.int8),
        np.zeros((0, 3), np.float32),
        rng.standard_normal((7, 64)).astype(ml_dtypes.bfloat16),
        rng.standard_normal((64, 10)).astype(np.float16).T,            # not contiguous
        rng.integers(0, 256, (33,), dtype=np.uint8),
    ]


def test_copies_are_the_same_arrays_aligned_in_one_huge_page_aligned_block():
    arrays = _arrays()
    copies = host_arena.arena_copies(arrays)
    assert len(copies) == len(arrays)
    for a, c in zip(arrays, copies):
        assert c.dtype == a.dtype and c.shape == a.shape
        assert np.asarray(a).tobytes() == c.tobytes()
        assert c.ctypes.data % host_arena.ALIGN == 0
        assert not c.flags.writeable
        with pytest.raises(ValueError):
            c[...] = 0
    assert copies[0].ctypes.data % host_arena.HUGE_PAGE == 0
    starts = [c.ctypes.data for c in copies if c.size]
    assert starts == sorted(starts) and starts[-1] - starts[0] < 2 * sum(a.nbytes for a in arrays)
    # negative control: a changed source array is not what the arena holds
    changed = arrays[0].copy()
    changed[3, 4] += 1
    assert changed.tobytes() != copies[0].tobytes()


def test_the_arena_is_advised_for_huge_pages():
    smaps = "/proc/self/smaps"
    if not os.path.exists(smaps) or not hasattr(__import__("mmap"), "MADV_HUGEPAGE"):
        pytest.skip("no /proc/self/smaps or no MADV_HUGEPAGE: not Linux")
    mode = open("/sys/kernel/mm/transparent_hugepage/enabled").read() if os.path.exists(
        "/sys/kernel/mm/transparent_hugepage/enabled") else "[never]"
    if "[never]" in mode:
        pytest.skip("transparent huge pages are off on this machine ([never])")
    copy = host_arena.arena_copies([np.ones((1 << 20,), np.float32)])[0]
    address = copy.ctypes.data
    entry = None
    for line in open(smaps):
        head = line.split()[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            entry = lo <= address < hi
        elif entry and line.startswith("THPeligible:"):
            assert line.split()[1] == "1", line
            return
    pytest.skip("this kernel's smaps has no THPeligible field")


def test_cpu_weights_are_the_arena_in_place_and_hold_the_same_values(monkeypatch):
    arrays = {f"w{i}": a for i, a in enumerate(_arrays())}
    monkeypatch.delenv("TLALOC_HUGE_PAGES", raising=False)
    placed = device.put_weights(arrays, "cpu")
    monkeypatch.setenv("TLALOC_HUGE_PAGES", "0")
    owned = device.put_weights(arrays, "cpu")
    for k, a in arrays.items():
        for d in (placed[k], owned[k]):
            got = np.asarray(d)
            assert got.dtype == a.dtype and got.shape == a.shape and got.tobytes() == np.asarray(a).tobytes()
    big = placed["w0"]
    start = big.unsafe_buffer_pointer()
    assert start % host_arena.HUGE_PAGE == 0                     # the arena's first array, used in place
    assert owned["w0"].unsafe_buffer_pointer() != start
