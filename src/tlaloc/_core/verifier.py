"""The DXIR verifier, run after every pass.

Checks: every operand is defined before use (SSA, regions closed), each var is
defined once, node arity matches the primitive's result count, regions are
``Graph``s whose inputs are fresh vars, and known shapes agree with what the
primitive's shape rule computes. A failure raises ``GraphError`` naming the
node (index, primitive and source location).
"""
from __future__ import annotations

from ..errors import GraphError, TlalocError
from .graph import Graph, Literal, Var


def verify(graph: Graph, _path: str = "") -> Graph:
    """Return ``graph`` unchanged if it is well formed, else raise ``GraphError``."""
    where = _path or graph.name
    defined: set[int] = set()
    for v in graph.inputs:
        if not isinstance(v, Var):
            raise GraphError(f"{where}: input {v!r} is not a Var")
        if v.id in defined:
            raise GraphError(f"{where}: input {v!r} appears twice")
        defined.add(v.id)
    for i, node in enumerate(graph.nodes):
        label = f"{where}: node {i} `{node.prim.name}`" + (f" ({node.loc})" if node.loc else "")
        for a in node.inputs:
            if isinstance(a, Literal):
                continue
            if not isinstance(a, Var):
                raise GraphError(f"{label}: operand {a!r} is neither a Var nor a Literal")
            if a.id not in defined:
                raise GraphError(f"{label}: operand {a!r} is used before it is defined "
                                 f"(or comes from outside this region)")
        want = None if node.prim.multiple_results else 1
        if want is not None and len(node.outputs) != want:
            raise GraphError(f"{label}: has {len(node.outputs)} results, the primitive returns {want}")
        for o in node.outputs:
            if o.id in defined:
                raise GraphError(f"{label}: result {o!r} is defined twice (SSA violated)")
            defined.add(o.id)
        for k, region in node.params.items():
            if isinstance(region, Graph):
                verify(region, f"{label}.{k}")
        _check_types(node, label)
    for o in graph.outputs:
        if isinstance(o, Var) and o.id not in defined:
            raise GraphError(f"{where}: output {o!r} is not defined in the graph")
    return graph


def _check_types(node, label):
    if any(isinstance(v, Graph) for v in node.params.values()):
        return
    try:
        want = node.prim.abstract_eval(*(a.aval for a in node.inputs), **node.params)
    except TlalocError as e:
        raise GraphError(f"{label}: {e}") from None
    wants = want if node.prim.multiple_results else (want,)
    for o, w in zip(node.outputs, wants):
        if o.aval.shape is not None and w.shape is not None and len(o.aval.shape) != len(w.shape):
            raise GraphError(f"{label}: result {o!r} has rank {len(o.aval.shape)} "
                             f"but the shape rule gives {w.shape}")
        if (o.aval.shape is not None and w.shape is not None
                and any(type(a) is int and type(b) is int and a != b for a, b in zip(o.aval.shape, w.shape))):
            raise GraphError(f"{label}: result {o!r} has shape {o.aval.shape} "
                             f"but the shape rule gives {w.shape}")
