"""The CPU paged-attention kernel (``tlaloc/kernels/cpu/paged_attention.cc``) through XLA.

Oracle: a float64 NumPy loop written here from the op's definition (each row's keys read
through its block table, masked by length, position and window, softmax, weighted values).
Negative controls: changing a page a row reads moves its output; changing a page no row
reads does not (the pages are read in place, nothing else). The kernel splits each row's
keys into chunks of 32 merged in a fixed order: rows spanning several chunks, grouped query
heads and a head dim that is not a multiple of 16 are held to the same oracle, one key
perturbed or two pages swapped fail it, and a row's output is bit-identical alone and in
a batch (where the work is shared between threads).
"""
import ml_dtypes
import numpy as np
import pytest

from tlaloc._prims.serving import paged_attention
from tlaloc._prims.stored_matmul import kernel_calls
from tlaloc._runtime import cpu_kernels

B, H, K, E, P, BS, M = 3, 4, 2, 24, 10, 4, 3


def oracle(q, kc, vc, tables, lens, positions, window, scale):
    q, kc, vc = (np.asarray(a).astype(np.float64) for a in (q, kc, vc))
    Bq, T = positions.shape
    _, BS, K, E = kc.shape
    H = q.shape[2]
    S, G = tables.shape[1] * BS, H // K
    out = np.zeros(q.shape)
    for b in range(Bq):
        keys = kc[tables[b]].reshape(S, K, E)
        vals = vc[tables[b]].reshape(S, K, E)
        for t in range(T):
            p = positions[b, t]
            j = np.arange(S)
            ok = (j < lens[b]) & (j <= p)
            if window is not None:
                ok &= j > p - window
            for h in range(H):
                g = h // G
                if not ok.any():
                    out[b, t, h] = vals[:, g].mean(axis=0)
                    continue
                s = keys[ok, g] @ q[b, t, h] * scale
                w = np.exp(s - s.max())
                out[b, t, h] = (w / w.sum()) @ vals[ok, g]
    return out


def compiled(T, kv_dtype, window, shape=(B, H, K, E, P, BS, M), page_offset=0):
    from tlaloc.serving.export.programs import Slot, lower
    from tlaloc.serving.runtime.device import Program
    B, H, K, E, P, BS, M = shape
    i32, f32 = np.dtype(np.int32), np.dtype(np.float32)
    slots = [Slot("q", "token_ids", f32, (B, T, H, E)), Slot("k", "kv_pool", kv_dtype, (P, BS, K, E)),
             Slot("v", "kv_pool", kv_dtype, (P, BS, K, E)), Slot("tables", "block_tables", i32, (B, M)),
             Slot("lens", "seq_lens", i32, (B,)), Slot("positions", "positions", i32, (B, T))]
    with kernel_calls(("paged_attention",)):
        program = lower(lambda *a: [paged_attention(*a, window=window, kernel=True, page_offset=page_offset)],
                        slots, "pa")
    assert "@tlaloc_cpu_paged_attention_" in program.text
    assert ("page_offset" in program.text) == (page_offset > 0)
    return Program(program.text, "cpu", [s.name for s in slots], [(s.dtype, s.shape) for s in slots])


@pytest.mark.parametrize("kv", ["float32", "bfloat16"])
@pytest.mark.parametrize("T, window", [(1, None), (1, 3), (2, None), (2, 2)])
def test_kernel_equals_float64_attention_over_the_pages(kv, T, window):
    if not cpu_kernels.load():
        pytest.skip(f"the CPU kernels cannot be built here: {cpu_kernels.reason()}")
    rng = np.random.default_rng(T * 10 + (window or 0))
    kv_dtype = np.dtype(ml_dtypes.bfloat16) if kv == "bfloat16" else np.dtype(np.float32)
    q = rng.standard_normal((B, T, H, E)).astype(np.float32)
    kc = rng.standard_normal((P, BS, K, E)).astype(kv_dtype)
    vc = rng.standard_normal((P, BS, K, E)).astype(kv_dtype)
    tables = np.array([[3, 1, 7], [2, 8, 0], [5, 0, 0]], np.int32)       # page 0: scratch; 4, 6, 9 unused
    lens = np.array([11, 6, 3], np.int32)
    positions = np.array([[9, 10], [4, 5], [5, 6]], np.int32)[:, :T]      # row 2 at 5 > len 3
    run = compiled(T, kv_dtype, window)
    got = np.asarray(run(q, kc, vc, tables, lens, positions)[0])
    want = oracle(q, kc, vc, tables, lens, positions, window, E ** -0.5)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    # the reference definition (the portable lowering) agrees too
    ref = np.asarray(paged_attention(q, kc, vc, tables, lens, positions, window=window))
    np.testing.assert_allclose(ref, want, rtol=2e-5, atol=2e-6)
    # negative controls: a page row 0 reads changes its output; a page nobody reads changes nothing
    used, unused = vc.copy(), kc.copy()
    used[tables[0, positions[0, 0] // BS]] += kv_dtype.type(1.0)        # the page of row 0's own key
    unused[4] += kv_dtype.type(1.0)
    assert np.abs(np.asarray(run(q, kc, used, tables, lens, positions)[0])[0] - got[0]).max() > 1e-3
    np.testing.assert_array_equal(np.asarray(run(q, unused, vc, tables, lens, positions)[0]), got)


@pytest.mark.parametrize("kv", ["float32", "bfloat16"])
def test_page_offset_reads_the_layers_pages(kv):
    """The ``_at`` target, for pools stacking L layers' P pages: page p of a block table is page
    page_offset + p. Layer 2 of 3 equals the float64 oracle on that layer's pages alone;
    changing a page of another layer changes nothing, one of its own pages does (controls)."""
    if not cpu_kernels.load():
        pytest.skip(f"the CPU kernels cannot be built here: {cpu_kernels.reason()}")
    rng = np.random.default_rng(7)
    kv_dtype = np.dtype(ml_dtypes.bfloat16) if kv == "bfloat16" else np.dtype(np.float32)
    L, T, window = 3, 1, None
    q = rng.standard_normal((B, T, H, E)).astype(np.float32)
    kc = rng.standard_normal((L * P, BS, K, E)).astype(kv_dtype)
    vc = rng.standard_normal((L * P, BS, K, E)).astype(kv_dtype)
    tables = np.array([[3, 1, 7], [2, 8, 0], [5, 0, 0]], np.int32)
    lens = np.array([11, 6, 3], np.int32)
    positions = np.array([[9], [4], [5]], np.int32)
    run = compiled(T, kv_dtype, window, shape=(B, H, K, E, L * P, BS, M), page_offset=2 * P)
    got = np.asarray(run(q, kc, vc, tables, lens, positions)[0])
    layer = slice(2 * P, 3 * P)
    np.testing.assert_allclose(got, oracle(q, kc[layer], vc[layer], tables, lens, positions, window, E ** -0.5),
                               rtol=2e-5, atol=2e-6)
    other, own = vc.copy(), vc.copy()
    other[P + 3] += kv_dtype.type(1.0)                                  # page 3 of layer 1: not read
    own[2 * P + 3] += kv_dtype.type(1.0)                                # page 3 of layer 2: row 0 reads it
    np.testing.assert_array_equal(np.asarray(run(q, kc, other, tables, lens, positions)[0]), got)
    assert np.abs(np.asarray(run(q, kc, own, tables, lens, positions)[0])[0] - got[0]).max() > 1e-3


# G = 3 query heads per kv head, E = 72 = 4 * 16 + 8 (a masked tail), pages of 16, rows of
# 1 key to 4 chunks of 32 (and one row that sees no key)
GQA = dict(H=6, K=2, E=72, P=40, BS=16, M=8)


def gqa_case(kv_dtype, lens, positions, seed=0):
    rng = np.random.default_rng(seed)
    H, K, E, P, BS, M = (GQA[k] for k in ("H", "K", "E", "P", "BS", "M"))
    Bq = len(lens)
    q = rng.standard_normal((Bq, 1, H, E)).astype(np.float32)
    kc = rng.standard_normal((P, BS, K, E)).astype(kv_dtype)
    vc = rng.standard_normal((P, BS, K, E)).astype(kv_dtype)
    tables = (1 + np.arange(Bq * M) % (P - 1)).reshape(Bq, M)
    tables = rng.permuted(tables, axis=1).astype(np.int32)              # scattered pages
    return q, kc, vc, tables, np.array(lens, np.int32), np.array(positions, np.int32).reshape(Bq, 1)


def gqa_program(Bq, kv_dtype, window):
    g = GQA
    return compiled(1, kv_dtype, window, (Bq, g["H"], g["K"], g["E"], g["P"], g["BS"], g["M"]))


@pytest.mark.parametrize("kv", ["float32", "bfloat16"])
@pytest.mark.parametrize("window", [None, 40])
def test_chunked_kernel_with_grouped_heads_and_a_tail_equals_float64(kv, window):
    if not cpu_kernels.load():
        pytest.skip(f"the CPU kernels cannot be built here: {cpu_kernels.reason()}")
    kv_dtype = np.dtype(ml_dtypes.bfloat16) if kv == "bfloat16" else np.dtype(np.float32)
    lens = [1, 31, 32, 33, 100, 128, 5]
    positions = [0, 30, 31, 32, 99, 127, -1]                            # the last row sees no key
    q, kc, vc, tables, lens, positions = gqa_case(kv_dtype, lens, positions)
    run = gqa_program(len(lens), kv_dtype, window)
    got = np.asarray(run(q, kc, vc, tables, lens, positions)[0])
    want = oracle(q, kc, vc, tables, lens, positions, window, GQA["E"] ** -0.5)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    # negative controls: key 70 of row 4 (chunk 2, in the window) moved; a page it reads
    # swapped with one past its length (swapping two pages it reads whole would only
    # permute the keys, which attention does not see)
    key = kc.copy()
    page, slot = tables[4, 70 // GQA["BS"]], 70 % GQA["BS"]
    key[page, slot, 1] += kv_dtype.type(4.0)
    swapped = tables.copy()
    swapped[4, [4, 7]] = swapped[4, [7, 4]]                             # keys 64-79 and 112-127
    for args in ((q, key, vc, tables, lens, positions), (q, kc, vc, swapped, lens, positions)):
        with pytest.raises(AssertionError):
            np.testing.assert_allclose(np.asarray(run(*args)[0]), want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("kv", ["float32", "bfloat16"])
def test_a_row_is_bit_identical_alone_and_in_a_batch(kv):
    if not cpu_kernels.load():
        pytest.skip(f"the CPU kernels cannot be built here: {cpu_kernels.reason()}")
    kv_dtype = np.dtype(ml_dtypes.bfloat16) if kv == "bfloat16" else np.dtype(np.float32)
    lens = [100, 128, 128, 128, 77, 128, 128, 128]                      # shared between threads
    q, kc, vc, tables, lens, positions = gqa_case(kv_dtype, lens, [ln - 1 for ln in lens], seed=1)
    batch = np.asarray(gqa_program(8, kv_dtype, None)(q, kc, vc, tables, lens, positions)[0])
    alone = gqa_program(1, kv_dtype, None)
    for b in (0, 4):
        row = np.asarray(alone(q[b:b + 1], kc, vc, tables[b:b + 1], lens[b:b + 1], positions[b:b + 1])[0])
        np.testing.assert_array_equal(row[0], batch[b])
    # control: the comparison sees a difference in the last bit
    nudged = np.nextafter(batch[0], np.float32(np.inf))
    assert not np.array_equal(nudged, batch[0])
