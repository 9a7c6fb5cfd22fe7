"""Axis names through DXIR: one small rule per primitive family.

``propagate_names(prim, in_avals, out_avals, params)`` is called by the
builder for every node that has an input with axis names. It returns the
output avals with names, or raises ``TypeAnnotationError`` (the builder adds the
user's ``file:line:col``) when names do not fit:

=========================  ====================================================
elementwise (broadcast)    right-aligned; two different names on one axis are refused
reductions                 reduced axes lose their names (``keepdims``: unnamed size 1)
matmul / einsum /          contracted (and batch) axes must carry the same name
dot_general
transpose, swapaxes,       names move with their axes; ``reshape`` keeps names
expand_dims, squeeze,      only when it just adds or drops size-1 axes
reshape, broadcast_*
indexing                   conservative: integer and full-slice indices only
control flow               names a region keeps unchanged
anything else              no names (``None``): unknown, never guessed
=========================  ====================================================

Unnamed axes match any name. Names are types, not sizes: the sizes bound to a
name are checked when the function is called (``tlaloc.typing.check_call``).
"""
from __future__ import annotations

from ..errors import TypeAnnotationError
from .._prims._rules import normalize_axes
from .._prims.elementwise import UNARY

_BINARY = {"add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "arctan2",
           "remainder", "floor_divide", "less", "less_equal", "greater", "greater_equal", "equal",
           "not_equal", "logical_and", "logical_or", "safe_mul", "safe_div", "select", "clamp"}
_SAME_AS_FIRST = set(UNARY) | {"integer_pow", "convert", "stop_gradient", "zeros_like", "cast_like",
                               "cumsum", "cumprod", "cummax", "flip", "index_add", "index_set",
                               "dynamic_update_slice", "argsort", "add_along_axis", "check_input_shape",
                               "check_same_shape"}
_LIKE_SECOND = {"sum_to", "broadcast_like", "reshape_like"}
_REDUCTIONS = {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_any", "reduce_all"}


def type_of(aval) -> str:
    from .._annotations import type_str
    return type_str(aval)


def _with(out, names):
    """``out`` with ``names`` (None when unknown or all-None)."""
    if out.shape is None or names is None or len(names) != len(out.shape):
        return out if out.names is None else out.with_(names=None)
    names = tuple(names)
    return out.with_(names=names if any(n is not None for n in names) else None)


def _names(aval):
    """Names per axis (Nones when untracked); None when the rank is unknown."""
    if aval.shape is None:
        return None
    return aval.names if aval.names is not None else (None,) * len(aval.shape)


def broadcast(op: str, avals, labels=None):
    """Right-aligned names of broadcasting ``avals``; refuses a mismatch."""
    per = [_names(a) for a in avals]
    if any(p is None for p in per):
        return None
    rank = max((len(p) for p in per), default=0)
    out = []
    for i in range(rank):
        seen = None
        for j, p in enumerate(per):
            k = len(p) - rank + i
            if k < 0 or p[k] is None:
                continue
            if seen is not None and seen[0] != p[k]:
                lab = labels or _default_labels(len(avals))
                raise TypeAnnotationError(
                    f"{op}: cannot broadcast {type_of(avals[seen[1]])} ({lab[seen[1]]}) with "
                    f"{type_of(avals[j])} ({lab[j]}): axis {i - rank} is `{seen[0]}` in {lab[seen[1]]} but "
                    f"`{p[k]}` in {lab[j]}. Broadcasting aligns axes from the right; transpose an operand, "
                    f"insert an axis (y[:, None]) or rename one with tl.named")
            seen = seen or (p[k], j)
        out.append(seen[0] if seen else None)
    return tuple(out)


def _default_labels(n):
    return ["the left operand", "the right operand"] if n == 2 else [f"operand {i}" for i in range(n)]


def _check_pair(op, xa, ya, xn, yn, what):
    if xn is not None and yn is not None and xn != yn:
        raise TypeAnnotationError(
            f"{op}: contracts {what} `{xn}` of {type_of(xa)} with `{yn}` of {type_of(ya)}; contracted axes "
            f"must have the same name. Transpose an operand, or use tl.contract to contract by name")


# -- rules: (prim, in_avals, out, params) -> names or None ------------------------------------------

def _elementwise(prim, ins, out, params):
    labels = {"select": ["the condition", "x", "y"], "clamp": ["a_min", "x", "a_max"]}.get(prim.name)
    return broadcast(prim.name, ins, labels)


def _reduction(prim, ins, out, params):
    n = _names(ins[0])
    if n is None:
        return None
    axes = params.get("axes", params.get("axis"))
    ax = normalize_axes(axes, len(n))
    if params.get("keepdims"):
        return tuple(None if i in ax else x for i, x in enumerate(n))
    return tuple(x for i, x in enumerate(n) if i not in ax)


def _matmul(prim, ins, out, params):
    x, y = ins
    xn, yn = _names(x), _names(y)
    if xn is None or yn is None or not xn or not yn:
        return None
    _check_pair("matmul", x, y, xn[-1], yn[0] if len(yn) == 1 else yn[-2], "axis")
    if len(xn) == 1 and len(yn) == 1:
        return ()
    if len(xn) == 1:
        return yn[:-2] + (yn[-1],)
    if len(yn) == 1:
        return xn[:-1]
    return _batch_names(x, y, xn[:-2], yn[:-2]) + (xn[-2], yn[-1])


def _batch_names(x, y, xb, yb):
    """matmul's batch axes broadcast (right-aligned); two names on one axis are refused."""
    rank = max(len(xb), len(yb))
    out = []
    for i in range(rank):
        a = xb[len(xb) - rank + i] if len(xb) - rank + i >= 0 else None
        b = yb[len(yb) - rank + i] if len(yb) - rank + i >= 0 else None
        if a is not None and b is not None and a != b:
            raise TypeAnnotationError(
                f"matmul: batch axis {i - rank - 2} is `{a}` in {type_of(x)} but `{b}` in {type_of(y)}; "
                f"batch axes broadcast by position and must carry the same name. Transpose an operand "
                f"or rename it with tl.named")
        out.append(a if a is not None else b)
    return tuple(out)


def _einsum(prim, ins, out, params):
    spec = params["spec"]
    if "." in spec or "->" not in spec:
        return None
    subs, res = spec.replace(" ", "").split("->")
    subs = subs.split(",")
    per = [_names(a) for a in ins]
    if any(p is None for p in per):
        return None
    seen = {}
    for sub, p, a in zip(subs, per, ins):
        for c, n in zip(sub, p):
            if n is None:
                continue
            if c in seen and seen[c][0] != n:
                raise TypeAnnotationError(
                    f"einsum {spec!r}: index `{c}` is axis `{seen[c][0]}` of {type_of(seen[c][1])} but axis "
                    f"`{n}` of {type_of(a)}; one index must name one axis. Fix the subscripts or rename "
                    f"an axis with tl.named")
            seen.setdefault(c, (n, a))
    return tuple(seen[c][0] if c in seen else None for c in res)


def _dot_general(prim, ins, out, params):
    x, y = ins
    xn, yn = _names(x), _names(y)
    if xn is None or yn is None:
        return None
    (lc, rc), (lb, rb) = params["contracting"], params["batch"]
    for a, b in zip(lc, rc):
        _check_pair("dot_general", x, y, xn[a], yn[b], "axis")
    for a, b in zip(lb, rb):
        _check_pair("dot_general", x, y, xn[a], yn[b], "batch axis")
    batch = tuple(xn[a] if xn[a] is not None else yn[b] for a, b in zip(lb, rb))
    return (batch + tuple(n for i, n in enumerate(xn) if i not in lc and i not in lb)
            + tuple(n for i, n in enumerate(yn) if i not in rc and i not in rb))


def _transpose(prim, ins, out, params):
    n = _names(ins[0])
    if n is None:
        return None
    axes = params["axes"]
    return tuple(reversed(n)) if axes is None else tuple(n[a] for a in axes)


def _swapaxes(prim, ins, out, params):
    n = _names(ins[0])
    if n is None or not n:
        return None
    n = list(n)
    a, b = params["axis1"] % len(n), params["axis2"] % len(n)
    n[a], n[b] = n[b], n[a]
    return tuple(n)


def _expand_dims(prim, ins, out, params):
    n = _names(ins[0])
    if n is None:
        return None
    n = list(n)
    rank = len(n) + len(params["axis"])
    for a in sorted(ax % rank for ax in params["axis"]):
        n.insert(a, None)
    return tuple(n)


def _squeeze(prim, ins, out, params):
    n = _names(ins[0])
    if n is None or params["axis"] is None:
        return n if (n is not None and out.shape is not None and len(out.shape) == len(n)) else None
    ax = normalize_axes(params["axis"], len(n))
    return tuple(x for i, x in enumerate(n) if i not in ax)


def _reshape(prim, ins, out, params):
    """Names survive a reshape only when it adds or drops size-1 axes."""
    x = ins[0]
    n = _names(x)
    if n is None or out.shape is None or any(type(d) is not int for d in x.shape + out.shape):
        return None
    kept = [(d, nm) for d, nm in zip(x.shape, n) if d != 1]
    if [d for d, _ in kept] != [d for d in out.shape if d != 1]:
        return None
    it = iter(nm for _, nm in kept)
    return tuple(None if d == 1 else next(it) for d in out.shape)


def _broadcast_to(prim, ins, out, params):
    n = _names(ins[0])
    if n is None or out.shape is None:
        return None
    return (None,) * (len(out.shape) - len(n)) + tuple(n)


def _broadcast_in_dim(prim, ins, out, params):
    n = _names(ins[0])
    if n is None:
        return None
    res = [None] * len(params["shape"])
    for i, d in enumerate(params["broadcast_dimensions"]):
        res[d] = n[i]
    return tuple(res)


def _getitem(prim, ins, out, params):
    """Integer indices drop an axis, full slices keep its name; anything else is unnamed.
    Returns ``[(name, size)]`` per output axis (the shape rule may not know the rank)."""
    x, dyn = ins[0], ins[1:]
    n = _names(x)
    if n is None:
        return None
    spec, dims = params["spec"], x.shape
    consumed = sum(e[0] in "ids" for e in spec)
    res, k = [], 0
    for e in spec:
        tag = e[0]
        if tag == "e":
            rest = len(n) - consumed
            res.extend(zip(n[k:k + rest], dims[k:k + rest]))
            k += rest
        elif tag == "n":
            res.append((None, 1))
        elif tag == "i":
            k += 1
        elif tag == "d":
            if dyn[e[1]].shape != ():
                return None                      # advanced indexing: not tracked
            k += 1
        else:
            res.append((n[k], dims[k]) if e[1:] == (None, None, None) else (None, None))
            k += 1
    return res + list(zip(n[k:], dims[k:]))


def _concatenate(prim, ins, out, params):
    per = [_names(a) for a in ins]
    if any(p is None for p in per) or len({len(p) for p in per}) != 1:
        return None
    a = params["axis"] % len(per[0])
    return tuple(None if i == a or len({p[i] for p in per}) != 1 else per[0][i] for i in range(len(per[0])))


def _expand_reduced(prim, ins, out, params):
    g, like = ins
    if params["keepdims"]:
        return _names(g)
    n = _names(like)
    if n is None:
        return None
    ax = normalize_axes(params["axes"], len(n))
    return tuple(None if i in ax else x for i, x in enumerate(n))


def _region_outputs(prim, ins, outs, params):
    """cond: names both branches agree on; loops: carries whose names the body keeps."""
    if prim.name == "cond":
        t, f = params["true_branch"], params["false_branch"]
        return [o.names if (o.names == b.aval.names == c.aval.names) else None
                for o, b, c in zip(outs, t.outputs, f.outputs)], True
    body, n_carry = params["body"], params["n_carry"]
    lead = 3 if prim.name == "for_range" else 0
    res = []
    for k, o in enumerate(outs):
        if k < n_carry:
            init = ins[lead + k].names
            res.append(init if init is not None and body.outputs[k].aval.names == init else None)
        else:
            res.append(None)
    return res, True


RULES = {}
for _n in _BINARY:
    RULES[_n] = _elementwise
for _n in _SAME_AS_FIRST:
    RULES[_n] = lambda prim, ins, out, params: _names(ins[0])
for _n in _LIKE_SECOND:
    RULES[_n] = lambda prim, ins, out, params: _names(ins[1])
for _n in _REDUCTIONS | {"argmax", "argmin"}:
    RULES[_n] = _reduction
RULES.update({
    "matmul": _matmul, "einsum": _einsum, "dot_general": _dot_general,
    "matmul_t_lhs": lambda prim, ins, out, params: _names(ins[2]),
    "matmul_t_rhs": lambda prim, ins, out, params: _names(ins[2]),
    "transpose": _transpose, "swapaxes": _swapaxes, "expand_dims": _expand_dims, "squeeze": _squeeze,
    "reshape": _reshape, "broadcast_to": _broadcast_to, "broadcast_in_dim": _broadcast_in_dim,
    "getitem": _getitem, "concatenate": _concatenate, "expand_reduced": _expand_reduced,
    "grad_seed": lambda prim, ins, out, params: _names(ins[0]),
})
_REGION_PRIMS = {"cond", "for_range", "while_loop"}


def propagate_names(prim, in_avals, out_avals, params):
    """Output avals with axis names (see the module docstring); unknown primitives pass through."""
    if prim.name in _REGION_PRIMS:
        names, _ = _region_outputs(prim, in_avals, out_avals, params)
        return tuple(_with(o, n) for o, n in zip(out_avals, names))
    rule = RULES.get(prim.name)
    if rule is None:
        return out_avals
    if prim.multiple_results:
        return out_avals
    if rule is _getitem:
        axes = _getitem(prim, in_avals, out_avals, params)
        if axes is None:
            return _with(out_avals, None)
        out = out_avals if out_avals.shape is not None else out_avals.with_(shape=tuple(d for _, d in axes))
        return _with(out, tuple(nm for nm, _ in axes))
    return _with(out_avals, rule(prim, in_avals, out_avals, params))
