"""Recognizers and coarsening: patterns in specialised DXIR become coarsened ops.

    g = specialize(graph, avals)
    c = coarsen(g)                 # attention / swiglu / rms_norm / rope / cross_entropy nodes
    summary(c)                     # [("rms_norm", {"eps": 1e-06, ...}), ...]
    e = decompose(c, target="cpu") # forward bodies inlined, unless a kernel claims the op

``tl.jit`` runs ``coarsen`` then ``decompose`` on every specialised graph it
compiles (``Lowered.recognized`` lists what was found); a coarsened op no
kernel claims is inlined again, node for node, so the emitted program is the
one without recognition. A claimed op (``tlaloc.kernels.registry``, off by
default; ``registry.opt_in()``) stays a node and is emitted as
``stablehlo.custom_call @<target>``.

Differentiating a coarsened graph (``vjp_graph(coarsen(g))``) uses each op's
analytic gradient body (``gradients.py``); forward mode and batching use its
forward body. A match is taken only when no value inside it (but its result)
is used elsewhere, so in a gradient graph, whose backward sweep reads the
forward intermediates, the forward patterns are left alone: recognize the
primal graph, then differentiate it.
"""
from __future__ import annotations

import inspect
import sys

from .._core.graph import Graph, Node, Var
from .._core.verifier import verify
from .gradients import grad_body
from .ops import OP_NAMES, OPS, CoarsenedOp, is_coarsened
from .patterns_norm import match_rms_norm, match_rope, match_swiglu
from .patterns_softmax import match_attention, match_cross_entropy
from .rewrite import Index, apply_matches, body_of, closed, inline_body, map_regions


#: op name -> matcher(index, candidate root) -> Match | None
MATCHERS = {"attention": match_attention, "swiglu": match_swiglu, "rms_norm": match_rms_norm,
            "rope": match_rope, "cross_entropy": match_cross_entropy}


def coarsen(graph: Graph, ops=OP_NAMES, gradients: bool = True) -> Graph:
    """``graph`` (specialised) with every recognized pattern replaced by a coarsened op.

    Args:
      graph: a graph from ``specialize`` (concrete avals).
      ops: which recognizers to run, in order (larger patterns first).
      gradients: build each op's gradient body now (``False``: ``grad`` is ``None``
        and the reverse rule builds it when first asked; ``jit`` compiles graphs
        that are not differentiated again).
    Returns:
      A verified graph computing the same values (the same graph when nothing matched).
    """
    out = _coarsen(graph, tuple(ops), gradients)
    return graph if out is graph else verify(out)


def _coarsen(graph: Graph, ops, gradients) -> Graph:
    nodes = tuple(map_regions(n, lambda r: _coarsen(r, ops, gradients)) for n in graph.nodes)
    if any(a is not b for a, b in zip(nodes, graph.nodes)):
        graph = Graph(graph.inputs, nodes, graph.outputs, graph.name)
    ix = Index(graph)
    matches = []
    for op in ops:
        matcher = MATCHERS[op]
        for node in reversed(graph.nodes):
            if id(node) in ix.taken:
                continue
            m = matcher(ix, node)
            if m is not None and closed(ix, m):
                matches.append(m)
                ix.taken.update(id(n) for n in m.nodes)
    return apply_matches(graph, matches, lambda m: _coarsened_node(ix, m, gradients))


def _coarsened_node(ix: Index, m, gradients) -> Node:
    out = m.root.outputs[0]
    diff = tuple(bool(d) and isinstance(a, Var) and a.aval.dtype.kind == "f" for a, d in zip(m.inputs, m.diff))
    grad = grad_body(m.op, [a.aval for a in m.inputs], out.aval, m.attrs, diff) if gradients else None
    params = {"fwd": body_of(ix, m, f"{m.op}_fwd"), "grad": grad, "diff": diff,
              "attrs": tuple(sorted(m.attrs.items()))}
    return Node(OPS[m.op], tuple(m.inputs), (out,), params, m.root.loc)


# -- specialisation keeps a coarsened op (re-specialising a differentiated coarsened graph) ---------

def _specialize_rule(name):
    from .._core import specialize as _spec

    def rule(*ins, fwd, **params):
        avals = [_spec.aval(x) for x in ins]
        if all(a is not None and a.is_concrete and (a.dtype, tuple(a.shape)) == (v.aval.dtype, tuple(v.aval.shape))
               for a, v in zip(avals, fwd.inputs)):
            return _spec.add_node(OPS[name], list(ins), dict(params, fwd=fwd))
        return _spec.run(fwd, list(ins))[0]          # other shapes: the body, specialised
    return rule


def _install_specialize_rules():
    from .._core import specialize as _spec
    for name in OP_NAMES:
        _spec.RULES[name] = _specialize_rule(name)


_install_specialize_rules()


def summary(graph: Graph) -> list:
    """``[(op name, attrs dict)]`` of the coarsened ops in ``graph`` (regions included)."""
    found = []
    for node in graph.nodes:
        if is_coarsened(node):
            found.append((node.prim.name, dict(node.params["attrs"])))
        for region in node.regions():
            if not (is_coarsened(node) and (region is node.params["fwd"] or region is node.params["grad"])):
                found.extend(summary(region))
    return found


# -- decomposition and claims -------------------------------------------------------------------

def decompose(graph: Graph, target: str | None = None, registry=None) -> Graph:
    """``graph`` with each coarsened op inlined (its forward body), except the ops a
    kernel claims for ``target``: those stay, marked with the custom-call name the
    emitter writes (``params["claim"]``)."""
    if registry is None:
        claims = sys.modules.get("tlaloc.kernels.claims")   # nobody can have opted in before it loads
        registry = None if claims is None else claims.registry
    out = _decompose(graph, target, registry)
    return graph if out is graph else verify(out)


def _decompose(graph: Graph, target, registry) -> Graph:
    nodes, changed = [], False
    for node in graph.nodes:
        if is_coarsened(node):
            name = _claim(node, target, registry) if target is not None and registry is not None else None
            if name is None:
                nodes.extend(inline_body(_decompose(node.params["fwd"], target, registry), node))
            else:
                params = dict(node.params, claim=name)
                nodes.append(Node(node.prim, node.inputs, node.outputs, params, node.loc))
            changed = True
            continue
        new = map_regions(node, lambda r: _decompose(r, target, registry))
        changed |= new is not node
        nodes.append(new)
    if not changed:
        return graph
    return Graph(graph.inputs, tuple(nodes), graph.outputs, graph.name)


def _claim(node, target, registry):
    attrs = dict(node.params["attrs"])
    dtype = node.outputs[0].aval.dtype
    choice = registry.choose(node.prim.name, target, dtype=str(dtype), **attrs)
    if choice is None:
        return None
    return custom_call_name(choice, target, attrs)


def custom_call_name(template, target: str, attrs: dict) -> str:
    """The custom-call target of ``template`` for an op: its FFI name for the op's shapes
    where the template specializes for ``target``'s arch, else ``tlaloc_<template name>``."""
    from ..kernels.claims import ARCH, ffi_target_name
    arch = ARCH.get(target)
    build = getattr(template, "build", None)
    if arch is not None and build is not None:
        try:
            accepted = inspect.signature(build).parameters
            shape = {k: v for k, v in attrs.items() if k in accepted}
            return ffi_target_name(template.specialize(arch=arch, **shape))
        except Exception:                                   # a template that wants other shape names
            pass
    return f"tlaloc_{getattr(template, 'name', 'kernel')}"


__all__ = ["coarsen", "decompose", "summary", "custom_call_name", "OPS", "OP_NAMES", "CoarsenedOp",
           "is_coarsened"]
