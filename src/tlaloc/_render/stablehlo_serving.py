"""StableHLO lowerings of the serving primitives (``tlaloc._prims.serving``).

* ``kv_cache_write``: one ``stablehlo.scatter`` of token rows into the ``(P, BS, K, E)``
  pool at ``(page_offset + slot // BS, slot % BS)``; a negative slot gets page ``P`` (out of range),
  which XLA's scatter skips (the same contract JAX's ``mode="drop"`` relies on), so
  padding writes nothing. The pool is not reshaped, and a single row is written as two
  identical updates: XLA CPU turns a one-row scatter into a dynamic-update-slice, fuses a
  copy of it into the attention's gather as well, and then copies the donated pool
  (three to four copies of every pool at every batch-1 decode step). Written this way
  the pool is updated in place and read once. XLA CPU has no bfloat16 scatter: it converts
  the whole pool to float32 and back at every step. So a bfloat16 pool takes one row
  (batch-1 decode) by a ``dynamic_update_slice``, in place (a padding row goes to the
  scratch page 0), and more rows as a scatter of its int16 bit patterns
  (``bitcast_convert`` both ways: XLA CPU copies the pool twice, still half the bytes of
  the float32 round trip). XLA CPU has no bfloat16 dynamic_update_slice either: it
  converts the whole pool to float32 and back around it (in place, but every element; a
  JAX microbenchmark: 707 us a write to a pool of 25 MB, 34 us on its int16 bits, where
  XLA copies the pool instead when the reference attention's gather reads it). So the
  CPU-kernel programs write with a kernel of their own:
* ``kv_cache_write`` in the CPU-kernel programs: ``stablehlo.custom_call
  @tlaloc_cpu_kv_write_<pool dtype>`` (``tlaloc/kernels/cpu/kv_write.cc``) with its result
  aliased to the pool (``output_operand_aliases``): in place, only the rows touched, for
  any number of rows and either dtype, one call where the scatter took four to five
  fusions.
* ``stored_matmul``: ``stablehlo.custom_call @tlaloc_cpu_matmul_<format>`` (typed FFI),
  the CPU kernel of ``tlaloc._runtime.cpu_kernels``; only the CPU-kernel variant of a
  program contains it.
* ``sort_descending``: ``stablehlo.sort`` of (values, iota) on the last axis with a
  ``GT`` comparator, stable, so ties keep the lower index first.
* ``paged_attention``: its definition (``paged_attention_reference``, written with
  the primitives) is traced at the node's concrete types, specialised, and emitted
  in place: the lowering *is* the reference, as JAX's ``lower_fun`` does. The key
  positions come in as a ``stablehlo.iota`` rather than a constant.

Importing this module sets ``lower`` on the four serving ops. Like the kernel ops they
are not in the core primitive table (see ``tlaloc._prims.serving``), so the core
lowering table (``stablehlo_rules``) is left as it is.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .._core.aval import AbstractValue
from .._core.graph import Literal
from .._prims import serving as _sp
from .stablehlo import I64, out_aval

I32 = np.dtype(np.int32)
I16 = np.dtype(np.int16)
BF16 = np.dtype(ml_dtypes.bfloat16)
#: scatter bfloat16 pools as int16 bits (False: as bfloat16, the earlier programs; for benchmarks)
BF16_AS_BITS = True
#: how a bfloat16 pool takes up to DUS_MAX new rows: "update" (one dynamic_update_slice per
#: row, in place: no copy of the pool) or "scatter" (as int16 bits; XLA CPU copies the pool for
#: each bitcast_convert); more rows always scatter. DUS_MAX = 1: a chain of 16 updates (batch-16
#: decode) ran 13x slower than the int16 scatter (benchmarks/RESULTS.md, issue 18)
BF16_WRITE = "update"
DUS_MAX = 1


def _kv_cache_write(em, node, cache, new, slots):
    dt, sh = out_aval(node)
    P, BS, K, E = sh
    base = int(node.params.get("page_offset", 0))                            # the layer's first page
    n = int(node.inputs[1].aval.shape[0])
    upd = em.value(new, dt)                                                   # (N, K, E) in the pool dtype
    s = em.value(slots, I64)                                                  # (N,)
    from .._prims.stored_matmul import kernel_op_wanted
    if kernel_op_wanted("kv_cache_write"):
        return _write_by_kernel(em, cache, upd, s, sh, base)
    pad = em.compare("LT", s, em.const(0, I64, (n,)))
    if dt == BF16 and BF16_WRITE == "update" and n <= DUS_MAX:
        return _write_by_updates(em, cache, upd, s, pad, sh, base)
    page = em.binary("stablehlo.divide", s, em.const(BS, I64, (n,)))
    if base:
        page = em.binary("stablehlo.add", page, em.const(base, I64, (n,)))
    page = em.select(pad, em.const(P, I64, (n,)), page)
    offset = em.select(pad, em.const(0, I64, (n,)), em.binary("stablehlo.remainder", s, em.const(BS, I64, (n,))))
    idx = em.op("stablehlo.concatenate", [em.reshape(page, (n, 1)), em.reshape(offset, (n, 1))], (I64, (n, 2)),
                attrs={"dimension": "1 : i64"})                               # (N, 2): page, offset
    if n == 1:                                                                # see the module docstring
        idx = em.op("stablehlo.concatenate", [idx, idx], (I64, (2, 2)), attrs={"dimension": "0 : i64"})
        upd = em.op("stablehlo.concatenate", [upd, upd], (dt, (2, K, E)), attrs={"dimension": "0 : i64"})
    dims = ("#stablehlo.scatter<update_window_dims = [1, 2], inserted_window_dims = [0, 1], "
            "scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1>")
    pool, st = em.value(cache), dt
    if dt == BF16 and BF16_AS_BITS:                                           # see the module docstring
        st = I16
        pool = em.op("stablehlo.bitcast_convert", [pool], (st, sh))
        upd = em.op("stablehlo.bitcast_convert", [upd], (st, tuple(upd.shape)))
    with em.region([(st, ()), (st, ())]) as ((_, b), body):
        em.ret([b])                                                           # overwrite
    out = em.op("stablehlo.scatter", [pool, idx, upd], (st, sh),
                attrs={"scatter_dimension_numbers": dims, "indices_are_sorted": "false",
                       "unique_indices": "false"}, regions=[body])
    return out if st == dt else em.op("stablehlo.bitcast_convert", [out], (dt, sh))


def _write_by_kernel(em, cache, upd, s, sh, base):
    """The CPU kernel (``tlaloc_cpu_kv_write_<pool dtype>``), its result aliased to the pool: in
    place, only the N rows touched, whatever the dtype and N."""
    from .._runtime.cpu_kernels import op_target
    target = op_target("kv_cache_write_" + ("bf16" if upd.dtype == BF16 else "f32"))
    alias = "[#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 0, operand_tuple_indices = []>]"
    return em.op("stablehlo.custom_call", [em.value(cache), upd, s], (upd.dtype, sh),
                 attrs={"call_target_name": f'"{target}"', "api_version": "4 : i32",
                        "backend_config": f"{{page_offset = {int(base)} : i64}}", "output_operand_aliases": alias})


def _write_by_updates(em, cache, upd, s, pad, sh, base=0):
    """The N token rows written one ``dynamic_update_slice`` each, in order (XLA CPU updates
    the pool in place, whatever its dtype); a padding token (slot < 0) goes to slot 0 of the
    scratch page 0 (of the layer's pages, from page ``base``), which no sequence reads."""
    P, BS, K, E = sh
    n = s.shape[0]
    zero = em.const(0, I64, ())
    slot = em.select(pad, em.const(0, I64, (n,)), s)                          # (N,)
    pool = em.value(cache)
    for i in range(n):
        si = em.reshape(em.op("stablehlo.slice", [slot], (I64, (1,)),
                              attrs={"start_indices": f"array<i64: {i}>", "limit_indices": f"array<i64: {i + 1}>",
                                     "strides": "array<i64: 1>"}), ())
        page = em.binary("stablehlo.divide", si, em.const(BS, I64, ()))
        if base:
            page = em.binary("stablehlo.add", page, em.const(base, I64, ()))
        offset = em.binary("stablehlo.remainder", si, em.const(BS, I64, ()))
        row = em.op("stablehlo.slice", [upd], (upd.dtype, (1, K, E)),
                    attrs={"start_indices": f"array<i64: {i}, 0, 0>", "limit_indices": f"array<i64: {i + 1}, {K}, {E}>",
                           "strides": "array<i64: 1, 1, 1>"})
        pool = em.op("stablehlo.dynamic_update_slice", [pool, em.reshape(row, (1, 1, K, E)), page, offset, zero, zero],
                     (pool.dtype, sh))
    return pool


def _sort_descending(em, node, x):
    (dt, sh), (it, _) = out_aval(node, 0), out_aval(node, 1)
    v = em.value(x, dt)
    axis = len(sh) - 1
    idx = em.op("stablehlo.iota", [], (it, sh), attrs={"iota_dimension": f"{axis} : i64"})
    with em.region([(dt, ()), (dt, ()), (it, ()), (it, ())]) as ((a, b, _ai, _bi), body):
        em.ret([em.compare("GT", a, b)])
    outs = em.op("stablehlo.sort", [v, idx], [(dt, sh), (it, sh)],
                 attrs={"dimension": f"{axis} : i64", "is_stable": "true"}, regions=[body])
    return list(outs)


def lower_by_reference(fn, extra=None):
    """A lowering rule that traces ``fn(*inputs, **params)`` (primitives or tlaloc.numpy code) at the
    node's concrete input types, specialises it and emits it inline.

    ``extra(em, node) -> {keyword: Val}`` supplies more traced inputs, passed by keyword.
    """
    def rule(em, node, *ins):
        from .._core.builder import Builder
        from .._core.specialize import specialize
        avals = [AbstractValue(np.dtype(v.aval.dtype), tuple(int(d) for d in v.aval.shape)) for v in node.inputs]
        vals = [em.value(x) for x in ins]
        more = extra(em, node) if extra is not None else {}
        avals += [AbstractValue(v.dtype, v.shape) for v in more.values()]
        vals += list(more.values())
        b = Builder(name=node.prim.name)
        with b.active():
            args = [b.new_input(a) for a in avals]
            n = len(node.inputs)
            out = fn(*args[:n], **dict(node.params), **dict(zip(more, args[n:])))
            graph = b.finish(list(out) if node.prim.multiple_results else [out])
        graph = specialize(graph, avals)
        outs = em.lower_graph(graph, vals)
        outs = [em.value(o, o.aval.dtype, tuple(o.aval.shape)) if isinstance(o, Literal) else o for o in outs]
        return outs if node.prim.multiple_results else outs[0]
    rule.reference = fn
    return rule


def _key_positions(em, node):
    """``arange(M * BS)`` int32 as an iota, for paged_attention's key positions."""
    M, BS = int(node.inputs[3].aval.shape[1]), int(node.inputs[1].aval.shape[1])
    return {"key_positions": em.op("stablehlo.iota", [], (I32, (M * BS,)), attrs={"iota_dimension": "0 : i64"})}


def _stored_matmul(em, node, *ins):
    """``stablehlo.custom_call`` of the CPU kernel of the weight's format (typed FFI).

    A ``_p64`` kernel reads its weights in panel order: a program input is uploaded so by the
    executor (export lists it, ``cpu_kernels["panel64"]``); a weight computed inside the
    program (a converted one) is put in panel order here, by a transpose.
    """
    from .._runtime.cpu_kernels import PANEL, panel_target, target_name
    target = target_name(node.params["format"])
    vals = [em.value(x) for x in ins]
    if panel_target(target):
        vals = [vals[0]] + [v if v.name.startswith("%arg") else _panel_order(em, v, PANEL) for v in vals[1:]]
    return em.op("stablehlo.custom_call", vals, out_aval(node),
                 attrs={"call_target_name": f'"{target}"', "api_version": "4 : i32"})


def _panel_order(em, v, panel: int):
    """An (R, N) value in panel order (``cpu_kernels.pack_panels``): the bytes of
    ``v.reshape(R, N / panel, panel).transpose(1, 0, 2)`` (uint8: ``v.reshape(R / 2, 2, N / panel,
    panel).transpose(2, 0, 3, 1)``), as an (R, N) value again."""
    if len(v.shape) != 2:
        return v                                                        # a per-column scale
    R, N = v.shape
    if np.dtype(v.dtype) == np.uint8:                                   # q4_1 bytes: row pairs adjacent too
        split = em.reshape(v, (R // 2, 2, N // panel, panel))
        moved = em.op("stablehlo.transpose", [split], (v.dtype, (N // panel, R // 2, panel, 2)),
                      attrs={"permutation": "array<i64: 2, 0, 3, 1>"})
        return em.reshape(moved, (R, N))
    split = em.reshape(v, (R, N // panel, panel))
    moved = em.op("stablehlo.transpose", [split], (v.dtype, (N // panel, R, panel)),
                  attrs={"permutation": "array<i64: 1, 0, 2>"})
    return em.reshape(moved, (R, N))


_paged_attention_reference = lower_by_reference(_sp.paged_attention_reference, extra=_key_positions)


def _paged_attention(em, node, *ins):
    """The reference definition inline, or (``kernel=True``) the CPU kernel reading the pages in place."""
    params = dict(node.params)
    if not params.pop("kernel", False):
        return _paged_attention_reference(em, _Params(node, params), *ins)
    from .._runtime.cpu_kernels import op_target
    E = int(node.inputs[0].aval.shape[3])
    scale = float(E) ** -0.5 if params["scale"] is None else float(params["scale"])
    window = -1 if params["window"] is None else int(params["window"])
    pool = "bf16" if np.dtype(node.inputs[1].aval.dtype) == BF16 else "f32"
    config = f"scale = {float(np.float32(scale)):.9e} : f32, window = {window} : i64"
    op = "paged_attention_" + pool
    if params.get("page_offset"):                      # a pool of several layers: the kernel that takes the offset
        op, config = op + "_at", config + f", page_offset = {int(params['page_offset'])} : i64"
    return em.op("stablehlo.custom_call", [em.value(x) for x in ins], out_aval(node),
                 attrs={"call_target_name": f'"{op_target(op)}"', "api_version": "4 : i32",
                        "backend_config": "{" + config + "}"})


class _Params:
    """A node seen with other params (the reference lowering reads ``node.params`` and ``node.inputs``)."""

    def __init__(self, node, params):
        self.prim, self.inputs, self.params = node.prim, node.inputs, params


LOWERINGS = {
    "kv_cache_write": _kv_cache_write,
    "stored_matmul": _stored_matmul,
    "sort_descending": _sort_descending,
    "paged_attention": _paged_attention,
}

for _name, _rule in LOWERINGS.items():
    _sp.SERVING_OPS[_name].lower = _rule

__all__ = ["LOWERINGS", "lower_by_reference"]
