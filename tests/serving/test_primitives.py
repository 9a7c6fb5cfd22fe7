"""The serving ops against their references: compiled vs NumPy, paged vs contiguous attention, refusals by name."""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc._core.aval import AbstractValue
from tlaloc._prims import serving as sp
from tlaloc.serving.export.programs import Slot, lower

rng = np.random.default_rng(0)
P, BS, K, E, B, T, H, M = 6, 4, 2, 8, 2, 3, 4, 3


def _case():
    k_cache = rng.normal(size=(P, BS, K, E)).astype(np.float32)
    v_cache = rng.normal(size=(P, BS, K, E)).astype(np.float32)
    new = rng.normal(size=(B * T, K, E)).astype(np.float32)
    slots = np.array([4, 5, 6, 8, -1, -1], np.int32)                    # row 1: one real token, two padding
    q = rng.normal(size=(B, T, H, E)).astype(np.float32)
    tables = np.array([[1, 2, 0], [2, 3, 0]], np.int32)
    seq_lens = np.array([7, 9], np.int32)
    positions = np.array([[4, 5, 6], [8, 0, 0]], np.int32)
    return [k_cache, v_cache, new, slots, q, tables, seq_lens, positions]


def _step(k_cache, v_cache, new, slots, q, tables, seq_lens, positions, window=3):
    k2 = sp.kv_cache_write(k_cache, new, slots)
    out = sp.paged_attention(q, k2, v_cache, tables, seq_lens, positions, window=window)
    values, order = sp.sort_descending(q[:, :, 0, :])
    return [out, k2, values, order]


def _compiled(fn, args, donate=()):
    from tlaloc.serving.runtime.device import Program, device_put
    slots = [Slot(f"a{k}", "x", a.dtype, a.shape) for k, a in enumerate(args)]
    program = lower(fn, slots, "case", donate=donate)
    exe = Program(program.text, "cpu", [s.name for s in slots], [(s.dtype, s.shape) for s in slots],
                  fast_compile=True)
    bufs = [device_put(a, "cpu") for a in args]
    pointers = [b.unsafe_buffer_pointer() for b in bufs]
    return program, pointers, exe(*bufs)


def test_compiled_equals_numpy_reference_and_pool_is_updated_in_place():
    args = _case()
    want = _step(*args)
    program, pointers, got = _compiled(_step, args, donate=[0])
    assert program.aliases == {0: 1}
    assert got[1].unsafe_buffer_pointer() == pointers[0]                 # the key pool, written in place
    for w, g in zip(want, got):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5)


def test_kv_cache_write_skips_padding_and_keeps_other_slots():
    k_cache, _, new, slots, *_ = _case()
    out = sp.kv_cache_write(k_cache, new, slots)
    flat_in, flat_out = k_cache.reshape(P * BS, K, E), out.reshape(P * BS, K, E)
    np.testing.assert_array_equal(flat_out[[4, 5, 6, 8]], new[:4])
    untouched = [s for s in range(P * BS) if s not in (4, 5, 6, 8)]
    np.testing.assert_array_equal(flat_out[untouched], flat_in[untouched])


@pytest.mark.parametrize("window", [None, 3])
def test_paged_attention_equals_contiguous_attention(window):
    """Pages scattered in a pool give what the models' contiguous attention gives on the same keys."""
    from tlaloc.models.layers import attention
    S = 10
    keys = rng.normal(size=(1, S, K, E)).astype(np.float32)
    values = rng.normal(size=(1, S, K, E)).astype(np.float32)
    pages = [5, 2, 4]                                                    # tokens 0-3, 4-7, 8-9
    k_cache, v_cache = np.zeros((P, BS, K, E), np.float32), np.zeros((P, BS, K, E), np.float32)
    for t in range(S):
        k_cache[pages[t // BS], t % BS], v_cache[pages[t // BS], t % BS] = keys[0, t], values[0, t]
    q = rng.normal(size=(1, 3, H, E)).astype(np.float32)
    q_pos = np.array([[7, 8, 9]])
    want = attention(q, keys, values, q_pos, np.arange(S)[None], window=window)
    got = sp.paged_attention(q, k_cache, v_cache, np.array([pages]), np.array([S]), q_pos, window=window)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _stacked_step(pools_k, pools_v, new, slots, q, tables, seq_lens, positions):
    """Layer 1 of a pool stacking 3 layers' P pages: its writes and attention at page_offset P."""
    k2 = sp.kv_cache_write(pools_k, new, slots, page_offset=P)
    v2 = sp.kv_cache_write(pools_v, new * 2, slots, page_offset=P)
    return [sp.paged_attention(q, k2, v2, tables, seq_lens, positions, window=3, page_offset=P), k2, v2]


@pytest.mark.parametrize("compiled", [False, True])
def test_page_offset_is_the_layers_own_pool(compiled):
    """Writing and attending at page_offset l * P of a (L * P, BS, K, E) pool gives layer l's pages
    what one pool of its own would hold, leaves the other layers' pages alone, and attends to the
    same values (eagerly, and compiled: the scatter index offset and the reference's gather)."""
    k_cache, v_cache, new, slots, q, tables, seq_lens, positions = _case()
    stack_k = rng.normal(size=(3 * P, BS, K, E)).astype(np.float32)
    stack_v = rng.normal(size=(3 * P, BS, K, E)).astype(np.float32)
    stack_k[P:2 * P], stack_v[P:2 * P] = k_cache, v_cache
    k_own, v_own = sp.kv_cache_write(k_cache, new, slots), sp.kv_cache_write(v_cache, new * 2, slots)
    want = sp.paged_attention(q, k_own, v_own, tables, seq_lens, positions, window=3)
    args = [stack_k, stack_v, new, slots, q, tables, seq_lens, positions]
    out, k2, v2 = (np.asarray(a) for a in (_compiled(_stacked_step, args)[2] if compiled else _stacked_step(*args)))
    np.testing.assert_array_equal(k2[P:2 * P], k_own)
    np.testing.assert_array_equal(v2[P:2 * P], v_own)
    for other in (slice(0, P), slice(2 * P, 3 * P)):
        np.testing.assert_array_equal(k2[other], stack_k[other])
        np.testing.assert_array_equal(v2[other], stack_v[other])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    # negative control: the pages at offset 0 are other values, and attending there differs
    assert not np.allclose(sp.paged_attention(q, k2, v2, tables, seq_lens, positions, window=3), want, atol=1e-3)


def test_page_offset_must_be_a_non_negative_int():
    with pytest.raises(tl.ShapeError, match="kv_cache_write: page_offset must be a non-negative int"):
        sp.kv_cache_write(np.zeros((P, BS, K, E), np.float32), np.zeros((1, K, E), np.float32),
                          np.zeros(1, np.int32), page_offset=-1)


def test_sort_descending_is_stable():
    values, order = sp.sort_descending(np.array([[1.0, 3.0, 3.0, 2.0]], np.float32))
    assert order.tolist() == [[1, 2, 3, 0]] and values.tolist() == [[3.0, 3.0, 2.0, 1.0]]


def test_shape_rules_refuse_mismatches():
    with pytest.raises(tl.ShapeError, match="kv_cache_write: new tokens and slot_mapping length disagree"):
        sp.kv_cache_write_p.abstract_eval(AbstractValue(np.float32, (P, BS, K, E)),
                                          AbstractValue(np.float32, (5, K, E)), AbstractValue(np.int32, (4,)))
    with pytest.raises(tl.ShapeError, match="3 query heads do not split into groups over 2 kv heads"):
        sp.paged_attention_p.abstract_eval(
            AbstractValue(np.float32, (B, T, 3, E)), *[AbstractValue(np.float32, (P, BS, K, E))] * 2,
            AbstractValue(np.int32, (B, M)), AbstractValue(np.int32, (B,)), AbstractValue(np.int32, (B, T)),
            window=None, scale=None)


def _attend_sum(q, k_cache, v_cache, tables, seq_lens, positions):
    return sp.paged_attention(q, k_cache, v_cache, tables, seq_lens, positions).sum()


def test_transforms_refuse_inference_only_ops_by_name():
    k_cache, v_cache, _, _, q, tables, seq_lens, positions = _case()
    args = (q, k_cache, v_cache, tables, seq_lens, positions)
    with pytest.raises(tl.NoRuleError, match="`paged_attention` is an inference-only primitive"):
        tl.grad(_attend_sum)(*args)
    with pytest.raises(tl.NoRuleError, match="no JVP rule for `paged_attention`"):
        tl.jvp(_attend_sum, args, (np.ones_like(q),) + tuple(np.zeros_like(a) for a in args[1:]))
    with pytest.raises(tl.NoRuleError, match="no batching rule for `paged_attention`"):
        tl.vmap(_attend_sum, in_axes=(0, None, None, None, None, None))(np.stack([q, q]), *args[1:])


def test_serving_ops_stay_out_of_the_core_table():
    from tlaloc._core.primitive import REGISTRY
    assert not set(sp.SERVING_OPS) & set(REGISTRY)
    for op in sp.SERVING_OPS.values():
        assert op.inference_only and op.vjp is None and op.jvp is None and op.batch is None
        assert op.lower is not None                                      # set by tlaloc._render.stablehlo_serving
