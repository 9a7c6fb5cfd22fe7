"""Inference-only primitives of the serving programs: a paged KV cache and a sort for samplers.

=====================  =======================================================================
primitive              meaning
=====================  =======================================================================
``kv_cache_write``     ``cache (P, BS, K, E)``, ``new (N, K, E)``, ``slot_mapping (N,)`` int:
                       row ``n`` of ``new`` goes to page ``s // BS``, offset ``s % BS`` of
                       ``cache`` where ``s = slot_mapping[n]``; ``s < 0`` (padding) writes
                       nothing. Returns the updated cache (the pool is donated, so XLA
                       updates it in place). ``page_offset`` (static, default 0): the
                       slots are counted from page ``page_offset`` of ``cache`` (a pool
                       that stacks several layers' pages; see below).
``paged_attention``    ``q (B, T, H, E)`` against the keys and values of each row's pages:
                       key ``j`` of row ``b`` is ``k_cache[block_tables[b, j // BS], j % BS]``;
                       query ``t`` (at ``positions[b, t]``) sees key ``j`` when
                       ``j < seq_lens[b]``, ``j <= positions[b, t]`` and, with a sliding
                       window ``W``, ``positions[b, t] - W < j``. Grouped kv heads
                       (query head ``h`` reads kv head ``h // (H // K)``). -> ``(B, T, H, E)``
                       float32, whatever the pool's dtype. ``page_offset`` (static): the
                       block tables' pages are counted from that page of the pools.
``sort_descending``    ``x (..., n)`` -> ``(values, indices int32)`` sorted largest first along
                       the last axis; ties keep the lower index first (stable).
=====================  =======================================================================

All of them are declared ``inference_only`` (and ``stored_matmul``, see ``stored_matmul.py``): the reverse and forward transforms refuse
them by name, and they have no batching rule, so ``vmap`` refuses them by name too.
Like the kernel ops (``tlaloc.kernels.mosaic``), they are serving ops rather than core
primitives (DESIGN §1 keeps that set small): they live in ``SERVING_OPS``, not in the
core table, whose coverage tests expect a batching rule for every entry. Transforms
read rules off a node's primitive, so they refuse these by name all the same.
Their NumPy implementations are the reference the compiled programs are tested
against; ``paged_attention``'s is written with the primitives of this layer, so the
same function is its StableHLO lowering (``tlaloc._render.stablehlo_serving`` traces it).

Page 0 of a pool is scratch by convention: a padding row's block table points there,
and nothing is ever written to it.

A serving program keeps one key pool and one value pool for all its layers: layer ``l``'s
pages are pages ``l * P .. l * P + P - 1`` of a ``(L * P, BS, K, E)`` pool, and its writes
and attention pass ``page_offset = l * P`` (a static attribute, so nothing is added to the
slots or block tables at run time for it, and the CPU kernel reads the pages in place).
Two pools of L layers cost a program call the same as two pools of one layer; 2 * L
donated pools cost ~6 us each per call on XLA CPU (``benchmarks/donated_pools.py``).
"""
from __future__ import annotations

import numpy as np

from .._core.primitive import REGISTRY, Primitive
from ..errors import ShapeError
from .conversion import convert
from .elementwise import add, and_p, divide, exp_p, gt_p, le_p, lt_p, multiply, subtract
from .indexing import gather
from .linalg import matmul
from .misc import stop_gradient
from .reductions import reduce_max, reduce_sum
from .selection import select
from .shape_ops import expand_dims, reshape, transpose
from .stored_matmul import stored_matmul, stored_matmul_p

_F32_MIN = np.float32(np.finfo(np.float32).min)


def _rank(aval, want: int, op: str, name: str):
    if aval.shape is not None and len(aval.shape) != want:
        raise ShapeError(f"{op}: {name} must have rank {want}, got shape {tuple(aval.shape)}")


def _same(op: str, what: str, a, b) -> None:
    if type(a) is int and type(b) is int and a != b:
        raise ShapeError(f"{op}: {what} disagree ({a} vs {b})")


# -- kv_cache_write -------------------------------------------------------------------------

def _write_impl(cache, new, slot_mapping, *, page_offset=0):
    cache = np.asarray(cache)
    out = np.array(cache, copy=True)                                     # (P, BS, K, E)
    P, BS = cache.shape[:2]
    flat = out.reshape((P * BS,) + cache.shape[2:])                     # (P*BS, K, E), a view of out
    slots = np.asarray(slot_mapping).reshape(-1).astype(np.int64)       # (N,)
    keep = (slots >= 0) & (slots + page_offset * BS < P * BS)
    flat[slots[keep] + page_offset * BS] = np.asarray(new).reshape((-1,) + cache.shape[2:])[keep].astype(cache.dtype)
    return out


def _offset(op: str, page_offset) -> None:
    if type(page_offset) is not int or page_offset < 0:
        raise ShapeError(f"{op}: page_offset must be a non-negative int (a page of the pool), got {page_offset!r}")


def _write_shape(cache, new, slot_mapping, *, page_offset=0):
    op = "kv_cache_write"
    _offset(op, page_offset)
    _rank(cache, 4, op, "cache (pages, block_size, kv_heads, head_dim)")
    _rank(new, 3, op, "new (tokens, kv_heads, head_dim)")
    _rank(slot_mapping, 1, op, "slot_mapping (tokens,)")
    if cache.shape is not None and new.shape is not None:
        _same(op, "cache and new kv_heads", cache.shape[2], new.shape[1])
        _same(op, "cache and new head_dim", cache.shape[3], new.shape[2])
    if new.shape is not None and slot_mapping.shape is not None:
        _same(op, "new tokens and slot_mapping length", new.shape[0], slot_mapping.shape[0])
    return cache.shape


kv_cache_write_p = Primitive("kv_cache_write", impl=_write_impl, shape_rule=_write_shape,
                             dtype_rule=lambda cache, new, slot_mapping, **params: cache.dtype,
                             hlo="stablehlo.scatter",
                             nondiff_argnums=(2,), inference_only=True)


def kv_cache_write(cache, new, slot_mapping, *, page_offset: int = 0):
    """``cache`` (P, BS, K, E) with ``new`` (N, K, E) stored at ``slot_mapping`` (N,); -1 skips.

    ``page_offset``: slot ``s`` is slot ``s % BS`` of page ``page_offset + s // BS`` (a pool
    stacking several layers' pages). Raises ShapeError for ranks or sizes that disagree, and
    for a ``page_offset`` that is not a non-negative int.
    """
    _offset("kv_cache_write", page_offset)
    return kv_cache_write_p.bind(cache, new, slot_mapping, page_offset=page_offset)


# -- paged_attention ------------------------------------------------------------------------

def paged_attention_reference(q, k_cache, v_cache, block_tables, seq_lens, positions, *,
                              window=None, scale=None, key_positions=None, page_offset=0):
    """The definition of ``paged_attention``, in primitives (runs eagerly or traced).

    q (B, T, H, E); k_cache, v_cache (P, BS, K, E); block_tables (B, M) int; seq_lens (B,)
    int; positions (B, T) int -> (B, T, H, E) float32. ``key_positions`` (S,) int32 is
    ``arange(M * BS)``; the lowering passes an ``iota`` instead of a constant. Page ``p``
    of a block table is page ``page_offset + p`` of the pools.
    """
    B, T, H, E = q.shape
    BS, K = k_cache.shape[1], k_cache.shape[2]
    M = block_tables.shape[1]
    S, G = M * BS, H // K
    scale = float(E) ** -0.5 if scale is None else float(scale)
    f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
    if page_offset:
        block_tables = add(convert(block_tables, i32), np.int32(page_offset))         # (B, M)
    keys = reshape(gather(k_cache, block_tables, 0), (B, S, K, E))                    # (B, S, K, E)
    values = reshape(gather(v_cache, block_tables, 0), (B, S, K, E))                  # (B, S, K, E)
    keys, values = convert(keys, f32), convert(values, f32)
    # The G query heads sharing a KV head are rows of one matmul per (row, KV head), not a
    # broadcast of the keys and values over G: a (B, K, G, S, E) broadcast is materialised
    # by XLA CPU (G copies of the gathered cache per layer) and then multiplied as B*K*G
    # one-row products, which made attention most of the non-weight time of a batch-16 step.
    qg = transpose(reshape(convert(q, f32), (B, T, K, G, E)), (0, 2, 3, 1, 4))       # (B, K, G, T, E)
    qg = reshape(qg, (B, K, G * T, E))                                                # (B, K, G*T, E)
    kt = transpose(keys, (0, 2, 3, 1))                                                # (B, K, E, S)
    vt = transpose(values, (0, 2, 1, 3))                                              # (B, K, S, E)
    scores = multiply(reshape(matmul(qg, kt), (B, K, G, T, S)), np.float32(scale))   # (B, K, G, T, S)
    if key_positions is None:
        key_positions = np.arange(S, dtype=np.int32)
    k_pos = expand_dims(key_positions, (0, 1))                                        # (1, 1, S)
    q_pos = expand_dims(convert(positions, i32), 2)                                   # (B, T, 1)
    lens = expand_dims(convert(seq_lens, i32), (1, 2))                                # (B, 1, 1)
    allowed = and_p.bind(le_p.bind(k_pos, q_pos), lt_p.bind(k_pos, lens))            # (B, T, S)
    if window is not None:
        allowed = and_p.bind(allowed, gt_p.bind(k_pos, subtract(q_pos, int(window))))
    scores = select(expand_dims(allowed, (1, 2)), scores, _F32_MIN)                   # (B, K, G, T, S)
    probs = _softmax_last(scores)                                                     # (B, K, G, T, S)
    out = reshape(matmul(reshape(probs, (B, K, G * T, S)), vt), (B, K, G, T, E))      # (B, K, G, T, E)
    return reshape(transpose(out, (0, 3, 1, 2, 4)), (B, T, H, E))                     # (B, T, H, E)


def _softmax_last(x):
    """``exp(x) / sum(exp(x))`` over the last axis, shifted by its (gradient-stopped) max."""
    e = exp_p.bind(subtract(x, stop_gradient(reduce_max(x, (-1,), keepdims=True))))
    return divide(e, reduce_sum(e, (-1,), keepdims=True))


def _attention_impl(q, k_cache, v_cache, block_tables, seq_lens, positions, *, window, scale, kernel=False,
                    page_offset=0):
    out = paged_attention_reference(np.asarray(q), np.asarray(k_cache), np.asarray(v_cache),
                                    np.asarray(block_tables), np.asarray(seq_lens), np.asarray(positions),
                                    window=window, scale=scale, page_offset=page_offset)
    return np.asarray(out, np.float32)


def _attention_shape(q, k_cache, v_cache, block_tables, seq_lens, positions, *, window, scale, kernel=False,
                     page_offset=0):
    op = "paged_attention"
    _offset(op, page_offset)
    _rank(q, 4, op, "q (batch, tokens, heads, head_dim)")
    _rank(k_cache, 4, op, "k_cache (pages, block_size, kv_heads, head_dim)")
    _rank(v_cache, 4, op, "v_cache (pages, block_size, kv_heads, head_dim)")
    _rank(block_tables, 2, op, "block_tables (batch, max_pages)")
    _rank(seq_lens, 1, op, "seq_lens (batch,)")
    _rank(positions, 2, op, "positions (batch, tokens)")
    if k_cache.shape is not None and v_cache.shape is not None:
        for a, b in zip(k_cache.shape, v_cache.shape):
            _same(op, "k_cache and v_cache shapes", a, b)
    if q.shape is not None and k_cache.shape is not None:
        _same(op, "q and k_cache head_dim", q.shape[3], k_cache.shape[3])
        H, K = q.shape[2], k_cache.shape[2]
        if type(H) is int and type(K) is int and H % K:
            raise ShapeError(f"{op}: {H} query heads do not split into groups over {K} kv heads")
    if q.shape is not None:
        for name, a in (("block_tables", block_tables), ("seq_lens", seq_lens), ("positions", positions)):
            if a.shape is not None:
                _same(op, f"q batch and {name} batch", q.shape[0], a.shape[0])
        if positions.shape is not None:
            _same(op, "q tokens and positions tokens", q.shape[1], positions.shape[1])
    return q.shape


paged_attention_p = Primitive("paged_attention", impl=_attention_impl, shape_rule=_attention_shape,
                              dtype_rule=lambda *avals, **params: np.dtype(np.float32), nondiff_argnums=(3, 4, 5),
                              inference_only=True)


def paged_attention(q, k_cache, v_cache, block_tables, seq_lens, positions, *, window=None, scale=None,
                    kernel=False, page_offset: int = 0):
    """Attention of ``q`` (B, T, H, E) over paged keys and values; see the module docstring.

    ``kernel``: lower it to the CPU kernel that reads the pages in place
    (``tlaloc_cpu_paged_attention_<pool dtype>``) instead of its reference definition.
    ``page_offset``: the block tables' page ``p`` is page ``page_offset + p`` of the pools.
    """
    params = dict(window=None if window is None else int(window), scale=None if scale is None else float(scale),
                  kernel=bool(kernel))
    _offset("paged_attention", page_offset)
    if page_offset:                                  # absent at 0: the programs of one pool per layer, as before
        params["page_offset"] = page_offset
    return paged_attention_p.bind(q, k_cache, v_cache, block_tables, seq_lens, positions, **params)


# -- sort_descending ------------------------------------------------------------------------

def _sort_impl(x):
    x = np.asarray(x)
    order = np.argsort(-x, axis=-1, kind="stable")                      # (..., n) largest first
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int32)


sort_descending_p = Primitive("sort_descending", impl=_sort_impl,
                              shape_rule=lambda x: (x.shape, x.shape),
                              dtype_rule=lambda x: (x.dtype, np.dtype(np.int32)),
                              hlo="stablehlo.sort",
                              multiple_results=True, inference_only=True)


def sort_descending(x):
    """``(values, indices)`` of ``x`` (..., n) sorted largest first along the last axis (stable)."""
    return tuple(sort_descending_p.bind(x))


#: the serving ops, by name (kept out of the core primitive table, see the module docstring)
SERVING_OPS = {p.name: p for p in (kv_cache_write_p, paged_attention_p, sort_descending_p, stored_matmul_p)}
for _name in SERVING_OPS:
    REGISTRY.pop(_name, None)

__all__ = ["kv_cache_write", "paged_attention", "paged_attention_reference", "sort_descending", "stored_matmul",
           "kv_cache_write_p", "paged_attention_p", "sort_descending_p", "stored_matmul_p", "SERVING_OPS"]
