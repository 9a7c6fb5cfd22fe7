"""NumPy indexing as primitives: ``getitem``, ``index_set`` (``x[i] = v``) and
``index_add`` (``x[i] += v``, repeated indices accumulate like ``np.add.at``),
plus the StableHLO-style ``dynamic_slice``, ``dynamic_update_slice``, ``gather``
(``take`` along an axis) and ``scatter_add``. The static ``slice`` is in ``slicing.py``.

An index is split into a static ``spec`` (a tuple kept in the node's params)
and dynamic operands (arrays and symbolic scalars). Spec entries:

* ``("i", k)``: a static integer;  ``("d", j)``: dynamic operand ``j``;
* ``("s", start, stop, step)``: a slice whose bounds are ints, ``None`` or ``("d", j)``; a
  window ``x[i:i + c]`` (``c`` a static int) has ``start = ("d", j)`` and ``stop = ("o", j, c)``:
  its size is ``c`` whatever ``i`` (``is_window``), so compiled code can slice it
  (``stablehlo.dynamic_slice``, whose start is clamped into range where NumPy would
  return a shorter slice);
* ``("n",)``: ``None`` (new axis);  ``("e",)``: ``...``.
"""
from __future__ import annotations

import numpy as np

from .._core.primitive import Primitive
from ..errors import ShapeError
from ._rules import check_concrete_mix, refuse_float_mix
from .broadcasting import sum_to, zeros_like


#: Why compiled or batched code refuses an index by a boolean mask (its result's size is its count of
#: True values, known only at run time), and what to write instead.
MASK_REFUSAL = ("has a size known only at run time (the number of True values of the mask); compiled code "
                "cannot express it: use np.where(mask, x, 0) instead (a masked sum: np.sum(np.where(mask, x, 0)))")


def is_mask(aval) -> bool:
    """Whether an index operand of aval ``aval`` is a boolean mask."""
    return aval.dtype is not None and aval.dtype.kind == "b"


class Offset:
    """The stop of a window ``x[i:i + c]``: ``base`` (the slice's start, a symbolic integer) plus
    the static int ``c`` (the front end makes it where the source reads ``i:i + c``)."""
    __slots__ = ("base", "c")

    def __init__(self, base, c: int):
        self.base, self.c = base, int(c)


def is_window(e) -> bool:
    """A spec slice entry ``x[i:i + c]`` (see the module docstring)."""
    return (e[0] == "s" and isinstance(e[1], tuple) and e[1][0] == "d" and isinstance(e[2], tuple)
            and e[2][0] == "o" and e[2][1] == e[1][1] and (e[3] is None or type(e[3]) is int and e[3] >= 1))


def split_index(idx):
    """Python index -> (spec, dynamic operands)."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    spec, dyn = [], []

    def bound(b):
        if b is None or isinstance(b, (int, np.integer)) and not isinstance(b, bool):
            return None if b is None else int(b)
        if isinstance(b, Offset):
            j = next((k for k, d in enumerate(dyn) if d is b.base), None)
            if j is None:
                dyn.append(b.base)
                j = len(dyn) - 1
            return ("o", j, b.c)
        dyn.append(b)
        return ("d", len(dyn) - 1)

    for item in idx:
        if item is None:
            spec.append(("n",))
        elif item is Ellipsis:
            spec.append(("e",))
        elif isinstance(item, slice):
            spec.append(("s", bound(item.start), bound(item.stop), bound(item.step)))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            spec.append(("i", int(item)))
        else:
            if isinstance(item, (list, tuple)):
                item = np.asarray(item)
            dyn.append(item)
            spec.append(("d", len(dyn) - 1))
    return tuple(spec), dyn


def build_index(spec, dyn):
    """(spec, dynamic values) -> a NumPy index tuple."""
    def bound(b):
        if isinstance(b, tuple):
            return int(dyn[b[1]]) + (b[2] if b[0] == "o" else 0)
        return b

    out = []
    for e in spec:
        tag = e[0]
        if tag == "i":
            out.append(e[1])
        elif tag == "d":
            v = dyn[e[1]]
            out.append(int(v) if np.ndim(v) == 0 and np.asarray(v).dtype.kind in "iu" else v)
        elif tag == "s":
            out.append(slice(bound(e[1]), bound(e[2]), bound(e[3])))
        elif tag == "n":
            out.append(None)
        else:
            out.append(Ellipsis)
    return tuple(out)


def _check_windows(spec, dyn, shape):
    """A window ``x[i:i + c]`` must lie inside its axis: NumPy would return a shorter (or, for a
    negative ``i``, an unrelated) slice, while the window's size is ``c`` in the graph and compiled
    code moves it into range. Refused by name here rather than computed differently from tl.jit
    (regression: 8.03 eagerly, 9.88 compiled, and a broadcast error in the Jacobians)."""
    consumed = sum(1 for e in spec if e[0] in ("i", "s", "d"))
    axis = 0
    for e in spec:
        if e[0] == "e":
            axis += len(shape) - consumed
            continue
        if is_window(e):
            i, c, n = int(dyn[e[1][1]]), e[2][2], shape[axis]
            if not 0 <= i <= n - c:
                raise ShapeError(f"indexing: the window x[i:i + {c}] with i = {i} runs outside axis {axis} "
                                 f"(size {n}); NumPy would return a shorter slice, which compiled code cannot. "
                                 f"Keep i in [0, {n - c}] (e.g. loop over range(len(x) - {c - 1})), or pad x")
        if e[0] in ("i", "s", "d"):
            axis += 1


def _getitem_impl(x, *dyn, spec):
    if any(is_window(e) for e in spec):
        _check_windows(spec, dyn, np.shape(x))
    try:
        return np.asarray(x)[build_index(spec, dyn)]
    except IndexError as e:
        raise ShapeError(f"indexing: {e}") from None


def _getitem_shape(x, *dyn, spec):
    if x.shape is None or any(type(d) is not int for d in x.shape):
        return None
    if any(d.shape is None or any(type(s) is not int for s in d.shape) for d in dyn):
        return None
    if any(is_window(e) for e in spec):           # x[i:i + c]: c along that axis, as x[0:c]
        spec = _windows_at_zero(spec, x.shape)
    if any(e[0] == "s" and any(isinstance(b, tuple) for b in e[1:]) for e in spec):
        return None
    dummy = np.broadcast_to(np.empty((), np.int8), x.shape)
    masks = [is_mask(d) for d in dyn]
    if not any(masks):
        sample = [np.zeros(d.shape, dtype=d.dtype if d.dtype is not None else np.int64) for d in dyn]
        try:
            return tuple(dummy[build_index(spec, sample)].shape)
        except IndexError as e:
            raise ShapeError(f"indexing an array of shape {x.shape}: {e}") from None
    return _masked_shape(dummy, dyn, masks, spec)


def _windows_at_zero(spec, shape):
    """``spec`` with each window ``x[i:i + c]`` as ``x[0:c]`` (for its shape); a window longer than
    its axis is refused."""
    out, axis = [], 0
    consumed = sum(1 for e in spec if e[0] in ("i", "s", "d"))
    for e in spec:
        if e[0] == "e":
            axis += len(shape) - consumed
        if is_window(e):
            if axis < len(shape) and e[2][2] > shape[axis]:
                raise ShapeError(f"indexing: the window x[i:i + {e[2][2]}] is longer than axis {axis} "
                                 f"(size {shape[axis]})")
            e = ("s", 0, e[2][2], e[3])
        out.append(e)
        if e[0] in ("i", "s", "d"):
            axis += 1
    return tuple(out)


def _mask_sample(shape, count):
    """A boolean mask of ``shape`` whose first ``count`` entries are True."""
    m = np.zeros(int(np.prod(shape, dtype=np.int64)), dtype=bool)
    m[:count] = True
    return m.reshape(shape)


def _masked_shape(dummy, dyn, masks, spec):
    """The shape of ``x[idx]`` where an index is a boolean mask.

    A mask's axis in the result has as many entries as the mask has True values: known only
    at run time. The index is sampled with every mask holding no True value and with every
    mask holding one; a dim that differs between the two samples is unknown (``None``), and
    so is the rank where theirs differ. A sample NumPy refuses is left out (an index array of
    length k > 1 broadcast with a mask fixes that axis at k); where both are refused the error
    is raised. (An index of unknown dtype is taken for an integer array, as without a mask.)
    """
    shapes, errors = [], []
    for count in (0, 1):
        sample = [_mask_sample(d.shape, count) if m
                  else np.zeros(d.shape, dtype=d.dtype if d.dtype is not None else np.int64)
                  for d, m in zip(dyn, masks)]
        try:
            shapes.append(tuple(dummy[build_index(spec, sample)].shape))
        except IndexError as e:
            errors.append(e)
    if not shapes:
        raise ShapeError(f"indexing an array of shape {dummy.shape}: {errors[0]}") from None
    if len({len(s) for s in shapes}) > 1:
        return None
    return tuple(s[0] if all(t == s[0] for t in s) else None for s in zip(*shapes))


getitem_p = Primitive("getitem", impl=_getitem_impl, hlo="stablehlo.gather",
                      shape_rule=_getitem_shape, dtype_rule=lambda x, *d, spec: x.dtype)


def getitem(x, idx):
    spec, dyn = split_index(idx)
    return getitem_p.bind(x, *dyn, spec=spec)


def getitem_static(x, idx):
    return getitem(x, idx)


def _has_advanced(spec, dyn):
    return any(e[0] == "d" and np.ndim(dyn[e[1]]) > 0 for e in spec)


def _index_add_impl(x, v, *dyn, spec):
    if any(is_window(e) for e in spec):
        _check_windows(spec, dyn, np.shape(x))
    out = np.array(x, copy=True)
    idx = build_index(spec, dyn)
    try:
        if _has_advanced(spec, dyn):
            np.add.at(out, idx, v)
        else:
            out[idx] += v
    except IndexError as e:             # located at the user's line, as a read out of range is
        raise ShapeError(f"indexing: {e}") from None
    return out


def _index_set_impl(x, v, *dyn, spec):
    if any(is_window(e) for e in spec):
        _check_windows(spec, dyn, np.shape(x))
    out = np.array(x, copy=True)
    try:
        out[build_index(spec, dyn)] = v
    except IndexError as e:
        raise ShapeError(f"indexing: {e}") from None
    return out


def _update_dtype(name):
    def rule(x, v, *dyn, **params):
        from .. import dtypes as _dt
        _dt.check_float_mix(name, {"x": x.dtype, "value": None if v.weak else v.dtype})
        return x.dtype
    return rule


index_add_p = Primitive("index_add", impl=refuse_float_mix("x[...] += v", _index_add_impl, ["x", "value"]),
                        hlo="stablehlo.scatter add",
                        shape_rule=lambda x, v, *d, spec: x.shape, dtype_rule=_update_dtype("x[...] += v"))
index_set_p = Primitive("index_set", impl=refuse_float_mix("x[...] = v", _index_set_impl, ["x", "value"]),
                        hlo="stablehlo.scatter",
                        shape_rule=lambda x, v, *d, spec: x.shape, dtype_rule=_update_dtype("x[...] = v"))


def index_add(x, idx, v):
    spec, dyn = split_index(idx)
    return index_add_p.bind(x, v, *dyn, spec=spec)


def index_set(x, idx, v):
    spec, dyn = split_index(idx)
    return index_set_p.bind(x, v, *dyn, spec=spec)


def _getitem_vjp(g, x, *dyn_and_out, out, spec):
    dyn = dyn_and_out
    return (index_add_p.bind(zeros_like(x), g, *dyn, spec=spec),) + (None,) * len(dyn)


def _getitem_jvp(t, x, *dyn, out, spec):
    return None if t[0] is None else getitem_p.bind(t[0], *dyn, spec=spec)


getitem_p.vjp, getitem_p.jvp = _getitem_vjp, _getitem_jvp


def _index_add_vjp(g, x, v, *dyn, out, spec):
    return (g, sum_to(getitem_p.bind(g, *dyn, spec=spec), v)) + (None,) * len(dyn)


def _index_add_jvp(t, x, v, *dyn, out, spec):
    if t[0] is None and t[1] is None:
        return None
    tx = t[0] if t[0] is not None else zeros_like(x)
    return tx if t[1] is None else index_add_p.bind(tx, t[1], *dyn, spec=spec)


index_add_p.vjp, index_add_p.jvp = _index_add_vjp, _index_add_jvp


def _may_repeat(spec, dyn) -> bool:
    """Whether an index may name a position twice (an index operand that is, or may be, an array)."""
    for e in spec:
        if e[0] == "d":
            d = dyn[e[1]]
            aval = getattr(d, "aval", None)
            shape = aval.shape if aval is not None else np.shape(d)
            if shape is None or len(shape) > 0:
                return True
    return False


def _surviving_writes(g, dyn, spec):
    """Boolean mask over the index region: True where that write survives ``x[idx] = v``.

    NumPy keeps the last of repeated writes. Writing the ids 1..n of the region
    with the same primitive and reading them back finds the survivors.
    """
    from .elementwise import add, equal
    from .reductions import cumsum
    from .shape_ops import reshape
    from .broadcasting import reshape_like
    region = getitem_p.bind(g, *dyn, spec=spec)
    ids = reshape_like(cumsum(reshape(add(zeros_like(region), 1.0), (-1,)), 0), region)
    owner = index_set_p.bind(zeros_like(g), ids, *dyn, spec=spec)
    return equal(getitem_p.bind(owner, *dyn, spec=spec), ids)


def _index_set_vjp(g, x, v, *dyn, out, spec):
    # Overwritten positions pass no cotangent to x. With repeated indices the
    # last write wins (NumPy), so only the surviving writes pass it to v.
    if _one_value_by_mask(v, dyn, spec):
        g_x = index_set_p.bind(g, 0.0, *dyn, spec=spec)
        # x[mask] = v, v one value: v's cotangent is the sum of g where the mask holds, written
        # without indexing by the mask (g - g_x is g there and 0 elsewhere, exactly), so that
        # compiled and batched code can express it (x[mask] alone has a size known only at run time)
        from .elementwise import subtract
        from .reductions import reduce_sum
        return (g_x, sum_to(reduce_sum(subtract(g, g_x)), v)) + (None,) * len(dyn)
    g_v = getitem_p.bind(g, *dyn, spec=spec)
    if _may_repeat(spec, dyn):
        from .selection import select
        g_v = select(_surviving_writes(g, dyn, spec), g_v, zeros_like(g_v))
    return (index_set_p.bind(g, 0.0, *dyn, spec=spec), sum_to(g_v, v)) + (None,) * len(dyn)


def _one_value_by_mask(v, dyn, spec) -> bool:
    """Whether an index_set is ``x[mask] = v`` with ``mask`` one boolean array and ``v`` one value."""
    if len(spec) != 1 or spec[0][0] != "d":
        return False
    mask = dyn[spec[0][1]]
    v_shape = v.aval.shape if hasattr(v, "aval") else np.shape(v)
    return hasattr(mask, "aval") and is_mask(mask.aval) and v_shape == ()


def _index_set_jvp(t, x, v, *dyn, out, spec):
    if t[0] is None and t[1] is None:
        return None
    tx = t[0] if t[0] is not None else zeros_like(x)
    tv = t[1] if t[1] is not None else 0.0
    return index_set_p.bind(tx, tv, *dyn, spec=spec)


index_set_p.vjp, index_set_p.jvp = _index_set_vjp, _index_set_jvp


# -- StableHLO-style slicing ------------------------------------------------------

def _check_window(op, shape, sizes, n_starts):
    if len(sizes) != len(shape) or n_starts != len(shape):
        raise ShapeError(f"{op}: an array of rank {len(shape)} needs {len(shape)} start indices and sizes, "
                         f"got {n_starts} and {len(sizes)}")
    for i, (size, dim) in enumerate(zip(sizes, shape)):
        if type(size) is int and type(dim) is int and not 0 <= size <= dim:
            raise ShapeError(f"{op}: a window of size {size} does not fit axis {i} of size {dim}")


def _dynamic_slice_shape(x, *starts, sizes):
    if x.shape is not None:
        _check_window("dynamic_slice", x.shape, sizes, len(starts))
    return tuple(sizes)


def _dynamic_slice_impl(x, *starts, sizes):
    x = np.asarray(x)
    _check_window("dynamic_slice", x.shape, tuple(sizes), len(starts))
    idx = []
    for s, size, dim in zip(starts, sizes, x.shape):
        s = int(np.clip(int(s), 0, dim - size))      # StableHLO clamps start indices
        idx.append(slice(s, s + size))
    return x[tuple(idx)]


dynamic_slice_p = Primitive("dynamic_slice", impl=_dynamic_slice_impl, hlo="stablehlo.dynamic_slice",
                            shape_rule=_dynamic_slice_shape, dtype_rule=lambda x, *s, sizes: x.dtype)


def dynamic_slice(x, starts, sizes):
    """``x[s0:s0+k0, s1:s1+k1, ...]`` with starts clamped into range (StableHLO §dynamic_slice)."""
    return dynamic_slice_p.bind(x, *starts, sizes=tuple(int(s) for s in sizes))


def _dynamic_update_slice_impl(x, update, *starts):
    check_concrete_mix("dynamic_update_slice", {"x": x, "value": update})
    x = np.array(x, copy=True)
    update = np.asarray(update)
    if update.ndim != x.ndim:
        raise ShapeError(f"dynamic_update_slice: update of rank {update.ndim} into an array of rank {x.ndim}")
    _check_window("dynamic_update_slice", x.shape, update.shape, len(starts))
    idx = []
    for s, size, dim in zip(starts, update.shape, x.shape):
        s = int(np.clip(int(s), 0, dim - size))
        idx.append(slice(s, s + size))
    x[tuple(idx)] = update
    return x


def _dus_shape(x, u, *starts):
    if x.shape is not None and u.shape is not None:
        if len(u.shape) != len(x.shape):
            raise ShapeError(f"dynamic_update_slice: update of rank {len(u.shape)} into an array of "
                             f"rank {len(x.shape)}")
        _check_window("dynamic_update_slice", x.shape, u.shape, len(starts))
    return x.shape


dynamic_update_slice_p = Primitive("dynamic_update_slice", impl=_dynamic_update_slice_impl,
                                   hlo="stablehlo.dynamic_update_slice",
                                   shape_rule=_dus_shape, dtype_rule=_update_dtype("dynamic_update_slice"))


def dynamic_update_slice(x, update, starts):
    return dynamic_update_slice_p.bind(x, update, *starts)


def _dus_vjp(g, x, u, *starts, out):
    from .broadcasting import reshape_like  # noqa: F401
    g_u = dynamic_slice_like_p.bind(g, u, *starts)
    return (dynamic_update_slice_p.bind(g, zeros_like(u), *starts), g_u) + (None,) * len(starts)


def _dynamic_slice_like_impl(x, like, *starts):
    return _dynamic_slice_impl(x, *starts, sizes=np.shape(like))


dynamic_slice_like_p = Primitive("dynamic_slice_like", impl=_dynamic_slice_like_impl, hlo="stablehlo.dynamic_slice",
                                 shape_rule=lambda x, like, *s: like.shape, dtype_rule=lambda x, like, *s: x.dtype)


def _ds_vjp(g, x, *starts, out, sizes):
    return (dynamic_update_slice_p.bind(zeros_like(x), g, *starts),) + (None,) * len(starts)


dynamic_slice_p.vjp = _ds_vjp
dynamic_slice_p.jvp = lambda t, x, *s, out, sizes: None if t[0] is None else dynamic_slice_p.bind(t[0], *s, sizes=sizes)
dynamic_slice_like_p.vjp = lambda g, x, like, *s, out: (
    (dynamic_update_slice_p.bind(zeros_like(x), g, *s), None) + (None,) * len(s))
dynamic_slice_like_p.jvp = lambda t, x, like, *s, out: None if t[0] is None else dynamic_slice_like_p.bind(t[0], like, *s)
dynamic_update_slice_p.vjp = _dus_vjp
dynamic_update_slice_p.jvp = lambda t, x, u, *s, out: None if (t[0] is None and t[1] is None) else \
    dynamic_update_slice_p.bind(t[0] if t[0] is not None else zeros_like(x),
                                t[1] if t[1] is not None else zeros_like(u), *s)


# -- gather / scatter_add along one axis -------------------------------------------

def _gather_impl(x, indices, *, axis):
    return np.take(x, indices, axis=axis)


def _gather_shape(x, idx, *, axis):
    if x.shape is None or idx.shape is None:
        return None
    a = axis % len(x.shape)
    return tuple(x.shape[:a]) + tuple(idx.shape) + tuple(x.shape[a + 1:])


gather_p = Primitive("gather", impl=_gather_impl, hlo="stablehlo.gather", shape_rule=_gather_shape,
                     dtype_rule=lambda x, i, *, axis: x.dtype)


def gather(x, indices, axis=0):
    """``take(x, indices, axis)``: out-of-range indices raise (NumPy), never clamp silently."""
    return gather_p.bind(x, indices, axis=int(axis))


def _scatter_add_impl(x, indices, updates, *, axis):
    out = np.array(x, copy=True)
    idx = (slice(None),) * (axis % out.ndim) + (indices,)
    np.add.at(out, idx, updates)
    return out


def _scatter_add_dtype(x, i, u, *, axis):
    from .. import dtypes as _dt
    _dt.check_float_mix("scatter_add", {"x": x.dtype, "updates": None if u.weak else u.dtype})
    return x.dtype


scatter_add_p = Primitive("scatter_add", impl=refuse_float_mix("scatter_add", _scatter_add_impl,
                                                               ["x", "indices", "updates"]),
                          hlo="stablehlo.scatter add", shape_rule=lambda x, i, u, *, axis: x.shape,
                          dtype_rule=_scatter_add_dtype)


def scatter_add(x, indices, updates, axis=0):
    """``x`` with ``updates`` added at ``indices`` along ``axis``; repeated indices accumulate."""
    return scatter_add_p.bind(x, indices, updates, axis=int(axis))


gather_p.vjp = lambda g, x, i, out, axis: (scatter_add(zeros_like(x), i, g, axis), None)
gather_p.jvp = lambda t, x, i, out, axis: None if t[0] is None else gather(t[0], i, axis)
scatter_add_p.vjp = lambda g, x, i, u, out, axis: (g, None, gather(g, i, axis))
scatter_add_p.jvp = lambda t, x, i, u, out, axis: None if (t[0] is None and t[2] is None) else scatter_add(
    t[0] if t[0] is not None else zeros_like(x), i, t[2] if t[2] is not None else zeros_like(u), axis)
