"""Plain products where a NaN they could make would reach an output (eager code per signature).

Derivative rules multiply with ``safe_mul`` (and divide with ``safe_div``): the
product, and, only where it holds a NaN, a repair that puts exact zeros where a
factor is zero (``0 * inf`` = 0). Each costs a NaN test after the product, six
per step of a small integrator's backward loop. ``plain_products(graph)``
returns a copy of the graph in which a ``safe_mul``/``safe_div`` becomes
``multiply``/``divide`` wherever a NaN in its result is *observed*: it reaches
a floating-point output of the graph along a path of operations that keep a
NaN a NaN (arithmetic, elementwise functions, sums, broadcasts, reshapes; with
every value on the path of known, non-zero size). In a ``for_range`` body the
path may run through loop carries that each trip's result keeps depending on.

The caller runs that copy first and, where an output holds a NaN or an
infinity (or a floating-point error is raised), runs the exact graph instead
(``signature_code.optimistic``). Where no output does, no plain product made
a NaN, so no repair would have changed a value: the results are the exact
graph's bits.
"""
from __future__ import annotations

import numpy as np

from .._core.graph import Graph, Node, Var
from .._core.primitive import REGISTRY

#: Operations whose result holds a NaN wherever (for reductions and broadcasts: in the
#: element that reads) an operand element is NaN.
_KEEPS_NAN = {"add", "subtract", "multiply", "divide", "negative", "sqrt", "exp", "log", "tanh", "sin", "cos",
              "abs", "sum_to", "reduce_sum", "broadcast_like", "expand_reduced", "reshape_like", "reshape",
              "transpose"}
_PLAIN = {"safe_mul": "multiply", "safe_div": "divide"}
#: of these only the first operand's values are read (the second gives a shape or dtype)
_READS_SHAPE = {"sum_to", "broadcast_like", "expand_reduced", "reshape_like"}


def plain_products(graph: Graph):
    """``graph`` with its observed ``safe_mul``/``safe_div`` made plain, or None where
    none is observed or the graph has effects (a rerun would repeat them)."""
    if _effectful(graph):
        return None
    plain: set = set()
    candidates = _products(graph)
    while True:            # a product stays plain only if its NaN is observed through the plain ones
        observed = set()
        _observe(graph, [True] * len(graph.outputs), candidates, observed)
        kept = {k for k in candidates if k in observed}
        if kept == candidates:
            plain = kept
            break
        candidates = kept
    return _rewrite(graph, plain) if plain else None


def _products(graph) -> set:
    out = set()
    for n in graph.nodes:
        if n.prim.name in _PLAIN:
            out.add(n.outputs[0].id)
        for r in n.regions():
            out |= _products(r)
    return out


def _effectful(graph) -> bool:
    return any(n.prim.effectful or any(_effectful(r) for r in n.regions()) for n in graph.nodes)


def _sized_float(a) -> bool:
    return (a.is_concrete and not a.weak and np.dtype(a.dtype).kind == "f"
            and all(d > 0 for d in a.shape))


def _observe(graph: Graph, out_observed, plain, observed: set) -> None:
    """Add to ``observed`` the vars of ``graph`` (regions included) a NaN in which reaches an
    output flagged in ``out_observed``; ``plain``: products counted as plain."""
    for o, flag in zip(graph.outputs, out_observed):
        if flag and isinstance(o, Var) and _sized_float(o.aval):
            observed.add(o.id)
    for node in reversed(graph.nodes):
        name = node.prim.name
        if name == "for_range":
            _observe_for(node, plain, observed)
            continue
        if not any(o.id in observed for o in node.outputs) or node.prim.multiple_results:
            continue
        if name in _KEEPS_NAN or (name in _PLAIN and node.outputs[0].id in plain):
            for a in node.inputs[:1] if name in _READS_SHAPE else node.inputs:
                if isinstance(a, Var) and _sized_float(a.aval):
                    observed.add(a.id)


def _observe_for(node, plain, observed) -> None:
    p = node.params
    body, n_carry, n_consts = p["body"], p["n_carry"], p["n_consts"]
    n_ys = len(body.outputs) - n_carry
    carry_in = body.inputs[1:1 + n_carry]
    keep = [node.outputs[j].id in observed for j in range(n_carry)]
    while True:            # carries whose NaN lasts to the end: each trip's result depends on the last
        inner = set()
        _observe(body, keep + [False] * n_ys, plain, inner)
        new = [k and v.id in inner for k, v in zip(keep, carry_in)]
        if new == keep:
            break
        keep = new
    observed |= inner
    start, stop, step = node.inputs[:3]
    runs = all(not isinstance(a, Var) for a in (start, stop, step)) and \
        len(range(int(start.value), int(stop.value), int(step.value))) > 0
    ops = node.inputs[3:]
    for k, a in enumerate(ops):
        if not isinstance(a, Var) or not _sized_float(a.aval):
            continue
        if k < n_carry:
            if keep[k]:
                observed.add(a.id)
        elif k < n_carry + n_consts and runs and body.inputs[1 + k].id in inner:
            observed.add(a.id)


def _rewrite(graph: Graph, plain) -> Graph:
    nodes = []
    for n in graph.nodes:
        if n.prim.name in _PLAIN and n.outputs[0].id in plain:
            n = Node(REGISTRY[_PLAIN[n.prim.name]], n.inputs, n.outputs, n.params, n.loc)
        elif n.regions():
            params = {k: _rewrite(v, plain) if isinstance(v, Graph) else v for k, v in n.params.items()}
            n = Node(n.prim, n.inputs, n.outputs, params, n.loc)
        nodes.append(n)
    return Graph(graph.inputs, tuple(nodes), graph.outputs, graph.name)
