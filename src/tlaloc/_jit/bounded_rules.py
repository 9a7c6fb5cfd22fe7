"""Padded axes through a specialised graph: one small rule per primitive family.

``tl.jit`` runs an argument with a bounded axis (``F32["seq<=512", "d"]``)
padded to a bucket, with the valid length as an extra scalar input. While the
graph is specialised at the padded shape, a ``Tracker`` (a ``Builder`` node
hook) records which axes of every value hold padding (its *tags*: one axis name
or ``None`` per axis) and keeps the padding out of every valid entry:

==========================  =========================================================
elementwise                 tags broadcast right-aligned; a padded axis against an
                            unpadded axis of size > 1 is refused
reduce_* / argmax / argmin  padding replaced by the reduction's identity first
cumsum / cumprod / cummax   (0, 1, -inf, ...); the reduced axes lose their tags
dot_general                 a contracted padded axis: both operands' padding zeroed;
                            batch and free axes keep their tags
transpose, broadcast_*,     tags move with their axes; a reshape that merges or
reshape, expand/squeeze     splits a padded axis is refused
getitem, index_add/_set     ``:`` and a non-negative int along a padded axis (the
                            program then needs that many valid entries); anything
                            else along it is refused
cond / for_range / while    refused when a padded value enters them
anything else               refused by name when an operand has a padded axis
==========================  =========================================================

The invariant: a value's entries at valid positions depend only on valid
entries of the arguments; padding entries are garbage, never read by a valid
entry, and sliced off on the host. Shape queries (``x.shape[i]``, ``len(x)``,
the count of ``mean``) along a padded axis give the valid length. The shape-only
helpers of derivative code are composites: their bodies come through the hook.
"""
from __future__ import annotations

import numpy as np

from .._core.builder import Value
from .._core.primitive import REGISTRY
from .._frontend.names import _BINARY
from .._prims.elementwise import UNARY
from ..errors import BoundedAxisError

_ELEMENTWISE = set(UNARY) | _BINARY | {"integer_pow", "convert", "stop_gradient", "zeros_like", "copy",
                                       "cast_like", "name_axes"}
_CONTROL = {"cond", "for_range", "while_loop"}
_MASKED_REDUCTIONS = {"reduce_sum": "zero", "reduce_prod": "one", "reduce_max": "low", "reduce_min": "high",
                      "reduce_any": "zero", "reduce_all": "one"}
_CUMULATIVE = {"cumsum": "zero", "cumprod": "one", "cummax": "low"}


def _fill(kind: str, dtype):
    dt = np.dtype(dtype)
    if kind in ("zero", "one"):
        return np.asarray(0 if kind == "zero" else 1, dt)
    if dt.kind == "f":
        return np.asarray(-np.inf if kind == "low" else np.inf, dt)
    if dt.kind == "b":
        return np.asarray(kind == "high", dt)
    info = np.iinfo(dt)
    return np.asarray(info.min if kind == "low" else info.max, dt)


def _shape(x) -> tuple:
    return tuple(x.aval.shape) if type(x) is Value else tuple(np.shape(x))


class Tracker:
    """Tags of the values of one specialisation, and the masks it inserts.

    Attributes:
      lengths: axis name -> the int32 scalar input holding its valid length.
      sizes: axis name -> the bucket size the program is specialised for.
      min_length: axis name -> the least valid length the program indexes (``x[3]``).
    """

    def __init__(self, lengths: dict, sizes: dict):
        self.lengths, self.sizes = lengths, sizes
        self.tags: dict = {}            # var id -> tuple of axis names (None: not padded)
        self.min_length: dict = {}
        self._len64: dict = {}

    # -- tags -----------------------------------------------------------------------------
    def tags_of(self, x):
        return self.tags.get(x.var.id) if type(x) is Value else None

    def tag(self, x, tags):
        if type(x) is Value and tags is not None and any(t is not None for t in tags):
            self.tags[x.var.id] = tuple(tags)
        return x

    def length(self, name: str, dtype):
        """The valid length of axis ``name`` as a scalar of ``dtype`` (a value of the program)."""
        dt = np.dtype(dtype)
        if dt not in self._len64.get(name, {}):
            from .._core.builder import current_builder
            b = current_builder()
            v = self.lengths[name]
            if dt != np.dtype(np.int32):
                v = b.add_plain(REGISTRY["convert"], [v], {"dtype": dt})
            self._len64.setdefault(name, {})[dt] = v
        return self._len64[name][dt]

    # -- the hook ---------------------------------------------------------------------------
    def __call__(self, b, prim, args, params):
        in_tags = [self.tags_of(a) for a in args]
        if all(t is None for t in in_tags):
            return b.add_plain(prim, args, params)
        name = prim.name
        if name in _ELEMENTWISE:
            return _elementwise(self, b, prim, args, params, in_tags)
        rule = RULES.get(name)
        if rule is None and prim.expansion is not None:
            return b.add_plain(prim, args, params)      # a composite: its body's nodes come through here
        if rule is None:
            self.refuse(b, _refusal(prim, args, in_tags))
        return rule(self, b, prim, args, params, in_tags)

    def check_node(self, b, node):
        """A node built outside ``Builder.add`` (control flow): refused when it reads a padded value."""
        in_tags = [self.tags.get(getattr(a, "id", None)) for a in node.inputs]
        if any(t is not None for t in in_tags):
            self.refuse(b, _refusal(node.prim, node.inputs, in_tags))

    def refuse(self, b, msg: str):
        loc = b.loc
        if loc is None:
            raise BoundedAxisError(msg)
        raise BoundedAxisError(msg, loc.filename, loc.lineno, loc.col)

    def mask(self, b, x, tags, axes, kind: str):
        """``x`` with the padding of its ``axes`` (padded ones) replaced by a fill of ``kind``."""
        axes = [a for a in axes if tags[a] is not None]
        if not axes:
            return x
        shape = _shape(x)
        keep = None
        for a in axes:
            pos = b.add_plain(REGISTRY["iota"], [], {"shape": shape, "dtype": np.dtype(np.int32), "dimension": a})
            lt = b.add_plain(REGISTRY["less"], [pos, self.lengths[tags[a]]], {})
            keep = lt if keep is None else b.add_plain(REGISTRY["logical_and"], [keep, lt], {})
        fill = b.add_plain(REGISTRY["broadcast_to"], [_fill(kind, x.aval.dtype)], {"shape": shape})
        return self.tag(b.add_plain(REGISTRY["select"], [keep, x, fill], {}), tags)


def _describe(tags) -> str:
    return ", ".join(f"axis {i} (`{t}`)" for i, t in enumerate(tags) if t is not None)


def _refusal(prim, args, in_tags) -> str:
    k = next(i for i, t in enumerate(in_tags) if t is not None)
    if prim.name in _CONTROL:
        return (f"a loop or branch (`{prim.name}`) reads a value whose {_describe(in_tags[k])} is bounded; under "
                f"tl.jit that axis is padded to a bucket, and the padding is not masked inside loops and branches. "
                f"Compute what the loop needs from the bounded value before it (a masked reduction such as "
                f"x.sum(axis=0)), or drop the bound from the annotation")
    what = f"`{prim.name}` reads a value whose {_describe(in_tags[k])} is bounded"
    return (f"{what}; under tl.jit that axis is padded to a bucket, and tlaloc masks reductions, contractions and "
            f"elementwise math over it but not `{prim.name}`, whose result would depend on the padding. Rewrite "
            f"it with masked reductions (sum, max, matmul, einsum), or drop the bound from the annotation")


# -- rules: (tracker, builder, prim, args, params, in_tags) -> result ---------------------------------

def _elementwise(tr, b, prim, args, params, in_tags):
    shapes = [_shape(a) for a in args]
    rank = max(len(s) for s in shapes)
    out_tags = []
    for k in range(rank):
        names = {t[len(t) - rank + k] for t in in_tags if t is not None and len(t) - rank + k >= 0} - {None}
        if len(names) > 1:
            tr.refuse(b, f"`{prim.name}` aligns the bounded axes {sorted(names)} with each other (axis {k - rank}); "
                         f"their valid lengths differ, so the result would mix padding with data")
        name = names.pop() if names else None
        if name is not None:
            for s, t in zip(shapes, in_tags):
                j = len(s) - rank + k
                if j >= 0 and s[j] != 1 and (t is None or t[j] != name):
                    tr.refuse(b, f"`{prim.name}` combines the bounded axis `{name}` with an axis of fixed size "
                                 f"{s[j]} (axis {k - rank} of an operand of shape {s}); the sizes agree only "
                                 f"because of the padding. Give the other operand the bound too, or slice it")
        out_tags.append(name)
    return tr.tag(b.add_plain(prim, args, params), out_tags)


def _axes(params, rank, key="axes"):
    axes = params.get(key)
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    return tuple(sorted(int(a) % rank for a in axes))


def _reduction(tr, b, prim, args, params, in_tags):
    x, tags = args[0], in_tags[0]
    axes = _axes(params, len(tags))
    x = tr.mask(b, x, tags, axes, _MASKED_REDUCTIONS[prim.name])
    out_tags = [None if i in axes else t for i, t in enumerate(tags) if params.get("keepdims") or i not in axes]
    return tr.tag(b.add_plain(prim, [x], params), out_tags)


def _arg_reduction(tr, b, prim, args, params, in_tags):
    x, tags = args[0], in_tags[0]
    if params.get("axis") is None:
        tr.refuse(b, f"`{prim.name}` without an axis flattens a value whose {_describe(tags)} is bounded; "
                     f"the flat index would count the padding. Give an axis")
    axis = int(params["axis"]) % len(tags)
    x = tr.mask(b, x, tags, (axis,), "low" if prim.name == "argmax" else "high")
    out_tags = [None if i == axis else t for i, t in enumerate(tags) if params.get("keepdims") or i != axis]
    return tr.tag(b.add_plain(prim, [x], params), out_tags)


def _cumulative(tr, b, prim, args, params, in_tags):
    x, tags = args[0], in_tags[0]
    axis = int(params["axis"]) % len(tags)
    x = tr.mask(b, x, tags, (axis,), _CUMULATIVE[prim.name])
    return tr.tag(b.add_plain(prim, [x], params), tags)


def _none(n):
    return (None,) * n


def _dot_general(tr, b, prim, args, params, in_tags):
    x, y = args
    xt, yt = [t if t is not None else _none(len(_shape(a))) for t, a in zip(in_tags, args)]
    (lc, rc), (lb, rb) = params["contracting"], params["batch"]
    for (a, c), what in [(p, "contracts") for p in zip(lc, rc)] + [(p, "batches") for p in zip(lb, rb)]:
        if xt[a] != yt[c]:
            tr.refuse(b, f"`dot_general` {what} axis {a} of the left operand (bounded: `{xt[a]}`) with axis {c} of "
                         f"the right operand (bounded: `{yt[c]}`); a bounded axis contracts only with the same "
                         f"bounded axis. Give both operands the bound")
    x = tr.mask(b, x, xt, lc, "zero")
    y = tr.mask(b, y, yt, rc, "zero")
    out_tags = ([xt[a] for a in lb] + [t for i, t in enumerate(xt) if i not in lc and i not in lb]
                + [t for i, t in enumerate(yt) if i not in rc and i not in rb])
    return tr.tag(b.add_plain(prim, [x, y], params), out_tags)


def _transpose(tr, b, prim, args, params, in_tags):
    tags = in_tags[0]
    perm = params.get("axes")
    perm = tuple(reversed(range(len(tags)))) if perm is None else tuple(int(p) % len(tags) for p in perm)
    return tr.tag(b.add_plain(prim, args, params), [tags[p] for p in perm])


def _broadcast_to(tr, b, prim, args, params, in_tags):
    tags, s, out = in_tags[0], _shape(args[0]), tuple(params["shape"])
    lead = len(out) - len(s)
    out_tags = [None] * lead + [t if s[i] == out[lead + i] else None for i, t in enumerate(tags)]
    return tr.tag(b.add_plain(prim, args, params), out_tags)


def _broadcast_in_dim(tr, b, prim, args, params, in_tags):
    tags, s, out = in_tags[0], _shape(args[0]), tuple(params["shape"])
    out_tags = [None] * len(out)
    for i, d in enumerate(params["broadcast_dimensions"]):
        out_tags[d] = tags[i] if s[i] == out[d] else None
    return tr.tag(b.add_plain(prim, args, params), out_tags)


def _reshape_tags(tr, b, prim, s, out, tags):
    """Tags of a reshape from ``s`` to ``out``: a padded axis must keep its size and the products of
    the axes before and after it (it is not merged with or split into others)."""
    out_tags = [None] * len(out)
    for i, t in enumerate(tags):
        if t is None:
            continue
        before, after = int(np.prod(s[:i])), int(np.prod(s[i + 1:]))
        j = next((j for j in range(len(out)) if out[j] == s[i] and out_tags[j] is None
                  and int(np.prod(out[:j])) == before and int(np.prod(out[j + 1:])) == after), None)
        if j is None:
            tr.refuse(b, f"`{prim.name}` from shape {s} to {out} merges or splits the bounded axis {i} (`{t}`); "
                         f"the padding would land between valid entries. Keep the bounded axis whole "
                         f"(reshape only the other axes)")
        out_tags[j] = t
    return out_tags


def _reshape(tr, b, prim, args, params, in_tags):
    out = b.add_plain(prim, args, params)
    return tr.tag(out, _reshape_tags(tr, b, prim, _shape(args[0]), _shape(out), in_tags[0]))


# -- indexing -----------------------------------------------------------------------------------

def _index_tags(tr, b, prim, tags, spec, dyn):
    """Tags of ``x[spec]`` for ``x`` with ``tags``; refuses what would read the padding."""
    for d, t in zip(dyn, (tr.tags_of(v) for v in dyn)):
        if t is not None:
            tr.refuse(b, f"`{prim.name}` indexes with an array whose {_describe(t)} is bounded; the padded index "
                         f"entries would be read as data")
    n_consumed = sum(1 for e in spec if e[0] in "ids")
    out, axis = [], 0
    for e in spec:
        tag = e[0]
        if tag == "n":
            out.append(None)
        elif tag == "e":
            rest = len(tags) - axis - (n_consumed - _consumed_before(spec, e))
            out += list(tags[axis:axis + rest])
            axis += rest
        elif tag == "s":
            t = tags[axis]
            full = e[1] in (None, 0) and e[2] is None and e[3] in (None, 1)
            if t is not None and not full:
                tr.refuse(b, f"`{prim.name}` slices the bounded axis {axis} (`{t}`) with {_slice_text(e)}; only "
                             f"`:` and non-negative integer indices are allowed along a bounded axis (the padded "
                             f"end is not the valid end)")
            out.append(t)
            axis += 1
        else:
            t = tags[axis]
            if t is not None:
                k = e[1] if tag == "i" else None
                if tag == "d" and np.ndim(dyn[e[1]]) == 0 and type(dyn[e[1]]) is not Value:
                    k = int(dyn[e[1]])
                if k is None or k < 0:
                    tr.refuse(b, f"`{prim.name}` indexes the bounded axis {axis} (`{t}`) with "
                                 f"{'a negative index' if k is not None else 'an index known only at run time'}; "
                                 f"it would count from the padded end or read the padding. Use a non-negative "
                                 f"constant index")
                tr.min_length[t] = max(tr.min_length.get(t, 0), k + 1)
            elif tag == "d" and np.ndim(dyn[e[1]]) != 0 and any(x is not None for x in tags):
                tr.refuse(b, f"`{prim.name}` with an index array on a value whose {_describe(tags)} is bounded "
                             f"(advanced indexing) is not supported")
            axis += 1
    out += list(tags[axis:])
    return out


def _consumed_before(spec, marker) -> int:
    n = 0
    for e in spec:
        if e is marker:
            return n
        n += e[0] in "ids"
    return n


def _slice_text(e) -> str:
    part = lambda v: "" if v is None else ("?" if isinstance(v, tuple) else str(v))
    return f"`{part(e[1])}:{part(e[2])}:{part(e[3])}`"


def _getitem(tr, b, prim, args, params, in_tags):
    x, dyn = args[0], list(args[1:])
    tags = in_tags[0] or _none(len(_shape(x)))
    out_tags = _index_tags(tr, b, prim, tags, params["spec"], dyn)
    return tr.tag(b.add_plain(prim, args, params), out_tags)


def _index_update(tr, b, prim, args, params, in_tags):
    x, v, dyn = args[0], args[1], list(args[2:])
    tags = in_tags[0] or _none(len(_shape(x)))
    want = _index_tags(tr, b, prim, tags, params["spec"], dyn)
    vt, vs = in_tags[1] or _none(len(_shape(v))), _shape(v)
    for j in range(len(vs)):
        k = len(want) - len(vs) + j
        w = want[k] if k >= 0 else None
        if vt[j] != w and (vt[j] is not None or vs[j] != 1):
            tr.refuse(b, f"`{prim.name}` writes a value of shape {vs} (bounded: {list(vt)}) where the bounded "
                         f"axes are {list(want)}; the bounded axes of the value and the target must line up")
    return tr.tag(b.add_plain(prim, args, params), tags)


RULES = {
    **{n: _reduction for n in _MASKED_REDUCTIONS},
    **{n: _cumulative for n in _CUMULATIVE},
    "argmax": _arg_reduction, "argmin": _arg_reduction,
    "dot_general": _dot_general,
    "transpose": _transpose,
    "broadcast_to": _broadcast_to, "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape, "expand_dims": _reshape, "squeeze": _reshape,
    "getitem": _getitem, "index_add": _index_update, "index_set": _index_update,
}
# shape queries along a padded axis (``dim_size``, ``reduced_count``, ``broadcast_like``): ``bounded_queries``
