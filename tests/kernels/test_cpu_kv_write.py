"""The CPU KV-write kernel (``tlaloc/kernels/cpu/kv_write.cc``) through XLA, in place.

Oracle: the NumPy implementation of ``kv_cache_write`` (``tlaloc._prims.serving``), which
the portable programs are tested against. Compiled with the kernel, a write of rows with
padding slots (-1), a slot beyond the pool and a layer's ``page_offset`` gives the oracle's
pool bit for bit, for float32 and bfloat16 pools, and the result is the donated buffer
(its address does not change). Negative controls: the oracle with a row moved by one slot,
or without the page offset, differs from the kernel's pool.
"""
import ml_dtypes
import numpy as np
import pytest

from tlaloc._prims.serving import kv_cache_write
from tlaloc._prims.stored_matmul import kernel_calls
from tlaloc._runtime import cpu_kernels

P, BS, K, E, N = 12, 4, 2, 8, 6


def _program(kv_dtype, page_offset):
    from tlaloc.serving.export.programs import Slot, lower
    from tlaloc.serving.runtime.device import Program
    slots = [Slot("pool", "kv_pool", kv_dtype, (P, BS, K, E)), Slot("new", "x", np.dtype(np.float32), (N, K, E)),
             Slot("slots", "slot_mapping", np.dtype(np.int32), (N,))]
    with kernel_calls(("kv_cache_write",)):
        program = lower(lambda c, x, s: [kv_cache_write(c, x, s, page_offset=page_offset)], slots, "kvw",
                        donate=[0])
    assert f"@tlaloc_cpu_kv_write_{'bf16' if kv_dtype != np.float32 else 'f32'}" in program.text
    assert program.aliases == {0: 0}
    return Program(program.text, "cpu", [s.name for s in slots], [(s.dtype, s.shape) for s in slots])


@pytest.mark.parametrize("kv", ["float32", "bfloat16"])
@pytest.mark.parametrize("page_offset", [0, 4])
def test_kernel_writes_the_rows_in_place_as_the_reference_does(kv, page_offset):
    if not cpu_kernels.load():
        pytest.skip(f"the CPU kernels cannot be built here: {cpu_kernels.reason()}")
    from tlaloc.serving.runtime.device import device_put
    rng = np.random.default_rng(page_offset)
    kv_dtype = np.dtype(ml_dtypes.bfloat16) if kv == "bfloat16" else np.dtype(np.float32)
    pool = rng.standard_normal((P, BS, K, E)).astype(kv_dtype)
    new = rng.standard_normal((N, K, E)).astype(np.float32)
    # two rows of one page, a padding row, a row on another page, a slot beyond the pool, slot 0
    slots = np.array([9, 10, -1, 21, (P - page_offset) * BS + 3, 0], np.int32)
    want = kv_cache_write(pool, new, slots, page_offset=page_offset)
    run = _program(kv_dtype, page_offset)
    buf = device_put(pool.copy(), "cpu")
    address = buf.unsafe_buffer_pointer()
    [out] = run(buf, new, slots)
    got = np.asarray(out)
    assert out.unsafe_buffer_pointer() == address                          # the donated pool, written in place
    np.testing.assert_array_equal(got.view(np.uint8), np.asarray(want).view(np.uint8))
    # negative controls: a row one slot late, or the offset left out, is another pool
    late = kv_cache_write(pool, new, np.where(slots >= 0, slots + 1, slots), page_offset=page_offset)
    assert not np.array_equal(got.view(np.uint8), np.asarray(late).view(np.uint8))
    if page_offset:
        flat = kv_cache_write(pool, new, slots)
        assert not np.array_equal(got.view(np.uint8), np.asarray(flat).view(np.uint8))
