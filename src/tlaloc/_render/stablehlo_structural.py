"""StableHLO lowerings of reductions, shape primitives and linear algebra."""
from __future__ import annotations

import numpy as np

from .stablehlo import BOOL, I64, i64s, out_aval


def _axes(axes, rank):
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    return tuple(sorted(int(a) % rank for a in axes)) if rank else ()


def _extreme(dtype, low: bool):
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return not low
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if low else info.max
    return -np.inf if low else np.inf


# -- reductions -----------------------------------------------------------------------------

_REDUCE = {"reduce_sum": ("stablehlo.add", 0), "reduce_prod": ("stablehlo.multiply", 1),
           "reduce_max": ("stablehlo.maximum", "low"), "reduce_min": ("stablehlo.minimum", "high"),
           "reduce_any": ("stablehlo.or", False), "reduce_all": ("stablehlo.and", True)}


def reduce(em, v, axes, op_name, init):
    """``stablehlo.reduce`` of ``v`` over ``axes`` (result without the reduced axes).

    For IREE (``em.split_reductions``) a reduction over several axes is written as
    one reduction per axis, innermost first: IREE 3.13's llvm-cpu codegen fails on a
    multi-axis sum of a product with a broadcast operand ("'vector.contract' op
    invalid accumulator/result vector shape")."""
    if not axes:
        return v
    if len(axes) > 1 and getattr(em, "split_reductions", False):
        for a in sorted(axes, reverse=True):
            v = reduce(em, v, (a,), op_name, init)
        return v
    init_v = em.const(init, v.dtype, ())
    shape = tuple(d for i, d in enumerate(v.shape) if i not in axes)
    body = em.reducer(op_name, v.dtype)
    return em.op("stablehlo.reduce", [v, init_v], (v.dtype, shape),
                 attrs={"dimensions": i64s(axes)}, regions=[body])


def _reduction(name):
    op_name, init = _REDUCE[name]

    def rule(em, node, x):
        dt, sh = out_aval(node)
        v = em.value(x, dt)
        if dt == BOOL and op_name in ("stablehlo.maximum", "stablehlo.minimum"):
            op = "stablehlo.or" if op_name == "stablehlo.maximum" else "stablehlo.and"
        else:
            op = op_name
        start = _extreme(dt, init == "low") if isinstance(init, str) else init
        out = reduce(em, v, _axes(node.params["axes"], len(v.shape)), op, start)
        return em.reshape(out, sh)
    return rule


def _arg_reduction(is_max: bool):
    def rule(em, node, x):
        dt, sh = out_aval(node)
        v = em.value(x)
        axis = node.params["axis"]
        if axis is None:
            v = em.reshape(v, (int(np.prod(v.shape)),))
            axis = 0
        axis = int(axis) % len(v.shape)
        idx = em.op("stablehlo.iota", [], (I64, v.shape), attrs={"iota_dimension": f"{axis} : i64"})
        init = [em.const(_extreme(v.dtype, is_max), v.dtype, ()), em.const(0, I64, ())]
        with em.region([(v.dtype, ()), (I64, ()), (v.dtype, ()), (I64, ())]) as ((a, ai, b, bi), body):
            better = em.compare("GT" if is_max else "LT", a, b)
            if v.dtype.kind in "fV" or v.dtype.name == "bfloat16":
                a_nan, b_nan = em.compare("NE", a, a), em.compare("NE", b, b)
                better = em.binary("stablehlo.or", better,
                                   em.binary("stablehlo.and", a_nan, em.unary("stablehlo.not", b_nan)))
                tie = em.binary("stablehlo.or", em.compare("EQ", a, b), em.binary("stablehlo.and", a_nan, b_nan))
            else:
                tie = em.compare("EQ", a, b)
            first = em.binary("stablehlo.and", tie, em.compare("LT", ai, bi))
            take_idx = em.binary("stablehlo.or", better, first)
            em.ret([em.select(better, a, b), em.select(take_idx, ai, bi)])
        shape = tuple(d for i, d in enumerate(v.shape) if i != axis)
        outs = em.op("stablehlo.reduce", [v, idx] + init, [(v.dtype, shape), (I64, shape)],
                     attrs={"dimensions": i64s([axis])}, regions=[body])
        return em.reshape(em.convert(outs[1], dt), sh)
    return rule


# -- shapes ----------------------------------------------------------------------------------

def _reshape(em, node, x, *rest):
    dt, sh = out_aval(node)
    return em.reshape(em.value(x, dt), sh)


def _transpose(em, node, x):
    dt, sh = out_aval(node)
    v = em.value(x, dt)
    axes = node.params["axes"]
    r = len(v.shape)
    perm = tuple(reversed(range(r))) if axes is None else tuple(int(a) % r for a in axes)
    return em.op("stablehlo.transpose", [v], (dt, sh), attrs={"permutation": i64s(perm)})


def _swapaxes(em, node, x):
    dt, sh = out_aval(node)
    v = em.value(x, dt)
    r = len(v.shape)
    perm = list(range(r))
    a, b = node.params["axis1"] % r, node.params["axis2"] % r
    perm[a], perm[b] = perm[b], perm[a]
    return em.op("stablehlo.transpose", [v], (dt, sh), attrs={"permutation": i64s(perm)})


def _broadcast(em, node, x, *like):
    dt, sh = out_aval(node)
    return em.value(x, dt, sh)


def _broadcast_in_dim(em, node, x):
    dt, sh = out_aval(node)
    return em.broadcast(em.value(x, dt), sh, node.params["broadcast_dimensions"])


def _concatenate(em, node, *xs):
    dt, sh = out_aval(node)
    axis = int(node.params["axis"]) % len(sh)
    vals = [em.value(x, dt) for x in xs]
    return em.op("stablehlo.concatenate", vals, (dt, sh), attrs={"dimension": f"{axis} : i64"})


def slice_(em, v, start, limit, strides=None):
    strides = strides or [1] * len(start)
    shape = tuple(len(range(a, b, s)) for a, b, s in zip(start, limit, strides))
    return em.op("stablehlo.slice", [v], (v.dtype, shape),
                 attrs={"start_indices": i64s(start), "limit_indices": i64s(limit), "strides": i64s(strides)})


def _pad(em, node, x):
    dt, sh = out_aval(node)
    pw = node.params["pad_width"]
    if len(pw) == 1:                                   # one pair for every axis
        pw = tuple(pw) * len(sh)
    return em.op("stablehlo.pad", [em.value(x, dt), em.const(node.params["constant"], dt, ())], (dt, sh),
                 attrs={"edge_padding_low": i64s([lo for lo, _ in pw]),
                        "edge_padding_high": i64s([hi for _, hi in pw]),
                        "interior_padding": i64s([0] * len(pw))})


def _flip(em, node, x):
    dt, sh = out_aval(node)
    axes = _axes(node.params["axes"], len(sh))
    return em.op("stablehlo.reverse", [em.value(x, dt)], (dt, sh), attrs={"dimensions": i64s(axes)})


def _iota(em, node):
    dt, sh = out_aval(node)
    return em.op("stablehlo.iota", [], (dt, sh), attrs={"iota_dimension": f"{int(node.params['dimension'])} : i64"})


def _slice(em, node, x):
    dt, _ = out_aval(node)
    p = node.params
    return slice_(em, em.value(x, dt), p["start_indices"], p["limit_indices"], p["strides"])


def _full(em, node, *dims):
    dt, sh = out_aval(node)
    return em.const(node.params["fill_value"], dt, sh)


def _const_rule(value_of):
    def rule(em, node, *xs):
        dt, sh = out_aval(node)
        return em.const(value_of(node, *xs), dt, sh)
    return rule


def _mask(kind):
    def rule(em, node, a):
        _, sh = out_aval(node)
        r = len(sh)
        rows = em.op("stablehlo.iota", [], (I64, sh), attrs={"iota_dimension": f"{r - 2} : i64"})
        cols = em.op("stablehlo.iota", [], (I64, sh), attrs={"iota_dimension": f"{r - 1} : i64"})
        if kind == "diag":
            return em.compare("EQ", rows, cols)
        k = em.const(node.params["k"], I64, sh)
        return em.compare("LE", em.binary("stablehlo.subtract", cols, rows), k)
    return rule


# -- linear algebra ----------------------------------------------------------------------------

def _dot_general(em, node, x, y):
    dt, sh = out_aval(node)
    (lc, rc), (lb, rb) = node.params["contracting"], node.params["batch"]
    dims = (f"#stablehlo.dot<lhs_batching_dimensions = [{', '.join(map(str, lb))}], "
            f"rhs_batching_dimensions = [{', '.join(map(str, rb))}], "
            f"lhs_contracting_dimensions = [{', '.join(map(str, lc))}], "
            f"rhs_contracting_dimensions = [{', '.join(map(str, rc))}]>")
    # with preferred_element_type the operands keep their (narrower) dtype: i8 x i8 -> i32, bf16 x bf16 -> f32
    opd = np.dtype(node.inputs[0].aval.dtype) if node.params.get("preferred_element_type") else dt
    return em.op("stablehlo.dot_general", [em.value(x, opd), em.value(y, opd)], (dt, sh),
                 attrs={"dot_dimension_numbers": dims})


def lower_triangle(em, v, k=0):
    r = len(v.shape)
    rows = em.op("stablehlo.iota", [], (I64, v.shape), attrs={"iota_dimension": f"{r - 2} : i64"})
    cols = em.op("stablehlo.iota", [], (I64, v.shape), attrs={"iota_dimension": f"{r - 1} : i64"})
    keep = em.compare("LE", em.binary("stablehlo.subtract", cols, rows), em.const(k, I64, v.shape))
    return em.select(keep, v, em.const(0, v.dtype, v.shape))


def _cholesky(em, node, a):
    dt, sh = out_aval(node)
    out = em.op("stablehlo.cholesky", [em.value(a, dt)], (dt, sh), attrs={"lower": "true"})
    return lower_triangle(em, out)


def _triangular_solve(em, node, a, b):
    dt, sh = out_aval(node)
    av, bv = em.value(a, dt), em.value(b, dt)
    vector = len(bv.shape) == len(av.shape) - 1
    if vector:
        bv = em.reshape(bv, bv.shape + (1,))
    batch = av.shape[:-2]
    if bv.shape[:-2] != batch:
        bv = em.broadcast(bv, batch + bv.shape[-2:])
    trans = "TRANSPOSE" if node.params["transpose_a"] else "NO_TRANSPOSE"
    out = em.op("stablehlo.triangular_solve", [av, bv], (dt, bv.shape),
                attrs={"left_side": "true", "lower": "true" if node.params["lower"] else "false",
                       "unit_diagonal": "false", "transpose_a": f"#stablehlo<transpose {trans}>"})
    return em.reshape(out, sh)


LOWERINGS = {name: _reduction(name) for name in _REDUCE}
LOWERINGS.update({
    "argmax": _arg_reduction(True), "argmin": _arg_reduction(False),
    "reshape": _reshape, "expand_dims": _reshape, "squeeze": _reshape,
    "transpose": _transpose, "swapaxes": _swapaxes,
    "broadcast_to": _broadcast, "broadcast_in_dim": _broadcast_in_dim,
    "stop_gradient": _broadcast,
    "copy": _broadcast, "stack_ys": _broadcast, "name_axes": _broadcast, "slice": _slice, "full": _full,
    "concatenate": _concatenate, "pad": _pad, "flip": _flip, "iota": _iota,
    "zeros_like": _const_rule(lambda node, x: 0),
    "tril_mask": _mask("tril"), "diag_mask": _mask("diag"),
    "dot_general": _dot_general, "cholesky": _cholesky, "triangular_solve": _triangular_solve,
})
