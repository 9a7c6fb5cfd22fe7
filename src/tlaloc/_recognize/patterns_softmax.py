"""The recognizers of the softmax family: attention and softmax cross-entropy
(see ``patterns_norm`` for what each recognizer matches)."""
from __future__ import annotations

import numpy as np

from .._core.graph import Literal, Var
from .match import const_value, both_orders, reduce_last, same_var, shape_of
from .rewrite import Index, Match


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
    ts, es, bs, out = shape_of(t), shape_of(ex.outputs[0]), shape_of(bc.outputs[0]), shape_of(rs.outputs[0])
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
        for s, c in ((n.inputs[0], n.inputs[1]),) if n.prim.name == "divide" else both_orders(n):
            k = const_value(c)
            if k is not None and ix.op(s, "dot_general") is not None:
                scale = 1.0 / k if n.prim.name == "divide" else k
                nodes.append(n)
                atom = s
                break
        else:
            return None
    qk = ix.op(atom, "dot_general")
    if qk is None or qk.params["batch"] != _BH or len(shape_of(qk.outputs[0])) != 4:
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


def _against_reduction(ix, atom, op, reduce, nodes):
    """``op(x, reduce(x, -1, keepdims))`` producing ``atom`` (``x - max(x)``, ``e / sum(e)``):
    returns (that node, x), or None."""
    node = ix.op(atom, op)
    if node is None:
        return None
    x = node.inputs[0]
    if not same_var(reduce_last(ix, node.inputs[1], reduce, nodes), x):
        return None
    return node, x


def match_attention(ix: Index, root) -> Match | None:
    if root.prim.name != "dot_general" or root.params["batch"] != _BH or \
            tuple(root.params["contracting"][0]) != (3,) or tuple(root.params["contracting"][1]) != (2,):
        return None
    p, v2 = root.inputs
    nodes = [root]
    got = _against_reduction(ix, p, "divide", "reduce_sum", nodes)
    if got is None:
        return None
    div, e = got
    ex = ix.op(e, "exp")
    got = _against_reduction(ix, ex.inputs[0], "subtract", "reduce_max", nodes) if ex is not None else None
    if got is None:
        return None
    sub, s = got
    nodes.extend([div, ex, sub])
    mask, fill = None, None
    sel = ix.op(s, "select")
    if sel is not None and const_value(sel.inputs[2]) is not None:
        mask, fill = sel.inputs[0], const_value(sel.inputs[2])
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
    b, h, t, hd = shape_of(q)
    causal = isinstance(mask, Literal) and np.array_equal(
        np.broadcast_to(mask.value, (t, shape_of(k)[2])), np.tril(np.ones((t, shape_of(k)[2]), bool)))
    attrs = {"scale": scale, "n_rep": rep_k, "masked": mask is not None, "fill": fill, "causal": bool(causal),
             "batch": b, "heads": h, "kv_heads": shape_of(k)[1], "seq": t, "kv_seq": shape_of(k)[2], "head_dim": hd}
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
    ex_in = reduce_last(ix, log.inputs[0], "reduce_sum", nodes)
    ex = ix.op(ex_in, "exp")
    if ex is None or not same_var(ex.inputs[0], s):
        return None
    got = _against_reduction(ix, s, "subtract", "reduce_max", nodes)
    if got is None:
        return None
    sh, x = got
    nodes.extend([sub, log, ex, sh])
    return x


def match_cross_entropy(ix: Index, root) -> Match | None:
    if root.prim.name != "negative":
        return None
    div = ix.op(root.inputs[0], "divide")
    if div is None:
        return None
    red = ix.op(div.inputs[0], "reduce_sum")
    if red is None or len(shape_of(red.outputs[0])) != 0:
        return None
    gi = ix.op(red.inputs[0], "getitem")
    if gi is None or tuple(gi.params["spec"]) != (("d", 0), ("d", 1)) or len(gi.inputs) != 3:
        return None
    logp, rows, labels = gi.inputs
    if len(shape_of(logp)) != 2 or not isinstance(labels, Var) or labels.aval.dtype.kind not in "iu":
        return None
    n, vocab = shape_of(logp)
    if not (isinstance(rows, Literal) and np.array_equal(np.asarray(rows.value), np.arange(n))):
        return None
    if const_value(div.inputs[1]) != n or shape_of(labels) != (n,):
        return None
    nodes = [root, div, red, gi]
    x = _log_softmax(ix, logp, nodes)
    if x is None:
        return None
    return Match("cross_entropy", root, nodes, [x, labels], {"rows": n, "vocab": vocab, "reduction": "mean"},
                 (True, False))
