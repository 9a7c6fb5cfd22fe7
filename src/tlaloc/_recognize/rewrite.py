"""Graph surgery for the recognizers: an index of producers and uses, matches,
and the two rewrites (coarsen a match into one node; inline a node's body).

Rewrites never re-bind primitives: nodes are copied as they are (a specialised
graph keeps its exact avals), and a replaced value keeps its ``Var``, so every
later use stays valid.
"""
from __future__ import annotations

import dataclasses
from collections import Counter

from .._core.graph import Graph, Literal, Node, Var


class Index:
    """Who produces each var of one graph level, and how often it is used."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producer: dict = {}
        self.uses: Counter = Counter()
        self.pos: dict = {}            # id(node) -> its place in the graph
        for k, node in enumerate(graph.nodes):
            self.pos[id(node)] = k
            for o in node.outputs:
                self.producer[o.id] = node
            for a in node.inputs:
                if isinstance(a, Var):
                    self.uses[a.id] += 1
        for o in graph.outputs:
            if isinstance(o, Var):
                self.uses[o.id] += 1
        self.taken: set = set()        # ids of nodes already inside an accepted match

    def op(self, atom, *names):
        """The node producing ``atom`` when its primitive is one of ``names`` (else None)."""
        if not isinstance(atom, Var):
            return None
        node = self.producer.get(atom.id)
        if node is None or id(node) in self.taken or node.prim.name not in names:
            return None
        return node


@dataclasses.dataclass
class Match:
    """A pattern found at ``root``: the nodes it covers and the op's operands."""
    op: str
    root: Node
    nodes: list
    inputs: list                 # operands (Var or Literal), in the op's order
    attrs: dict
    diff: tuple                  # per operand: does it get a cotangent


def closed(ix: Index, m: Match) -> bool:
    """True when no value computed inside the match (but its root) is used outside it."""
    inside = {id(n) for n in m.nodes}
    if id(m.root) not in inside or any(id(n) in ix.taken for n in m.nodes):
        return False
    internal_uses: Counter = Counter()
    for n in m.nodes:
        for a in n.inputs:
            if isinstance(a, Var):
                internal_uses[a.id] += 1
    for n in m.nodes:
        if n is m.root:
            continue
        for o in n.outputs:
            if internal_uses[o.id] != ix.uses[o.id]:
                return False
    return True


def body_of(ix: Index, m: Match, name: str) -> Graph:
    """The matched nodes as a closed graph: operands in, the root's value out."""
    env: dict = {}
    ins = []
    for k, a in enumerate(m.inputs):
        v = Var(a.aval, getattr(a, "hint", None) or f"in{k}")
        ins.append(v)
        if isinstance(a, Var):
            env[a.id] = v
    nodes = []
    for n in sorted(m.nodes, key=lambda n: ix.pos[id(n)]):
        nodes.append(_copy(n, env, {}))
    out = env[m.root.outputs[0].id]
    return Graph(tuple(ins), tuple(nodes), (out,), name)


def _copy(node: Node, env: dict, keep: dict) -> Node:
    """``node`` with operands renamed by ``env`` and fresh results (``keep`` maps a result's
    id to the Var to reuse for it); records the new results in ``env``."""
    ins = tuple(a if isinstance(a, Literal) else env.get(a.id, a) for a in node.inputs)
    outs = []
    for o in node.outputs:
        new = keep.get(o.id) or Var(o.aval, o.hint)
        env[o.id] = new
        outs.append(new)
    return Node(node.prim, ins, tuple(outs), node.params, node.loc)


def apply_matches(graph: Graph, matches, make_node) -> Graph:
    """``graph`` with each match replaced by ``make_node(match)`` at its root's place."""
    if not matches:
        return graph
    drop = {id(n) for m in matches for n in m.nodes}
    at_root = {id(m.root): m for m in matches}
    nodes = []
    for n in graph.nodes:
        if id(n) in at_root:
            nodes.append(make_node(at_root[id(n)]))
        elif id(n) not in drop:
            nodes.append(n)
    return Graph(graph.inputs, tuple(nodes), graph.outputs, graph.name)


def inline_body(body: Graph, node: Node) -> list:
    """The nodes of ``body`` applied to ``node``'s operands, defining ``node``'s results."""
    env = {v.id: a for v, a in zip(body.inputs, node.inputs)}
    keep = {}
    for o, out in zip(body.outputs, node.outputs):
        if isinstance(o, Var) and o.id not in env:
            keep[o.id] = out
    nodes = [_copy(n, env, keep) for n in body.nodes]
    for o, out in zip(body.outputs, node.outputs):
        if not (isinstance(o, Var) and keep.get(o.id) is out):      # an operand or a constant: copy it
            from .._core.primitive import REGISTRY
            src = o if isinstance(o, Literal) else env.get(o.id, o)
            nodes.append(Node(REGISTRY["copy"], (src,), (out,), {}, node.loc))
    return nodes


def map_regions(node: Node, fn) -> Node:
    """``node`` with ``fn`` applied to each region (the same node when nothing changes)."""
    changed = False
    params = dict(node.params)
    for k, v in node.params.items():
        if isinstance(v, Graph):
            new = fn(v)
            if new is not v:
                params[k] = new
                changed = True
    if not changed:
        return node
    return Node(node.prim, node.inputs, node.outputs, params, node.loc)


__all__ = ["Index", "Match", "closed", "body_of", "apply_matches", "inline_body", "map_regions"]
