"""Forward mode: a DXIR → DXIR transform driven by the primitives' JVP rules.

``jvp_graph(g, tangent_mask)`` returns a graph computing ``g``'s outputs and,
alongside each node, the tangent of its outputs from the tangents of its
inputs (``x_dot`` names). ``None`` is a symbolic zero tangent. Control flow
carries tangents through its regions (``forward_rules.py``).
"""
from __future__ import annotations

import dataclasses

from .._core.builder import Builder, Value, current_builder
from .._core.graph import Graph, Literal, Var
from .._core.passes import dce
from .._core.primitive import NodeRule
from .._core.rules import ensure_rules, refusal
from .._prims.broadcasting import zeros_like
from ..errors import NoRuleError


def tangent_loc(loc):
    return None if loc is None else dataclasses.replace(loc, role="tangent")


def _dot_hint(var) -> str:
    return f"{var.hint or 'v'}_dot"


def forward_tangents(graph: Graph, in_vals, in_tans):
    """Emit ``graph``'s nodes and their tangents into the active builder.

    Returns ``(out_vals, out_tans)``; tangents are Values, or None for zero.
    """
    ensure_rules()
    b = current_builder()
    env = {v.id: x for v, x in zip(graph.inputs, in_vals)}
    tenv = {v.id: t for v, t in zip(graph.inputs, in_tans) if t is not None}

    def read(a):
        return a.value if isinstance(a, Literal) else env[a.id]

    def tread(a):
        return None if isinstance(a, Literal) else tenv.get(a.id)

    for node in graph.nodes:
        ins = [read(a) for a in node.inputs]
        tins = [tread(a) for a in node.inputs]
        rule = node.prim.jvp
        if type(rule) is NodeRule:
            with b.at(node.loc):
                outs, touts = rule.fn(node, ins, tins)
        else:
            with b.at(node.loc):
                out = node.prim.bind(*ins, **dict(node.params))
            outs = tuple(out) if node.prim.multiple_results else (out,)
            if all(t is None for t in tins):
                touts = (None,) * len(outs)
            else:
                rule = node.prim.jvp
                if rule is None or node.prim.inference_only:
                    raise NoRuleError(f"no JVP rule for `{node.prim.name}`"
                                      + (f" (used at {node.loc})" if node.loc else "")
                                      + refusal(node.prim.name, "jvp"))
                with b.at(tangent_loc(node.loc)):
                    t = rule(tuple(tins), *ins, out=tuple(outs) if node.prim.multiple_results else outs[0],
                             **dict(node.params))
                touts = tuple(t) if node.prim.multiple_results else (t,)
        for old, new, tnew in zip(node.outputs, outs, touts):
            if type(new) is Value and new.var.hint is None:
                new.var.hint = old.hint
            env[old.id] = new
            if tnew is not None:
                if type(tnew) is Value and (tnew.var.hint is None or tnew.var.hint.startswith("v")):
                    tnew.var.hint = _dot_hint(old)
                tenv[old.id] = tnew
    return [read(o) for o in graph.outputs], [tread(o) for o in graph.outputs]


def jvp_graph(graph: Graph, tangent_mask=None, zeros_for_missing: bool = True, name: str | None = None):
    """The JVP of ``graph``: inputs ``(*primals, *tangents where mask)``, outputs
    ``(*outputs, *output tangents)`` (zeros where a tangent is identically zero,
    if ``zeros_for_missing``; else those are dropped). Returns ``(graph, out_mask)``."""
    mask = [True] * len(graph.inputs) if tangent_mask is None else list(tangent_mask)
    b = Builder(name=name or f"jvp_{graph.name}")
    with b.active():
        ins = [b.new_input(v.aval, v.hint) for v in graph.inputs]
        tans = [b.new_input(v.aval, _dot_hint(v)) if m else None for v, m in zip(graph.inputs, mask)]
        outs, touts = forward_tangents(graph, ins, tans)
        out_mask = [t is not None for t in touts]
        results = list(outs)
        for o, t in zip(outs, touts):
            if t is None:
                if zeros_for_missing:
                    results.append(zeros_like(o))
            else:
                results.append(t)
        g = b.finish(results)
    return dce(g), out_mask
