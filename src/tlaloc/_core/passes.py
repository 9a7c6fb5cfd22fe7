"""Graph passes shared by the transforms: inlining, dead-code elimination and
the forward/backward split (partial evaluation) of a VJP graph."""
from __future__ import annotations

from .builder import Value, current_builder, user_operands
from .graph import Graph, Literal, Var


def inline(graph: Graph, args, copy_hints: bool = True):
    """Emit ``graph``'s nodes into the active builder with ``args`` as inputs.

    Returns the values of ``graph.outputs``. Nodes whose inputs are all static
    are evaluated eagerly (constant folding).
    """
    if len(args) != len(graph.inputs):
        raise TypeError(f"inline {graph.name}: {len(graph.inputs)} inputs, {len(args)} args")
    env = {v.id: a for v, a in zip(graph.inputs, args)}

    def read(a):
        return a.value if isinstance(a, Literal) else env[a.id]

    with user_operands(False):           # a None literal here is UNDEF, not a user's None
        return _inline(graph, read, env, copy_hints)


def _inline(graph, read, env, copy_hints):
    b = None
    for node in graph.nodes:
        ins = [read(a) for a in node.inputs]
        if b is None:
            try:
                b = current_builder()
            except Exception:
                b = None
        ctx = b.at(node.loc) if b is not None else _null()
        with ctx:
            out = node.prim.bind(*ins, **dict(node.params))
        outs = out if node.prim.multiple_results else (out,)
        for o_old, o_new in zip(node.outputs, outs):
            if copy_hints and type(o_new) is Value and o_new.var.hint is None:
                o_new.var.hint = o_old.hint
            env[o_old.id] = o_new
    return [read(o) for o in graph.outputs]


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def used_vars(graph: Graph) -> set:
    """Ids of vars read by ``graph``'s live nodes and outputs (after DCE)."""
    out = set()
    for node in graph.nodes:
        for a in node.inputs:
            if isinstance(a, Var):
                out.add(a.id)
    for o in graph.outputs:
        if isinstance(o, Var):
            out.add(o.id)
    return out


def dce(graph: Graph) -> Graph:
    """Drop nodes none of whose results are used, except effectful ones (``print``/``assert`` of
    computed values). Regions are pure (the front end keeps effects out of them)."""
    live = {o.id for o in graph.outputs if isinstance(o, Var)}
    kept = []
    for node in reversed(graph.nodes):
        if node.prim.effectful or any(o.id in live for o in node.outputs):
            kept.append(node)
            for a in node.inputs:
                if isinstance(a, Var):
                    live.add(a.id)
    kept.reverse()
    if len(kept) == len(graph.nodes):
        return graph
    return Graph(graph.inputs, tuple(kept), graph.outputs, graph.name)


def _is_grad_node(node) -> bool:
    return node.loc is not None and node.loc.role == "grad"


def split(graph: Graph, n_fwd_inputs: int, n_fwd_outputs: int, recompute_grad_nodes: bool = True):
    """Split a VJP graph into a forward and a backward part (partial evaluation).

    ``graph``'s first ``n_fwd_inputs`` inputs are primal, the rest cotangents;
    its first ``n_fwd_outputs`` outputs are primal, the rest cotangents.
    Returns ``(fwd, bwd, residuals)``: ``fwd(primal ins) -> (primal outs, *residuals)``
    and ``bwd(*residuals, *cotangent ins) -> cotangent outs``, where residuals are
    the primal-side vars (inputs included) that the backward part reads.
    """
    bar_in = {v.id for v in graph.inputs[n_fwd_inputs:]}
    late = set(bar_in)
    # nodes the primal outputs need stay in the forward part whatever their role
    # (under nesting, an inner backward sweep is primal code for the outer one)
    needed = {o.id for o in graph.outputs[:n_fwd_outputs] if isinstance(o, Var)}
    for node in reversed(graph.nodes):
        if any(o.id in needed for o in node.outputs):
            needed.update(a.id for a in node.inputs if isinstance(a, Var))
    fwd_nodes, bwd_nodes = [], []
    for node in graph.nodes:
        # nodes of the backward sweep run there (recomputed from primal residuals)
        # unless the primal outputs need them
        grad_side = recompute_grad_nodes and _is_grad_node(node) and not any(
            o.id in needed for o in node.outputs)
        if grad_side or any(isinstance(a, Var) and a.id in late for a in node.inputs):
            bwd_nodes.append(node)
            late.update(o.id for o in node.outputs)
        else:
            fwd_nodes.append(node)
    for o in graph.outputs[:n_fwd_outputs]:
        if isinstance(o, Var) and o.id in late:
            raise AssertionError("a primal output depends on a cotangent")
    defined_fwd = {v.id: v for v in graph.inputs[:n_fwd_inputs]}
    for node in fwd_nodes:
        for o in node.outputs:
            defined_fwd[o.id] = o
    bwd_graph_outputs = graph.outputs[n_fwd_outputs:]
    residuals, seen = [], set()

    def need(a):
        if isinstance(a, Var) and a.id in defined_fwd and a.id not in seen:
            seen.add(a.id)
            residuals.append(defined_fwd[a.id])

    for node in bwd_nodes:
        for a in node.inputs:
            need(a)
    for o in bwd_graph_outputs:
        need(o)
    fwd = dce(Graph(graph.inputs[:n_fwd_inputs], tuple(fwd_nodes),
                    tuple(graph.outputs[:n_fwd_outputs]) + tuple(residuals), graph.name + "_fwd"))
    bwd = Graph(tuple(residuals) + tuple(graph.inputs[n_fwd_inputs:]), tuple(bwd_nodes),
                tuple(bwd_graph_outputs), graph.name + "_bwd")
    return fwd, bwd, residuals
