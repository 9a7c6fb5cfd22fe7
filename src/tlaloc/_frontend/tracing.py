"""The tracing front end: run Python with symbolic values to build DXIR.

Used for model code (``tl.capture``) and for the functional control-flow
operators (``tl.cond``, ``tl.while_loop``, ``tl.fori_loop``, ``tl.scan``).
Python control flow on static values simply runs (unrolls); on an array value
it is refused with a message pointing at ``tl.cond``/``tl.while_loop``/``tl.scan``
(``Value.__bool__``).

``trace(fn, in_avals_tree) -> (graph, out_tree)``: call ``fn`` on fresh
symbolic inputs and close the graph over what it returns.
"""
from __future__ import annotations

import numpy as np

from .. import _pytree
from .._core.aval import AbstractValue, of as aval_of
from .._core.builder import Builder, Value
from .._core.control import cond_p, for_range_p, join_aval, while_loop_p
from .._core.graph import Graph
from ..errors import ArgumentError, ShapeError


def _is_value(x) -> bool:
    return type(x) is Value


def _aval(x) -> AbstractValue:
    if _is_value(x) or isinstance(getattr(x, "aval", None), AbstractValue):
        return x.aval
    return aval_of(x)


def _tracing() -> bool:
    from .._core.builder import _stack
    return bool(_stack())


def trace_region(fn, args, name):
    """Trace ``fn(*args)`` in a child builder of the active one.

    ``args`` are pytrees whose leaves are values (symbolic or concrete); each leaf
    becomes a region input. Returns ``(graph, captures, out_tree)``.
    """
    from .._core.builder import _stack
    parent = _stack()[-1] if _stack() else None
    b = Builder(parent=parent, name=name)
    leaves, tree = _pytree.flatten(list(args))
    with b.active():
        ins = [b.new_input(_aval(x), getattr(getattr(x, "var", None), "hint", None)) for x in leaves]
        out = fn(*_pytree.unflatten(tree, ins))
        out_leaves, out_tree = _pytree.flatten(out)
        g = b.finish(out_leaves, name)
    return g, list(b.captures), out_tree


def _needs_graph(*trees) -> bool:
    return any(_is_value(x) for t in trees for x in _pytree.leaves(t))


def _with_captures(graph: Graph, n_explicit: int, captures, all_captures):
    """Re-order a region's captured inputs to follow ``all_captures``."""
    from .._core.graph import Var
    mine = {c.var.id: v for c, v in zip(captures, graph.inputs[n_explicit:])}
    inputs = list(graph.inputs[:n_explicit]) + [mine.get(c.var.id) or Var(c.var.aval, c.var.hint)
                                                for c in all_captures]
    return Graph(tuple(inputs), graph.nodes, graph.outputs, graph.name)


def _union(*capture_lists):
    out, seen = [], set()
    for caps in capture_lists:
        for c in caps:
            if c.var.id not in seen:
                seen.add(c.var.id)
                out.append(c)
    return out


def cond(pred, true_fun, false_fun, *operands):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``.

    ``pred`` is a scalar bool. Eagerly (concrete ``pred``) only one branch runs;
    inside a transform both branches become regions of one ``cond`` node and must
    return the same structure. Differentiable in every transform.
    """
    if not _needs_graph(pred, operands):
        p = np.asarray(pred)
        if p.shape != ():
            raise ShapeError(f"tl.cond: pred must be a scalar, got shape {p.shape}")
        return true_fun(*operands) if bool(p) else false_fun(*operands)
    gt, ct, tt = trace_region(true_fun, operands, "true_branch")
    gf, cf, tf = trace_region(false_fun, operands, "false_branch")
    if tt != tf:
        raise ArgumentError(f"tl.cond: the branches return different structures: {tt!r} vs {tf!r}")
    caps = _union(ct, cf)
    n = len(_pytree.leaves(list(operands)))
    gt, gf = _with_captures(gt, n, ct, caps), _with_captures(gf, n, cf, caps)
    outs = cond_p.bind(pred, *_pytree.leaves(list(operands)), *caps, true_branch=gt, false_branch=gf)
    return _pytree.unflatten(tt, list(outs))


def _loop_region(body, carry, extra_leading, name):
    """Trace ``body`` to a fixed point of the carry avals."""
    leaves, tree = _pytree.flatten(carry)
    avals = [_aval(x) for x in leaves]
    for _ in range(4):
        proto = _pytree.unflatten(tree, [_Proto(a) for a in avals])
        g, caps, out_tree = trace_region(body, list(extra_leading) + [proto], name)
        new = [join_aval(a, o.aval) for a, o in zip(avals, g.outputs)]
        if new == avals:
            return g, caps, out_tree, tree
        avals = new
    return g, caps, out_tree, tree


class _Proto:
    """A placeholder leaf carrying only an aval, for tracing a region's inputs."""

    def __init__(self, aval):
        self.aval = aval


def while_loop(cond_fun, body_fun, init_val, max_trips=None):
    """``while cond_fun(val): val = body_fun(val)``; returns the final value.

    ``max_trips`` bounds the trip count so that reverse mode can compile (it is an
    error to run past it). Eagerly it is a Python loop.
    """
    if not (_needs_graph(init_val) or _tracing()):
        val, trips = init_val, 0
        while bool(np.asarray(cond_fun(val))):
            if max_trips is not None and trips >= max_trips:
                raise ArgumentError(f"tl.while_loop ran past max_trips={max_trips}")
            val = body_fun(val)
            trips += 1
        return val
    gb, cb, out_tree, tree = _loop_region(body_fun, init_val, (), "while_body")
    if out_tree != tree:
        raise ArgumentError(f"tl.while_loop: body returns {out_tree!r} but the carry is {tree!r}")
    n = len(gb.inputs) - len(cb)
    avals = [v.aval for v in gb.inputs[:n]]
    gc, cc, _ = trace_region(cond_fun, [_pytree.unflatten(tree, [_Proto(a) for a in avals])], "while_cond")
    caps = _union(cb, cc)
    gb, gc = _with_captures(gb, n, cb, caps), _with_captures(gc, n, cc, caps)
    outs = while_loop_p.bind(*_pytree.leaves(init_val), *caps, cond=gc, body=gb, n_carry=n,
                             n_consts=len(caps), max_trips=max_trips)
    return _pytree.unflatten(tree, list(outs[:n]))


def fori_loop(lower, upper, body_fun, init_val):
    """``val = body_fun(i, val)`` for ``i`` in ``range(lower, upper)``."""
    if not (_needs_graph(lower, upper, init_val) or _tracing()):
        val = init_val
        for i in range(int(lower), int(upper)):
            val = body_fun(i, val)
        return val
    idx = _Proto(AbstractValue(np.dtype(np.int64), (), weak=True))
    g, caps, out_tree, tree = _loop_region(lambda i, v: body_fun(i, v), init_val, (idx,), "fori_body")
    n = len(_pytree.leaves(init_val))
    outs = for_range_p.bind(lower, upper, 1, *_pytree.leaves(init_val), *caps, body=g, n_carry=n,
                            n_consts=len(caps), n_xs=0, reverse=False)
    return _pytree.unflatten(tree, list(outs[:n]))


def scan(f, init, xs, length=None):
    """``carry, y = f(carry, x)`` over the leading axis of ``xs``; returns ``(carry, ys)``
    with ``ys`` stacked along a new leading axis (JAX's ``lax.scan``)."""
    from .. import numpy as tnp
    xs_leaves, xs_tree = _pytree.flatten(xs)
    if length is None:
        if not xs_leaves:
            raise ArgumentError("tl.scan: give xs or length")
        length = xs_leaves[0].shape[0] if not _is_value(xs_leaves[0]) else tnp.shape(xs_leaves[0])[0]

    def step(i, state):
        carry, ys = state
        x = _pytree.unflatten(xs_tree, [tnp._getitem(l, i) for l in xs_leaves])
        carry, y = f(carry, x)
        return carry, ys + [y]

    if not (_needs_graph(init, xs, length) or _tracing()):
        carry, ys = init, []
        for i in range(int(length)):
            x = _pytree.unflatten(xs_tree, [l[i] for l in xs_leaves])
            carry, y = f(carry, x)
            ys.append(y)
        y_leaves = [_pytree.flatten(y)[0] for y in ys]
        if not ys:
            return carry, None
        stacked = [np.stack([yl[k] for yl in y_leaves]) for k in range(len(y_leaves[0]))]
        return carry, _pytree.unflatten(_pytree.flatten(ys[0])[1], stacked)

    def body(i, carry):
        x = _pytree.unflatten(xs_tree, [tnp._getitem(l, i) for l in xs_leaves])
        new_carry, y = f(carry, x)
        return new_carry, y

    # trace once to learn y's structure, then emit a for_range with stacked ys
    idx = _Proto(AbstractValue(np.dtype(np.int64), ()))
    c_leaves, c_tree = _pytree.flatten(init)
    g, caps, out_tree = trace_region(lambda i, c: _flat_pair(body(i, c)), [idx, init], "scan_body")
    n = len(c_leaves)
    outs = for_range_p.bind(0, length, 1, *c_leaves, *caps, body=g, n_carry=n, n_consts=len(caps), n_xs=0,
                            reverse=False)
    carry = _pytree.unflatten(c_tree, list(outs[:n]))
    from .._core.control import stack_ys_p
    ys = [stack_ys_p.bind(s) for s in outs[n:]]
    y_tree = out_tree.children[1]
    return carry, _pytree.unflatten(y_tree, ys)


def _flat_pair(pair):
    carry, y = pair
    return (carry, y)
