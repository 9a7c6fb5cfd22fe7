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

from .._core.graph import Literal, Var
from .rewrite import Index, Match


# -- small helpers ------------------------------------------------------------------------------

def _const(a):
    """The value of a scalar constant operand, else None."""
    if isinstance(a, Literal) and np.size(a.value) == 1 and np.asarray(a.value).dtype.kind in "fiu":
        return float(np.asarray(a.value).reshape(()))
    return None


def _shape(a):
    return tuple(a.aval.shape) if a.aval.shape is not None else None


def _pairs(node):
    """Both orders of a binary node's operands."""
    a, b = node.inputs[0], node.inputs[1]
    return ((a, b), (b, a))


def _last_axes(axes, rank):
    if axes is None or rank == 0:
        return False
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    return tuple(a % rank for a in axes) == (rank - 1,)


def _reduce_last(ix, atom, name, nodes):
    """``name(x, axes=(-1,), keepdims=True)`` producing ``atom``: returns x."""
    n = ix.op(atom, name)
    if n is None or not n.params.get("keepdims"):
        return None
    x = n.inputs[0]
    if not _last_axes(n.params.get("axes"), len(_shape(x))):
        return None
    nodes.append(n)
    return x


def _same(a, b) -> bool:
    return isinstance(a, Var) and isinstance(b, Var) and a.id == b.id


# -- rms_norm -----------------------------------------------------------------------------------

def _square_of(ix, atom, nodes):
    n = ix.op(atom, "multiply", "integer_pow", "power")
    if n is None:
        return None
    if n.prim.name == "multiply" and _same(n.inputs[0], n.inputs[1]):
        nodes.append(n)
        return n.inputs[0]
    if n.prim.name == "integer_pow" and n.params.get("y") == 2:
        nodes.append(n)
        return n.inputs[0]
    if n.prim.name == "power" and _const(n.inputs[1]) == 2.0:
        nodes.append(n)
        return n.inputs[0]
    return None


def _mean_square(ix, atom, nodes):
    """``sum(x*x, -1, keepdims) / D`` (or ``* (1/D)``): returns x."""
    n = ix.op(atom, "divide", "multiply")
    if n is None:
        return None
    for s, c in ((n.inputs[0], n.inputs[1]),) if n.prim.name == "divide" else _pairs(n):
        k = _const(c)
        if k is None:
            continue
        sub = []
        sq = _reduce_last(ix, s, "reduce_sum", sub)
        x = _square_of(ix, sq, sub) if sq is not None else None
        if x is None:
            continue
        d = _shape(x)[-1]
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
        if n.prim.name == "divide" and _const(n.inputs[0]) != 1.0:
            return None
        sq = ix.op(n.inputs[-1], "sqrt")
        if sq is None:
            return None
        sub.append(sq)
        inner = sq.inputs[0]
    add = ix.op(inner, "add")
    if add is None:
        return None
    for ms, e in _pairs(add):
        eps = _const(e)
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
    for left, w in _pairs(root):
        inner = ix.op(left, "multiply")
        if inner is None or not isinstance(w, Var) or _shape(w) is None or len(_shape(w)) != 1:
            continue
        for x, r in _pairs(inner):
            nodes = [root, inner]
            got = _rstd(ix, r, nodes)
            if got is None or not _same(got[0], x) or _shape(x)[-1] != _shape(w)[0]:
                continue
            rows = int(np.prod(_shape(x)[:-1]))
            return Match("rms_norm", root, nodes, [x, w],
                         {"eps": got[1], "rows": rows, "dim": _shape(x)[-1]}, (True, True))
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
    if hi is None or lo is None or not _same(hi.inputs[0], lo.inputs[0]):
        return None
    x = hi.inputs[0]
    rank = len(_shape(x))
    if cat.params.get("axis") % rank != rank - 1:
        return None
    d = _shape(x)[-1]
    h = d // 2
    if d % 2 or _last_axis_slice(hi, rank) not in ((h, None), (h, d)) or \
            _last_axis_slice(lo, rank) not in ((None, h), (0, h)):
        return None
    nodes.extend([cat, neg, hi, lo])
    return x, h


def match_rope(ix: Index, root) -> Match | None:
    if root.prim.name != "add":
        return None
    for a, b in _pairs(root):
        m1, m2 = ix.op(a, "multiply"), ix.op(b, "multiply")
        if m1 is None or m2 is None:
            continue
        for rot, sin in _pairs(m2):
            nodes = [root, m1, m2]
            got = _rotate_half(ix, rot, nodes)
            if got is None:
                continue
            x, h = got
            for x2, cos in _pairs(m1):
                if _same(x2, x):
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
    return (len(_shape(w)) == 2 and tuple(cx) == (len(_shape(x)) - 1,) and tuple(cw) == (0,)
            and not bx and not bw)


def match_swiglu(ix: Index, root) -> Match | None:
    if not _is_xw(root):
        return None
    h, wd = root.inputs
    mul = ix.op(h, "multiply")
    if mul is None:
        return None
    for silu, u in _pairs(mul):
        sm = ix.op(silu, "multiply")
        up = ix.op(u, "dot_general")
        if sm is None or not _is_xw(up):
            continue
        for a, sg in _pairs(sm):
            lg = ix.op(sg, "logistic")
            gate = ix.op(a, "dot_general")
            if lg is None or not _same(lg.inputs[0], a) or not _is_xw(gate):
                continue
            x, wg = gate.inputs
            if not _same(up.inputs[0], x):
                continue
            nodes = [root, mul, sm, lg, gate, up]
            return Match("swiglu", root, nodes, [x, wg, up.inputs[1], wd],
                         {"rows": int(np.prod(_shape(x)[:-1])), "dim": _shape(x)[-1], "hidden": _shape(wg)[1]},
                         (True, True, True, True))
    return None


# -- attention ----------------------------------------------------------------------------------

_BH = ((0, 1), (0, 1))


def _unrepeat(ix, atom, nodes):
    """``reshape(broadcast_to(t[:, :, None], (B, Hkv, G, S, hd)), (B, H, S, hd))``: (t, G); else (atom, 1)."""
    rs = ix.op(atom, "reshape")
    bc = ix.op(rs.inputs[0], "broadcast_to") if rs is not None else None
    ex = ix.op(bc.inputs[0], "getitem", "reshape", "expand_dims") if bc is not None else None
    if ex is None:
        return atom, 1
    t = ex.inputs[0]
    ts, es, bs, out = _shape(t), _shape(ex.outputs[0]), _shape(bc.outputs[0]), _shape(rs.outputs[0])
    if len(ts) != 4 or es != ts[:2] + (1,) + ts[2:] or len(bs) != 5 or bs[:2] != ts[:2] or bs[3:] != ts[2:]:
        return atom, 1
    if out != (ts[0], ts[1] * bs[2]) + ts[2:]:
        return atom, 1
    nodes.extend([rs, bc, ex])
    return t, bs[2]


def _scores(ix, atom, nodes):
    """``(q @ k^T) [* scale]``: returns (q, k_repeated_operand, scale)."""
    scale = 1.0
    n = ix.op(atom, "multiply", "divide")
    if n is not None:
        for s, c in ((n.inputs[0], n.inputs[1]),) if n.prim.name == "divide" else _pairs(n):
            k = _const(c)
            if k is not None and ix.op(s, "dot_general") is not None:
                scale = 1.0 / k if n.prim.name == "divide" else k
                nodes.append(n)
                atom = s
                break
        else:
            return None
    qk = ix.op(atom, "dot_general")
    if qk is None or qk.params["batch"] != _BH or len(_shape(qk.outputs[0])) != 4:
        return None
    q, k2 = qk.inputs
    cq, ck = qk.params["contracting"]
    if tuple(cq) != (3,):
        return None
    if tuple(ck) == (2,):
        tr = ix.op(k2, "transpose")
        if tr is None or tuple(tr.params["axes"]) != (0, 1, 3, 2):
            return None
        nodes.extend([qk, tr])
        return q, tr.inputs[0], scale
    if tuple(ck) == (3,):
        nodes.append(qk)
        return q, k2, scale
    return None


def match_attention(ix: Index, root) -> Match | None:
    if root.prim.name != "dot_general" or root.params["batch"] != _BH or \
            tuple(root.params["contracting"][0]) != (3,) or tuple(root.params["contracting"][1]) != (2,):
        return None
    p, v2 = root.inputs
    nodes = [root]
    div = ix.op(p, "divide")
    if div is None:
        return None
    e = div.inputs[0]
    if not _same(_reduce_last(ix, div.inputs[1], "reduce_sum", nodes), e):
        return None
    ex = ix.op(e, "exp")
    sub = ix.op(ex.inputs[0], "subtract") if ex is not None else None
    if sub is None:
        return None
    s = sub.inputs[0]
    if not _same(_reduce_last(ix, sub.inputs[1], "reduce_max", nodes), s):
        return None
    nodes.extend([div, ex, sub])
    mask, fill = None, None
    sel = ix.op(s, "select")
    if sel is not None and _const(sel.inputs[2]) is not None:
        mask, fill = sel.inputs[0], _const(sel.inputs[2])
        if mask.aval.dtype != np.bool_:
            return None
        nodes.append(sel)
        s = sel.inputs[1]
    got = _scores(ix, s, nodes)
    if got is None:
        return None
    q, k1, scale = got
    k, rep_k = _unrepeat(ix, k1, nodes)
    v, rep_v = _unrepeat(ix, v2, nodes)
    if rep_k != rep_v:
        return None
    b, h, t, hd = _shape(q)
    causal = isinstance(mask, Literal) and np.array_equal(
        np.broadcast_to(mask.value, (t, _shape(k)[2])), np.tril(np.ones((t, _shape(k)[2]), bool)))
    attrs = {"scale": scale, "n_rep": rep_k, "masked": mask is not None, "fill": fill, "causal": bool(causal),
             "batch": b, "heads": h, "kv_heads": _shape(k)[1], "seq": t, "kv_seq": _shape(k)[2], "head_dim": hd}
    ins = [q, k, v] + ([mask] if mask is not None else [])
    return Match("attention", root, nodes, ins, attrs, (True, True, True) + ((False,) if mask is not None else ()))


# -- cross_entropy ------------------------------------------------------------------------------

def _log_softmax(ix, atom, nodes):
    """``s - log(sum(exp(s), -1, keepdims))`` with ``s = x - max(x, -1, keepdims)``: returns x."""
    sub = ix.op(atom, "subtract")
    if sub is None:
        return None
    s, lg = sub.inputs
    log = ix.op(lg, "log")
    if log is None:
        return None
    ex_in = _reduce_last(ix, log.inputs[0], "reduce_sum", nodes)
    ex = ix.op(ex_in, "exp")
    if ex is None or not _same(ex.inputs[0], s):
        return None
    sh = ix.op(s, "subtract")
    if sh is None:
        return None
    x = sh.inputs[0]
    if not _same(_reduce_last(ix, sh.inputs[1], "reduce_max", nodes), x):
        return None
    nodes.extend([sub, log, ex, sh])
    return x


def match_cross_entropy(ix: Index, root) -> Match | None:
    if root.prim.name != "negative":
        return None
    div = ix.op(root.inputs[0], "divide")
    if div is None:
        return None
    red = ix.op(div.inputs[0], "reduce_sum")
    if red is None or len(_shape(red.outputs[0])) != 0:
        return None
    gi = ix.op(red.inputs[0], "getitem")
    if gi is None or tuple(gi.params["spec"]) != (("d", 0), ("d", 1)) or len(gi.inputs) != 3:
        return None
    logp, rows, labels = gi.inputs
    if len(_shape(logp)) != 2 or not isinstance(labels, Var) or labels.aval.dtype.kind not in "iu":
        return None
    n, vocab = _shape(logp)
    if not (isinstance(rows, Literal) and np.array_equal(np.asarray(rows.value), np.arange(n))):
        return None
    if _const(div.inputs[1]) != n or _shape(labels) != (n,):
        return None
    nodes = [root, div, red, gi]
    x = _log_softmax(ix, logp, nodes)
    if x is None:
        return None
    return Match("cross_entropy", root, nodes, [x, labels], {"rows": n, "vocab": vocab, "reduction": "mean"},
                 (True, False))


MATCHERS = {"attention": match_attention, "swiglu": match_swiglu, "rms_norm": match_rms_norm,
            "rope": match_rope, "cross_entropy": match_cross_entropy}

__all__ = ["MATCHERS"]
