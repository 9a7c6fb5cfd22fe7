"""The recognizers: one matcher per coarsened op, on *specialised* DXIR.

A matcher looks at one candidate root node and walks producers backwards;
it returns a ``Match`` (the nodes covered and the op's operands, in the op's
order) or ``None``. Commutative operands are tried both ways. What each
recognizes (``x`` below is the same value wherever it appears):

=============  =================================================================
rms_norm       ``x * rsqrt(sum(x*x, -1, keepdims) / D + eps) * w``  (also
               ``x**2``, ``1/sqrt(.)``, ``mean`` as ``* (1/D)``)
rope           ``x * cos + concatenate([-x[..., h:], x[..., :h]], -1) * sin``
swiglu         ``(silu(x @ wg) * (x @ wu)) @ wd`` with ``silu(a) = a * sigmoid(a)``
attention      ``softmax(where(mask, (q @ k^T) * scale, fill)) @ v``: softmax as
               max-subtract, exp, sum, divide; ``mask`` and ``scale`` optional;
               grouped-query ``k``/``v`` repeated by ``x[:, :, None]`` →
               ``broadcast_to`` → ``reshape`` are part of the op (n_rep > 1)
cross_entropy  ``-mean(log_softmax(logits)[arange(N), labels])``
=============  =================================================================
"""
from __future__ import annotations

import numpy as np

from .._core.graph import Var
from .match import both_orders, const_value, reduce_last, same_var, shape_of
from .rewrite import Index, Match


# -- rms_norm -----------------------------------------------------------------------------------

def _square_of(ix, atom, nodes):
    n = ix.op(atom, "multiply", "integer_pow", "power")
    if n is None:
        return None
    if n.prim.name == "multiply" and same_var(n.inputs[0], n.inputs[1]):
        nodes.append(n)
        return n.inputs[0]
    if n.prim.name == "integer_pow" and n.params.get("y") == 2:
        nodes.append(n)
        return n.inputs[0]
    if n.prim.name == "power" and const_value(n.inputs[1]) == 2.0:
        nodes.append(n)
        return n.inputs[0]
    return None


def _mean_square(ix, atom, nodes):
    """``sum(x*x, -1, keepdims) / D`` (or ``* (1/D)``): returns x."""
    n = ix.op(atom, "divide", "multiply")
    if n is None:
        return None
    for s, c in ((n.inputs[0], n.inputs[1]),) if n.prim.name == "divide" else both_orders(n):
        k = const_value(c)
        if k is None:
            continue
        sub = []
        sq = reduce_last(ix, s, "reduce_sum", sub)
        x = _square_of(ix, sq, sub) if sq is not None else None
        if x is None:
            continue
        d = shape_of(x)[-1]
        if (n.prim.name == "divide" and k == d) or (n.prim.name == "multiply" and np.isclose(k * d, 1.0)):
            nodes.extend([n] + sub)
            return x
    return None


def _rstd(ix, atom, nodes):
    """``rsqrt(ms + eps)`` (or ``1 / sqrt(.)``): returns (x, eps)."""
    sub = []
    n = ix.op(atom, "rsqrt", "reciprocal", "divide")
    if n is None:
        return None
    if n.prim.name == "rsqrt":
        inner = n.inputs[0]
    else:
        if n.prim.name == "divide" and const_value(n.inputs[0]) != 1.0:
            return None
        sq = ix.op(n.inputs[-1], "sqrt")
        if sq is None:
            return None
        sub.append(sq)
        inner = sq.inputs[0]
    add = ix.op(inner, "add")
    if add is None:
        return None
    for ms, e in both_orders(add):
        eps = const_value(e)
        if eps is None:
            continue
        more = []
        x = _mean_square(ix, ms, more)
        if x is not None:
            nodes.extend([n, add] + sub + more)
            return x, eps
    return None


def match_rms_norm(ix: Index, root) -> Match | None:
    if root.prim.name != "multiply":
        return None
    for left, w in both_orders(root):
        inner = ix.op(left, "multiply")
        if inner is None or not isinstance(w, Var) or shape_of(w) is None or len(shape_of(w)) != 1:
            continue
        for x, r in both_orders(inner):
            nodes = [root, inner]
            got = _rstd(ix, r, nodes)
            if got is None or not same_var(got[0], x) or shape_of(x)[-1] != shape_of(w)[0]:
                continue
            rows = int(np.prod(shape_of(x)[:-1]))
            return Match("rms_norm", root, nodes, [x, w],
                         {"eps": got[1], "rows": rows, "dim": shape_of(x)[-1]}, (True, True))
    return None


# -- rope ---------------------------------------------------------------------------------------

def _last_axis_slice(node, rank):
    """``(start, stop)`` when ``node`` is ``x[..., start:stop]`` (a static slice of the last axis)."""
    if node.prim.name != "getitem" or len(node.inputs) != 1:
        return None
    spec = list(node.params["spec"])
    if spec and spec[0] == ("e",):
        spec = spec[1:]
        if len(spec) != 1:
            return None
    elif len(spec) == rank:
        if any(e != ("s", None, None, None) for e in spec[:-1]):
            return None
        spec = spec[-1:]
    else:
        return None
    e = spec[0]
    if e[0] != "s" or e[3] not in (None, 1):
        return None
    return e[1], e[2]


def _rotate_half(ix, atom, nodes):
    """``concatenate([-x[..., h:], x[..., :h]], -1)``: returns (x, h)."""
    cat = ix.op(atom, "concatenate")
    if cat is None or len(cat.inputs) != 2:
        return None
    neg = ix.op(cat.inputs[0], "negative")
    if neg is None:
        return None
    hi = ix.op(neg.inputs[0], "getitem")
    lo = ix.op(cat.inputs[1], "getitem")
    if hi is None or lo is None or not same_var(hi.inputs[0], lo.inputs[0]):
        return None
    x = hi.inputs[0]
    rank = len(shape_of(x))
    if cat.params.get("axis") % rank != rank - 1:
        return None
    d = shape_of(x)[-1]
    h = d // 2
    if d % 2 or _last_axis_slice(hi, rank) not in ((h, None), (h, d)) or \
            _last_axis_slice(lo, rank) not in ((None, h), (0, h)):
        return None
    nodes.extend([cat, neg, hi, lo])
    return x, h


def match_rope(ix: Index, root) -> Match | None:
    if root.prim.name != "add":
        return None
    for a, b in both_orders(root):
        m1, m2 = ix.op(a, "multiply"), ix.op(b, "multiply")
        if m1 is None or m2 is None:
            continue
        for rot, sin in both_orders(m2):
            nodes = [root, m1, m2]
            got = _rotate_half(ix, rot, nodes)
            if got is None:
                continue
            x, h = got
            for x2, cos in both_orders(m1):
                if same_var(x2, x):
                    return Match("rope", root, nodes, [x, cos, sin], {"half": h, "dim": 2 * h},
                                 (True, True, True))
    return None


# -- swiglu -------------------------------------------------------------------------------------

def _is_xw(node):
    """``x @ w``: contracting x's last axis with w's first, no batch axes, w a matrix."""
    if node is None or node.prim.name != "dot_general":
        return False
    x, w = node.inputs
    (cx, cw), (bx, bw) = node.params["contracting"], node.params["batch"]
    return (len(shape_of(w)) == 2 and tuple(cx) == (len(shape_of(x)) - 1,) and tuple(cw) == (0,)
            and not bx and not bw)


def match_swiglu(ix: Index, root) -> Match | None:
    if not _is_xw(root):
        return None
    h, wd = root.inputs
    mul = ix.op(h, "multiply")
    if mul is None:
        return None
    for silu, u in both_orders(mul):
        sm = ix.op(silu, "multiply")
        up = ix.op(u, "dot_general")
        if sm is None or not _is_xw(up):
            continue
        for a, sg in both_orders(sm):
            lg = ix.op(sg, "logistic")
            gate = ix.op(a, "dot_general")
            if lg is None or not same_var(lg.inputs[0], a) or not _is_xw(gate):
                continue
            x, wg = gate.inputs
            if not same_var(up.inputs[0], x):
                continue
            nodes = [root, mul, sm, lg, gate, up]
            return Match("swiglu", root, nodes, [x, wg, up.inputs[1], wd],
                         {"rows": int(np.prod(shape_of(x)[:-1])), "dim": shape_of(x)[-1], "hidden": shape_of(wg)[1]},
                         (True, True, True, True))
    return None
