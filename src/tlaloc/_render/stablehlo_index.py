"""StableHLO lowerings of indexing: ``getitem``, ``index_add``, ``index_set``,
``dynamic_slice``/``dynamic_update_slice``, ``gather``/``scatter_add`` along an
axis, and ``diagonal``/``diagonal_scatter``.

Basic indexing (static ints and slices, scalar run-time ints, ``None``,
``...``) lowers to ``slice``/``reverse``/``dynamic_slice`` + ``reshape``.
Advanced indexing and indexed updates go through *point* gathers/scatters:
for each element of the indexed result, the coordinates into ``x`` are
computed (``iota`` for slices, the index arrays for advanced axes, placed by
NumPy's rule: together where the advanced indices are adjacent, else first).

Differences from NumPy that compiled code cannot avoid: an out-of-range
run-time index is clamped into range instead of raising ``IndexError``, for reads
(gather, ``dynamic_slice``) and writes (scatter) alike, so that ``x[i]``, its gradient
and ``x[i] = v`` touch the same element (regression: the scatter dropped the write, and
the gradient of a clamped read was 0); a window ``x[i:i + c]`` past an end is moved
back into range, where NumPy returns a shorter slice; ``x[i] = v`` with repeated indices keeps
one of the writes, not necessarily the last.
"""
from __future__ import annotations

import numpy as np

from .._core.graph import Literal
from .._prims.indexing import MASK_REFUSAL, is_window
from ..errors import NoRuleError
from .stablehlo import BOOL, I64, Val, i64s, ints, out_aval
from .stablehlo_structural import slice_


def _index_val(em, x, dim):
    """A run-time index as i64 with NumPy's negative wrap (``i < 0 -> i + dim``), except
    for an index known to be non-negative (a ``for`` loop's over a non-negative range):
    IREE's stream partitioning refuses the wrap's ``select`` on a loop index feeding
    two slices inside a loop that holds a bounded ``while`` ("circular dependency"; the
    Hessian of a while nested in a for, measured with iree-base-compiler 3.13)."""
    v = em.value(x, I64)
    if v.name in em.non_negative:
        return v
    neg = em.compare("LT", v, em.const(0, I64, v.shape))
    wrapped = em.select(neg, em.binary("stablehlo.add", v, em.const(dim, I64, v.shape)), v)
    return em.op("stablehlo.clamp", [em.const(0, I64, ()), wrapped, em.const(max(dim - 1, 0), I64, ())],
                 (I64, wrapped.shape))


def _entries(spec, dyn, rank):
    """Expand ``...``; return a list of entries, one per index item (``None`` included):
    ("slice", axis, start, step, n) | ("int", axis, k) | ("dint", axis, j) | ("adv", axis, j) | ("new",)
    where ``dims`` are looked up by the caller."""
    def kind_of(e):
        if e[0] == "d":
            a = dyn[e[1]]
            dt = np.asarray(a.value).dtype if isinstance(a, Literal) else a.dtype
            nd = np.ndim(a.value) if isinstance(a, Literal) else len(a.shape)
            if dt == BOOL:
                raise NoRuleError(f"boolean-mask indexing {MASK_REFUSAL}")
            if dt.kind not in "iu":
                raise NoRuleError(f"an index must be an integer array, got {dt}")
            return "adv" if nd else "dint"
        return e[0]

    consumed = sum(1 for e in spec if e[0] in "isd")
    out, axis = [], 0
    for e in spec:
        if e[0] == "e":
            for _ in range(rank - consumed):
                out.append(("s", axis, None, None, None))
                axis += 1
        elif e[0] == "n":
            out.append(("new",))
        else:
            out.append((kind_of(e),) + (axis,) + tuple(e[1:]))
            axis += 1
    while axis < rank:
        out.append(("s", axis, None, None, None))
        axis += 1
    return out


def _resolve(entries, shape):
    """Static slices to (start, step, n); static ints wrapped."""
    res = []
    for e in entries:
        if e[0] == "s" and is_window(("s",) + tuple(e[2:])):   # x[i:i + c:s]: ("win", axis, j, c, s)
            _, axis, lo, hi, st = e
            if hi[2] > shape[axis]:
                raise NoRuleError(f"the window x[i:i + {hi[2]}] is longer than axis {axis} (size {shape[axis]})")
            res.append(("win", axis, lo[1], hi[2], st or 1))
        elif e[0] == "s":
            _, axis, lo, hi, st = e
            if any(isinstance(b, tuple) for b in (lo, hi, st)):
                raise NoRuleError("a slice with a bound known only at run time (x[i:j]) has a size known only "
                                  "at run time; use tlaloc.numpy.lax.dynamic_slice(x, starts, sizes) with a "
                                  "static size")
            start, stop, step = slice(lo, hi, st).indices(shape[axis])
            res.append(("slice", axis, start, step, len(range(start, stop, step))))
        elif e[0] == "i":
            k = e[2] + shape[e[1]] if e[2] < 0 else e[2]
            res.append(("int", e[1], k))
        elif e[0] in ("dint", "adv"):
            res.append((e[0], e[1], e[2]))
        else:
            res.append(e)
    return res


def _basic(em, v, entries):
    """Static slices/ints then run-time ints; returns the value before the final reshape."""
    starts, limits, strides, rev = [], [], [], []
    for e in entries:
        if e[0] == "slice":
            _, axis, start, step, n = e
            dim = v.shape[axis]
            if step < 0:
                rev.append(axis)
                start = dim - 1 - start
                step = -step
            starts.append(start if n else 0)
            limits.append(start + (n - 1) * step + 1 if n else 0)
            strides.append(step)
        elif e[0] == "int":
            starts.append(e[2])
            limits.append(e[2] + 1)
            strides.append(1)
        elif e[0] in ("dint", "win"):
            starts.append(0)
            limits.append(v.shape[e[1]])
            strides.append(1)
    if rev:
        v = em.op("stablehlo.reverse", [v], (v.dtype, v.shape), attrs={"dimensions": i64s(sorted(rev))})
    if (starts, limits, strides) != ([0] * len(v.shape), list(v.shape), [1] * len(v.shape)):
        v = slice_(em, v, starts, limits, strides)
    return v


def _coords(em, entries, shape, dyn):
    """Coordinates into ``x`` of every element of the indexed result.

    Returns ``(R, coords)``: the result shape without new axes, and one i64
    array of shape ``R`` per axis of ``x``.
    """
    adv_pos = [k for k, e in enumerate(entries) if e[0] in ("adv", "dint", "int")]
    has_arrays = any(e[0] == "adv" for e in entries)
    index_vals = {}
    b_shape = ()
    if has_arrays:
        for e in entries:
            if e[0] == "adv":
                iv = _index_val(em, dyn[e[2]], shape[e[1]])
                index_vals[e[1]] = iv
                b_shape = np.broadcast_shapes(b_shape, iv.shape)
    adjacent = has_arrays and adv_pos == list(range(adv_pos[0], adv_pos[-1] + 1))
    layout = []                        # ("slice", entry) or ("B",)
    if has_arrays and not adjacent:
        layout.append(("B",))
    for k, e in enumerate(entries):
        if e[0] in ("slice", "win"):
            layout.append(("slice", e))
        elif has_arrays and adjacent and k == adv_pos[0]:
            layout.append(("B",))
    R, b_at = [], None
    for item in layout:
        if item[0] == "B":
            b_at = len(R)
            R.extend(b_shape)
        else:
            R.append(len(range(0, item[1][3], item[1][4])) if item[1][0] == "win" else item[1][4])
    R = tuple(R)
    coords = [None] * len(shape)
    pos = 0
    for item in layout:
        if item[0] == "B":
            pos += len(b_shape)
            continue
        io = em.op("stablehlo.iota", [], (I64, R), attrs={"iota_dimension": f"{pos} : i64"})
        if item[1][0] == "win":           # x[i:i + c:s]: i clamped into [0, dim - c], as dynamic_slice does
            _, axis, j, c, step = item[1]
            start = _index_val(em, dyn[j], shape[axis])
            start = em.op("stablehlo.clamp", [em.const(0, I64, ()), start, em.const(shape[axis] - c, I64, ())],
                          (I64, ()))
            coords[axis] = em.binary("stablehlo.add", em.binary("stablehlo.multiply", io, em.const(step, I64, R)),
                                     em.broadcast(start, R, []))
            pos += 1
            continue
        _, axis, start, step, n = item[1]
        coords[axis] = em.binary("stablehlo.add", em.binary("stablehlo.multiply", io, em.const(step, I64, R)),
                                 em.const(start, I64, R))
        pos += 1
    for e in entries:
        if e[0] == "int":
            coords[e[1]] = em.const(e[2], I64, R)
        elif e[0] == "dint":
            coords[e[1]] = em.broadcast(_index_val(em, dyn[e[2]], shape[e[1]]), R, [])
        elif e[0] == "adv":
            iv = em.broadcast(index_vals[e[1]], b_shape)
            coords[e[1]] = em.broadcast(iv, R, range(b_at, b_at + len(b_shape)))
    return R, coords


def _stack(em, coords, R):
    cols = [em.reshape(c, R + (1,)) for c in coords]
    if len(cols) == 1:
        return cols[0]
    return em.op("stablehlo.concatenate", cols, (I64, R + (len(cols),)), attrs={"dimension": f"{len(R)} : i64"})


def gather_points(em, v, coords, R):
    r = len(v.shape)
    idx = _stack(em, coords, R)
    dims = (f"#stablehlo.gather<offset_dims = [], collapsed_slice_dims = {ints(range(r))}, "
            f"start_index_map = {ints(range(r))}, index_vector_dim = {len(R)}>")
    return em.op("stablehlo.gather", [v, idx], (v.dtype, R),
                 attrs={"dimension_numbers": dims, "slice_sizes": i64s([1] * r), "indices_are_sorted": "false"})


def _combiner(em, dtype, mode):
    with em.region([(dtype, ()), (dtype, ())]) as ((a, b), body):
        em.ret([em.binary("stablehlo.add", a, b) if mode == "add" else b])
    return body


def scatter_points(em, v, coords, R, updates, mode):
    r = len(v.shape)
    if R == () and em.backend == "iree":
        return _select_point(em, v, coords, updates, mode)
    idx = _stack(em, coords, R)
    dims = (f"#stablehlo.scatter<update_window_dims = [], inserted_window_dims = {ints(range(r))}, "
            f"scatter_dims_to_operand_dims = {ints(range(r))}, index_vector_dim = {len(R)}>")
    return em.op("stablehlo.scatter", [v, idx, updates], (v.dtype, v.shape),
                 attrs={"scatter_dimension_numbers": dims, "indices_are_sorted": "false",
                        "unique_indices": "false"}, regions=[_combiner(em, v.dtype, mode)])


def _select_point(em, v, coords, update, mode):
    """``v`` with ``update`` added at (or written to) one point, elementwise: a mask of
    the point and a select. For IREE: its 3.13 runtime fails on an in-place update
    (scatter or dynamic_update_slice) of a constant inside an ``if`` inside a ``while``
    ("indirect buffer reference slot 0 is out range ... copy_buffer")."""
    mask = None
    for k, c in enumerate(coords):
        io = em.op("stablehlo.iota", [], (I64, v.shape), attrs={"iota_dimension": f"{k} : i64"})
        hit = em.compare("EQ", io, em.broadcast(c, v.shape, []))
        mask = hit if mask is None else em.binary("stablehlo.and", mask, hit)
    upd = em.broadcast(em.reshape(update, ()), v.shape, [])
    if mode == "add":
        return em.binary("stablehlo.add", v, em.select(mask, upd, em.const(0, v.dtype, v.shape)))
    return em.select(mask, upd, v)


# -- getitem / index_add / index_set ------------------------------------------------------

def _getitem(em, node, x, *dyn):
    dt, sh = out_aval(node)
    v = em.value(x, dt)
    entries = _resolve(_entries(node.params["spec"], dyn, len(v.shape)), v.shape)
    if any(e[0] == "adv" for e in entries):
        R, coords = _coords(em, [e for e in entries if e[0] != "new"], v.shape, dyn)
        return em.reshape(gather_points(em, v, coords, R), sh)
    out = _basic(em, v, entries)
    dints = [e for e in entries if e[0] in ("dint", "win")]
    if dints:
        starts = [em.const(0, I64, ())] * len(out.shape)
        sizes = list(out.shape)
        for e in dints:
            starts[e[1]] = _index_val(em, dyn[e[2]], v.shape[e[1]])
            sizes[e[1]] = 1 if e[0] == "dint" else e[3]      # a window: its start clamped into range
        out = em.op("stablehlo.dynamic_slice", [out] + starts, (dt, tuple(sizes)),
                    attrs={"slice_sizes": i64s(sizes)})
        strides = [1] * len(out.shape)
        for e in dints:
            if e[0] == "win":
                strides[e[1]] = e[4]
        if any(s != 1 for s in strides):          # a strided window x[i:i + c:s]: every s-th of the c
            out = slice_(em, out, [0] * len(out.shape), list(out.shape), strides)
    return em.reshape(out, sh)


def _index_update(mode):
    def rule(em, node, x, val, *dyn):
        dt, sh = out_aval(node)
        v = em.value(x, dt)
        entries = _resolve(_entries(node.params["spec"], dyn, len(v.shape)), v.shape)
        R, coords = _coords(em, [e for e in entries if e[0] != "new"], v.shape, dyn)
        full = _indexed_shape(v, node.params["spec"], dyn)
        upd = em.reshape(em.value(val, dt, full), R)
        return scatter_points(em, v, coords, R, upd, mode)
    return rule


def _indexed_shape(x: Val, spec, dyn):
    """The shape NumPy gives ``x[idx]`` (from the ``getitem`` shape rule)."""
    from .._core.aval import AbstractValue
    from .._core.primitive import REGISTRY
    avals = [AbstractValue(np.asarray(d.value).dtype, np.shape(d.value)) if isinstance(d, Literal)
             else AbstractValue(d.dtype, d.shape) for d in dyn]
    return tuple(REGISTRY["getitem"].shape_rule(AbstractValue(x.dtype, x.shape), *avals, spec=spec))


# -- StableHLO-style slicing and axis gathers ----------------------------------------------

def _dynamic_slice(em, node, x, *starts):
    dt, sh = out_aval(node)
    v = em.value(x, dt)
    st = [em.value(s, I64, ()) for s in starts]
    return em.op("stablehlo.dynamic_slice", [v] + st, (dt, sh), attrs={"slice_sizes": i64s(sh)})


def _dynamic_update_slice(em, node, x, u, *starts):
    dt, sh = out_aval(node)
    uv = em.value(u, dt)
    st = [em.value(s, I64, ()) for s in starts]
    return em.op("stablehlo.dynamic_update_slice", [em.value(x, dt), uv] + st, (dt, sh))


def _gather(em, node, x, indices):
    dt, sh = out_aval(node)
    v = em.value(x, dt)
    a = int(node.params["axis"]) % len(v.shape)
    idx = _index_val(em, indices, v.shape[a])
    ni = len(idx.shape)
    offset = list(range(a)) + list(range(a + ni, len(sh)))
    sizes = [1 if i == a else d for i, d in enumerate(v.shape)]
    dims = (f"#stablehlo.gather<offset_dims = {ints(offset)}, collapsed_slice_dims = [{a}], "
            f"start_index_map = [{a}], index_vector_dim = {ni}>")
    return em.op("stablehlo.gather", [v, idx], (dt, sh),
                 attrs={"dimension_numbers": dims, "slice_sizes": i64s(sizes), "indices_are_sorted": "false"})


def _scatter_add(em, node, x, indices, updates):
    dt, sh = out_aval(node)
    v = em.value(x, dt)
    a = int(node.params["axis"]) % len(sh)
    idx = _index_val(em, indices, sh[a])
    ni = len(idx.shape)
    upd_shape = tuple(sh[:a]) + idx.shape + tuple(sh[a + 1:])
    upd = em.value(updates, dt, upd_shape)
    window = list(range(a)) + list(range(a + ni, len(upd_shape)))
    dims = (f"#stablehlo.scatter<update_window_dims = {ints(window)}, inserted_window_dims = [{a}], "
            f"scatter_dims_to_operand_dims = [{a}], index_vector_dim = {ni}>")
    return em.op("stablehlo.scatter", [v, idx, upd], (dt, sh),
                 attrs={"scatter_dimension_numbers": dims, "indices_are_sorted": "false",
                        "unique_indices": "false"}, regions=[_combiner(em, dt, "add")])


# -- diagonals -----------------------------------------------------------------------------

def _diag_coords(em, shape, offset, axis1, axis2):
    r = len(shape)
    a1, a2 = axis1 % r, axis2 % r
    rest = [i for i in range(r) if i not in (a1, a2)]
    n, m = shape[a1], shape[a2]
    k = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    R = tuple(shape[i] for i in rest) + (k,)
    coords = [None] * r
    for p, i in enumerate(rest):
        coords[i] = em.op("stablehlo.iota", [], (I64, R), attrs={"iota_dimension": f"{p} : i64"})
    diag = em.op("stablehlo.iota", [], (I64, R), attrs={"iota_dimension": f"{len(rest)} : i64"})
    coords[a1] = em.binary("stablehlo.add", diag, em.const(max(0, -offset), I64, R))
    coords[a2] = em.binary("stablehlo.add", diag, em.const(max(0, offset), I64, R))
    return R, coords


def _diagonal(em, node, a):
    dt, sh = out_aval(node)
    v = em.value(a, dt)
    p = node.params
    R, coords = _diag_coords(em, v.shape, p["offset"], p["axis1"], p["axis2"])
    return em.reshape(gather_points(em, v, coords, R), sh)


def _diagonal_scatter(em, node, g, like):
    dt, sh = out_aval(node)
    p = node.params
    R, coords = _diag_coords(em, sh, p["offset"], p["axis1"], p["axis2"])
    zeros = em.const(0, dt, sh)
    return scatter_points(em, zeros, coords, R, em.value(g, dt, R), "set")


LOWERINGS = {
    "getitem": _getitem, "index_add": _index_update("add"), "index_set": _index_update("set"),
    "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice, "gather": _gather, "scatter_add": _scatter_add,
    "diagonal": _diagonal, "diagonal_scatter": _diagonal_scatter,
}
