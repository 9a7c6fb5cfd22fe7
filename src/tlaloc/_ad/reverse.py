"""Reverse mode: a DXIR → DXIR transform driven by the primitives' VJP rules.

``vjp_graph(g)`` returns a graph that computes ``g``'s outputs (the forward
sweep, node for node) and then, in reverse node order, the cotangent of every
input from cotangents of the outputs (the backward sweep). There is no tape:
the backward sweep reads the forward values it needs directly, and loops keep
per-iteration residuals as stacks (see ``control_rules.py``).

Cotangent conventions: ``None`` is a symbolic zero (nothing is computed for
it); a primitive without a VJP rule raises ``NoRuleError`` naming it.
"""
from __future__ import annotations

import dataclasses

from .._core.builder import Builder, Value, current_builder
from .._core.graph import Graph, Literal, Var
from .._core.passes import dce
from .._core.primitive import NodeRule
from .._core.rules import ensure_rules, refusal
from .._prims.broadcasting import cast_like, float_cast, zeros_like
from .._prims.elementwise import add
from ..errors import GradientError, NoRuleError, at_location


def _bar_hint(var) -> str:
    base = var.hint or "v"
    return base if base.endswith("_bar") and False else f"{base}_bar"


def add_cotangents(a, c):
    """``a + c`` for two cotangents of one value.

    A cotangent that is a scatter into zeros (from an indexing rule) is
    scattered into ``a`` directly: ``a + index_add(0, v, i) == index_add(a, v, i)``.
    This keeps loops over ``x[i]`` from building a dense zero array per iteration.
    """
    from .._prims.indexing import index_add_p
    from .._prims.broadcasting import zeros_like_p
    b = current_builder()
    for first, second in ((a, c), (c, a)):
        node = b.producer(second)
        if node is not None and node.prim is index_add_p:
            base = b.producer(b.value(node.inputs[0])) if isinstance(node.inputs[0], Var) else None
            if base is not None and base.prim is zeros_like_p:
                return index_add_p.bind(first, *(b.value(x) for x in node.inputs[1:]), **dict(node.params))
    return add(a, c)


def grad_loc(loc):
    return None if loc is None else dataclasses.replace(loc, role="grad")


def forward_sweep(graph: Graph, in_vals, given=None):
    """Emit ``graph``'s forward nodes into the active builder.

    Returns ``(out_vals, backward)`` where ``backward(out_bars) -> in_bars``
    emits the backward sweep (call it once, later, in the same builder).
    ``given`` (var id -> value) supplies the outputs of nodes that need not run
    again (values a ``tl.checkpoint`` policy saved); their VJP rules still apply.
    """
    ensure_rules()
    b = current_builder()
    env = {v.id: x for v, x in zip(graph.inputs, in_vals)}

    def read(a):
        return a.value if isinstance(a, Literal) else env[a.id]

    records = []
    for node in graph.nodes:
        ins = [read(a) for a in node.inputs]
        with b.at(node.loc):
            rule = node.prim.vjp
            if given and type(rule) is not NodeRule and all(o.id in given for o in node.outputs):
                outs, bwd = tuple(given[o.id] for o in node.outputs), None
            elif type(rule) is NodeRule:
                outs, bwd = rule.fn(node, ins)
            else:
                if node.prim.inference_only:
                    raise NoRuleError(f"`{node.prim.name}` is an inference-only primitive and cannot be "
                                      f"differentiated (no VJP rule)" + (f" at {node.loc}" if node.loc else ""))
                out = node.prim.bind(*ins, **dict(node.params))
                outs = tuple(out) if node.prim.multiple_results else (out,)
                bwd = None
        for old, new in zip(node.outputs, outs):
            if type(new) is Value and new.var.hint is None:
                new.var.hint = old.hint
            env[old.id] = new
        records.append((node, ins, outs, bwd))
    out_vals = [read(o) for o in graph.outputs]

    def backward(out_bars):
        ct: dict[int, object] = {}

        def accumulate(var, g):
            if g is None:
                return
            if type(g) is Value and float_cast(g.aval.dtype, var.aval.dtype) is not None:
                # a cotangent has its primal's dtype: a float32 value that NumPy promoted
                # (a loop carry that became float64 on its first trip) gets a float32 one
                g = cast_like(g, env[var.id])
            if var.id in ct:
                g = add_cotangents(ct[var.id], g)
            if type(g) is Value and (g.var.hint is None or g.var.hint.startswith("v")):
                g.var.hint = _bar_hint(var)
            ct[var.id] = g

        for o, g in zip(graph.outputs, out_bars):
            if isinstance(o, Var):
                accumulate(o, g)
        for node, ins, outs, bwd in reversed(records):
            gs = [ct.pop(o.id, None) for o in node.outputs]
            if all(g is None for g in gs):
                continue
            if not any(type(x) is Value for x in ins) and bwd is None:
                continue                        # a constant computation
            with b.at(grad_loc(node.loc)):
                if bwd is not None:
                    in_bars = bwd(gs)
                else:
                    rule = node.prim.vjp
                    if rule is None:
                        raise NoRuleError(f"no VJP rule for `{node.prim.name}`"
                                          + (f" (used at {node.loc})" if node.loc else "")
                                          + refusal(node.prim.name, "vjp"))
                    try:
                        if node.prim.multiple_results:
                            in_bars = rule(tuple(gs), *ins, out=tuple(outs), **dict(node.params))
                        else:
                            in_bars = rule(gs[0], *ins, out=outs[0], **dict(node.params))
                    except (NoRuleError, GradientError) as e:   # a rule that refuses these parameters
                        raise at_location(e, node.loc) from None      # (einsum 'ii', a non-square full svd)
            for a, g in zip(node.inputs, in_bars):
                if isinstance(a, Var):
                    accumulate(a, g)
        return [ct.get(v.id) for v in graph.inputs]

    return out_vals, backward


def vjp_graph(graph: Graph, ct_mask=None, wrt=None, with_primal: bool = True,
              zeros_for_missing: bool = True, name: str | None = None, bar_avals=None):
    """The VJP of ``graph`` as a new graph.

    Inputs: ``graph``'s inputs, then one cotangent per output where ``ct_mask``.
    Outputs: ``graph``'s outputs (if ``with_primal``), then one cotangent per input
    where ``wrt`` (zeros where no cotangent reaches it, if ``zeros_for_missing``;
    else the input is dropped and reported in the returned mask).

    Returns ``(vjp graph, reached)``: ``reached[i]`` tells whether input ``i`` got
    a (possibly) non-zero cotangent.

    ``bar_avals``: the avals of the output cotangents, where they are not the outputs'
    own. A branch of an ``if`` may give a float32 value where the other gives float64
    (NumPy's promotion joins them as float64): the branch's derivative receives the joined
    float64 cotangent (and the ``if``'s reverse rule casts what it returns to each input's
    dtype), so its sums must be typed with the cotangent's dtype, not its output's.
    """
    n_out = len(graph.outputs)
    ct_mask = [True] * n_out if ct_mask is None else list(ct_mask)
    wrt = [True] * len(graph.inputs) if wrt is None else list(wrt)
    b = Builder(name=name or f"vjp_{graph.name}")
    with b.active():
        ins = [b.new_input(v.aval, v.hint) for v in graph.inputs]
        outs, backward = forward_sweep(graph, ins)
        declared = [o.aval for o in graph.outputs] if bar_avals is None else list(bar_avals)
        bars = [b.new_input(a, _bar_hint(o) if isinstance(o, Var) else "out_bar") if m else None
                for o, a, m in zip(graph.outputs, declared, ct_mask)]
        in_bars = backward(bars)
        reached = [g is not None for g in in_bars]
        results = list(outs) if with_primal else []
        for x, g, w in zip(ins, in_bars, wrt):
            if not w:
                continue
            if g is None:
                if zeros_for_missing:
                    z = zeros_like(x)
                    if type(z) is Value:
                        z.var.hint = f"{x.var.hint}_bar"
                    results.append(z)
            else:
                results.append(g)
        g = b.finish(results)
    return dce(g), reached
