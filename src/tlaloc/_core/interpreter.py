"""The reference interpreter: evaluates a DXIR graph with NumPy.

It is the oracle for every other back end. Float64 stays float64 end to end:
each node runs its primitive's NumPy ``impl`` on the concrete inputs.
"""
from __future__ import annotations

from .graph import Graph, Literal


def eval_graph(graph: Graph, *args):
    """Run ``graph`` on concrete ``args``; returns a list of outputs."""
    if len(args) != len(graph.inputs):
        raise TypeError(f"{graph.name}: expected {len(graph.inputs)} inputs, got {len(args)}")
    env = {v.id: a for v, a in zip(graph.inputs, args)}

    def read(atom):
        return atom.value if isinstance(atom, Literal) else env[atom.id]

    for node in graph.nodes:
        vals = [read(a) for a in node.inputs]
        out = node.prim.apply_impl(*vals, **node.params)
        if node.prim.multiple_results:
            for v, o in zip(node.outputs, out):
                env[v.id] = o
        else:
            env[node.outputs[0].id] = out
    return [read(o) for o in graph.outputs]
