"""Specialisation rules that turn contractions into ``dot_general``.

``matmul`` (NumPy semantics: 1-D operands, batch broadcasting) and ``einsum``
become ``dot_general`` (StableHLO's one contraction: output axes are batch, lhs free,
rhs free) plus ``reshape``/``broadcast_to``/``transpose``/``reduce_sum``
where the shapes ask for them. The adjoints ``matmul_t_lhs``/``matmul_t_rhs``
are composites whose body is a ``matmul`` (``tlaloc._prims.composites``).
"""
from __future__ import annotations

from .._prims._rules import broadcast_shapes
from .specialize import concrete_rule, emit, register
from .specialize import shape as shape_of


def _reshape(x, s):
    return x if shape_of(x) == tuple(s) else emit("reshape", x, shape=tuple(s))


def _broadcast(x, s):
    return x if shape_of(x) == tuple(s) else emit("broadcast_to", x, shape=tuple(s))


@register("matmul")
@concrete_rule
def matmul(x, y):
    xs, ys = shape_of(x), shape_of(y)
    xn, yn = len(xs), len(ys)
    if xn == 0 or yn == 0:
        return NotImplemented                      # the shape rule refuses it
    if xn == 1 and yn == 1:
        return emit("dot_general", x, y, contracting=((0,), (0,)), batch=((), ()))
    if yn <= 2:
        # (..., m, k) @ (k, n) or (..., k) @ (k, n) or (..., m, k) @ (k,): no batch axes on y
        out = emit("dot_general", x, y, contracting=((xn - 1,), (0,)), batch=((), ()))
        return out
    xp = x if xn >= 2 else _reshape(x, (1,) + xs)
    yp = y
    bx, by = shape_of(xp)[:-2], shape_of(yp)[:-2]
    batch = broadcast_shapes("matmul", bx, by)
    xp = _broadcast(xp, tuple(batch) + shape_of(xp)[-2:])
    yp = _broadcast(yp, tuple(batch) + shape_of(yp)[-2:])
    nb = len(batch)
    out = emit("dot_general", xp, yp, contracting=((nb + 1,), (nb,)),
               batch=(tuple(range(nb)), tuple(range(nb))))
    if xn == 1:
        out = _reshape(out, tuple(batch) + (ys[-1],))
    return out


# -- einsum -------------------------------------------------------------------------------

@register("einsum")
@concrete_rule
def einsum(*xs, spec):
    if "." in spec or "->" not in spec:
        return NotImplemented                      # the emitter refuses ellipses by name
    ins, out = spec.replace(" ", "").split("->")
    subs = ins.split(",")
    if any(len(set(s)) != len(s) for s in subs) or len(set(out)) != len(out):
        return NotImplemented                      # a repeated index (a diagonal)
    sizes = {}
    for s, x in zip(subs, xs):
        for c, d in zip(s, shape_of(x)):
            sizes[c] = d if sizes.get(c, 1) == 1 else sizes[c]
    ops = [(_broadcast(x, tuple(sizes[c] for c in s)), s) for x, s in zip(xs, subs)]
    cur, cur_s = ops[0]
    cur, cur_s = _reduce_unused(cur, cur_s, out + "".join(s for _, s in ops[1:]))
    for k in range(1, len(ops)):
        x, s = ops[k]
        later = out + "".join(t for _, t in ops[k + 1:])
        x, s = _reduce_unused(x, s, later + cur_s)
        cur, cur_s = _reduce_unused(cur, cur_s, later + s)
        shared = [c for c in cur_s if c in s]
        batch = [c for c in shared if c in later]
        contract = [c for c in shared if c not in later]
        cur = emit("dot_general", cur, x,
                   contracting=(tuple(cur_s.index(c) for c in contract), tuple(s.index(c) for c in contract)),
                   batch=(tuple(cur_s.index(c) for c in batch), tuple(s.index(c) for c in batch)))
        cur_s = ("".join(batch) + "".join(c for c in cur_s if c not in shared)
                 + "".join(c for c in s if c not in shared))
    cur, cur_s = _reduce_unused(cur, cur_s, out)
    if cur_s != out:
        cur = emit("transpose", cur, axes=tuple(cur_s.index(c) for c in out))
    return cur


def _reduce_unused(x, s, keep):
    """Sum ``x`` over the indices of ``s`` that ``keep`` does not name."""
    axes = tuple(i for i, c in enumerate(s) if c not in keep)
    if not axes:
        return x, s
    return emit("reduce_sum", x, axes=axes, keepdims=False), "".join(c for c in s if c in keep)
