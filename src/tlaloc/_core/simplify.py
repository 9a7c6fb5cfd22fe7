"""Clean-up passes for generated graphs: common-subexpression elimination and
pruning of loop values nobody reads.

Reverse mode emits each rule's result separately, so ``d * d`` gives the same
``safe_mul(d_bar, d)`` and ``sum_to`` twice, and a backward loop carries the
cotangent of every loop constant, also of constants outside ``argnums``. These
passes remove that work; the values computed are the same (same NumPy calls on
the same operands), so results keep their bits.

* ``cse(graph)``: a node that applies the same primitive to the same operands
  with the same params as an earlier node is dropped, and its results are
  read from the earlier node. Every primitive is pure (random primitives take
  their key as an operand). Nodes that hold regions are kept, their regions
  simplified inside.
* ``prune_loops(graph)``: a ``for_range`` carry whose result nobody reads and
  which no live carry or stacked output depends on is dropped, with stacked
  outputs nobody reads, and loop constants and stacked inputs the body no
  longer reads. Loops whose results are all unread are dropped.
"""
from __future__ import annotations

from .control import for_range_p
from .graph import Graph, Literal, Node, Var


def simplify(graph: Graph) -> Graph:
    return prune_loops(cse(graph))


# -- common-subexpression elimination ---------------------------------------------------

def cse(graph: Graph) -> Graph:
    """``graph`` with repeated computations merged (see the module docstring)."""
    subst: dict[int, Var] = {}
    seen: dict = {}
    nodes = []

    def atom(a):
        return subst.get(a.id, a) if isinstance(a, Var) else a

    for node in graph.nodes:
        ins = tuple(atom(a) for a in node.inputs)
        if node.regions():
            params = {k: cse(v) if isinstance(v, Graph) else v for k, v in node.params.items()}
            nodes.append(Node(node.prim, ins, node.outputs, params, node.loc))
            continue
        key = _key(node, ins)
        if key is not None:
            earlier = seen.get(key)
            if earlier is not None:
                for old, new in zip(node.outputs, earlier.outputs):
                    subst[old.id] = new
                continue
        if ins != node.inputs:
            node = Node(node.prim, ins, node.outputs, node.params, node.loc)
        if key is not None:
            seen[key] = node
        nodes.append(node)
    outputs = tuple(atom(o) for o in graph.outputs)
    return Graph(graph.inputs, tuple(nodes), outputs, graph.name)


def _key(node, ins):
    """A hashable identity of ``node``'s computation, or None (never merged)."""
    if node.prim.effectful:                          # two prints print twice
        return None
    try:
        params = tuple(sorted((k, type(v), v) for k, v in node.params.items()))
        key = (node.prim, tuple(_atom_key(a) for a in ins), params)
        hash(key)
    except TypeError:
        return None
    return key


def _atom_key(a):
    if isinstance(a, Var):
        return a.id
    v = a.value
    if isinstance(v, (bool, int, float, str, type(None))):
        return ("literal", type(v), repr(v))         # repr: 0.0 and -0.0 differ, as do 1 and 1.0
    return ("literal object", id(v))


# -- pruning loops --------------------------------------------------------------------

def prune_loops(graph: Graph) -> Graph:
    """``graph`` without unread loop carries, stacked outputs and loops (see the module docstring)."""
    live = {o.id for o in graph.outputs if isinstance(o, Var)}
    kept = []
    for node in reversed(graph.nodes):
        if not node.prim.effectful and not any(o.id in live for o in node.outputs):
            continue                                 # dead (regions are pure)
        if node.prim is for_range_p:
            node = _prune_for(node, live)
        elif node.regions():
            params = {k: prune_loops(v) if isinstance(v, Graph) else v for k, v in node.params.items()}
            if any(params[k] is not v for k, v in node.params.items()):
                node = Node(node.prim, node.inputs, node.outputs, params, node.loc)
        kept.append(node)
        live.update(a.id for a in node.inputs if isinstance(a, Var))
    kept.reverse()
    if len(kept) == len(graph.nodes) and all(a is b for a, b in zip(kept, graph.nodes)):
        return graph
    return Graph(graph.inputs, tuple(kept), graph.outputs, graph.name)


def _prune_for(node, live) -> Node:
    p = dict(node.params)
    body, n_carry, n_consts, n_xs = p["body"], p["n_carry"], p["n_consts"], p["n_xs"]
    n_ys = len(body.outputs) - n_carry
    carry_in = body.inputs[1:1 + n_carry]
    keep_carry = [node.outputs[k].id in live for k in range(n_carry)]
    keep_ys = [node.outputs[n_carry + j].id in live for j in range(n_ys)]
    while True:                      # a carry that a kept output reads is kept
        outs = [o for o, keep in zip(body.outputs, keep_carry + keep_ys) if keep]
        needed = _needed(body, outs)
        grown = [keep or v.id in needed for keep, v in zip(keep_carry, carry_in)]
        if grown == keep_carry:
            break
        keep_carry = grown
    if all(keep_carry) and all(keep_ys) and all(v.id in needed for v in body.inputs[1 + n_carry:]):
        inner = prune_loops(body)
        if inner is body:
            return node
        p["body"] = inner
        return Node(node.prim, node.inputs, node.outputs, p, node.loc)
    consts_in = body.inputs[1 + n_carry:1 + n_carry + n_consts]
    xs_in = body.inputs[1 + n_carry + n_consts:]
    keep_consts = [v.id in needed for v in consts_in]
    keep_xs = [v.id in needed for v in xs_in]
    ops = node.inputs[3:]
    keep_ops = keep_carry + keep_consts + keep_xs
    new_body = Graph((body.inputs[0],) + _pick(body.inputs[1:], keep_ops), body.nodes,
                     _pick(body.outputs, keep_carry + keep_ys), body.name)
    p.update(body=prune_loops(new_body), n_carry=sum(keep_carry), n_consts=sum(keep_consts), n_xs=sum(keep_xs))
    return Node(node.prim, tuple(node.inputs[:3]) + _pick(ops, keep_ops),
                _pick(node.outputs, keep_carry + keep_ys), p, node.loc)


def _pick(items, keep) -> tuple:
    return tuple(x for x, k in zip(items, keep) if k)


def _needed(graph: Graph, outputs) -> set:
    """Ids of the vars (inputs included) that computing ``outputs`` reads."""
    need = {o.id for o in outputs if isinstance(o, Var)}
    for node in reversed(graph.nodes):
        if any(o.id in need for o in node.outputs):
            need.update(a.id for a in node.inputs if isinstance(a, Var))
    return need



# -- broadcasts and negations that NumPy makes unnecessary (graphs with concrete avals) ------

_BROADCASTING = {"add", "subtract", "multiply", "divide", "safe_mul", "safe_div"}
_ELEMENTWISE = {"maximum", "minimum", "power", "integer_pow"}     # besides _BROADCASTING and UNARY


def drop_broadcasts(graph: Graph, c_ordered_inputs=()) -> Graph:
    """``graph`` with ``broadcast_like(x, like)`` operands of binary elementwise nodes
    replaced by ``x`` where the other operand already has the result's shape: NumPy's
    broadcasting gives the same elements, so the same bits, without the copy. A size-1
    ``x`` made by ``expand_reduced`` is replaced by the value it expands. Needs concrete
    avals (``_ad/signature_fold.py``); unread broadcasts are left for ``passes.dce``;
    ``graph`` itself is returned where nothing is dropped.

    Not bit for bit where both operands hold a NaN: which NaN (sign bit) the product
    keeps depends on the NumPy loop that runs it (array-array or array-scalar, SIMD
    body or tail), so ``signature_code`` reruns the generic code on a non-finite result.

    The result's memory order must stay the same too (a later ``sum`` adds in memory
    order, so it decides the last bits): a small broadcast is a C-ordered copy, which
    makes the result C-ordered, so below ``_SMALL`` elements a broadcast is only dropped
    where the other operand is known to be C-ordered (``c_ordered_inputs``: one flag per
    graph input; see ``_c_ordered``) or the result has at most one dim above 1. Above
    ``_SMALL`` the broadcast is NumPy's own zero-stride view, as without it."""
    producers = {o.id: n for n in graph.nodes for o in n.outputs}
    c_ordered = {v.id for v, c in zip(graph.inputs, c_ordered_inputs) if c}
    nodes = []
    for node in graph.nodes:
        if node.regions():
            params = {k: drop_broadcasts(v) if isinstance(v, Graph) else v for k, v in node.params.items()}
            if any(params[k] is not v for k, v in node.params.items()):
                node = Node(node.prim, node.inputs, node.outputs, params, node.loc)
        elif node.prim.name in _BROADCASTING and len(node.inputs) == 2:
            # one operand at a time: the second is judged against the first as rewritten (dropping
            # both broadcasts of `broadcast(a) * broadcast(b)` would lose the result's shape)
            ins = list(node.inputs)
            for i in (0, 1):
                ins[i] = _unbroadcast(ins[i], ins[1 - i], node.outputs[0].aval, producers, c_ordered)
            if ins != list(node.inputs):
                node = Node(node.prim, tuple(ins), node.outputs, node.params, node.loc)
        if _makes_c_ordered(node, c_ordered):
            c_ordered.update(o.id for o in node.outputs)
        nodes.append(node)
    if all(a is b for a, b in zip(nodes, graph.nodes)):
        return graph
    return Graph(graph.inputs, tuple(nodes), graph.outputs, graph.name)


def _makes_c_ordered(node, c_ordered) -> bool:
    """Whether a node's result is C-ordered: ``matmul``'s always is (a new array), an
    elementwise node's where its operands all are (NumPy's ``order="K"``)."""
    from .._prims.elementwise import UNARY
    name = node.prim.name
    if name == "matmul":
        return True
    if name not in _BROADCASTING and name not in UNARY and name not in _ELEMENTWISE:
        return False
    return all(_c_ordered(a, c_ordered) for a in node.inputs)


def _c_ordered(a, c_ordered) -> bool:
    """Known to iterate in C order: a C-ordered input or elementwise result, or a value
    whose memory order cannot matter (at most one dim above 1, a C-contiguous constant)."""
    av = _aval(a)
    if av is not None and av.is_concrete and sum(d > 1 for d in av.shape) <= 1:
        return True
    if isinstance(a, Literal):
        import numpy as np
        return not isinstance(a.value, np.ndarray) or a.value.flags.c_contiguous
    return a.id in c_ordered


def _unbroadcast(a, other, out, producers, c_ordered):
    import numpy as np
    from .._prims.broadcasting import _SMALL
    p = producers.get(a.id) if isinstance(a, Var) else None
    if p is None or p.prim.name != "broadcast_like" or not _strong(out) or not _strong(_aval(other)) \
            or _aval(other).shape != out.shape:
        return a
    if int(np.prod(out.shape)) <= _SMALL and not _c_ordered(other, c_ordered) \
            and sum(d > 1 for d in out.shape) > 1:
        return a                     # the C-ordered copy decides the result's memory order
    src = p.inputs[0]
    q = producers.get(src.id) if isinstance(src, Var) else None
    if q is not None and q.prim.name == "expand_reduced" and not q.params.get("keepdims") \
            and _strong(_aval(q.inputs[0])) and int(np.prod(_aval(q.inputs[0]).shape)) == 1:
        src = q.inputs[0]
    if not _strong(_aval(src)) or _aval(src).dtype != a.aval.dtype or len(_aval(src).shape) > len(out.shape):
        return a
    try:
        if tuple(np.broadcast_shapes(_aval(src).shape, _aval(other).shape)) != tuple(out.shape):
            return a
    except ValueError:
        return a
    return src


def literal_aval(value):
    """What a constant operand is at run time: a Python number is weak (NEP 50)."""
    import numpy as np
    from .aval import UNKNOWN, AbstractValue
    if isinstance(value, (bool, int, float)) and not isinstance(value, np.generic):
        return AbstractValue(np.asarray(value).dtype, (), weak=True)
    if isinstance(value, (np.ndarray, np.generic)):
        return AbstractValue(value.dtype, tuple(np.shape(value)))
    return UNKNOWN


def _aval(atom):
    return atom.aval if isinstance(atom, Var) else literal_aval(atom.value)


def _strong(a) -> bool:
    return a is not None and a.is_concrete and not a.weak


def fold_negations(graph: Graph) -> Graph:
    """``graph`` with negations folded where the bits are the same:

    * ``negative(multiply(x, c))`` for a Python float ``c`` whose product nothing else
      reads becomes ``multiply(x, -c)`` (round-to-nearest is symmetric in sign);
    * ``add(x, negative(y))`` and ``add(negative(y), x)`` become ``subtract(x, y)``
      (IEEE defines ``x - y`` as ``x + (-y)``).

    Only on float values of known dtype; a NaN may come out with the other sign bit.
    Unread nodes are left for ``passes.dce``; ``graph`` itself is returned where nothing folds."""
    from .primitive import REGISTRY
    uses: dict = {}

    def count(g):
        for n in g.nodes:
            for a in n.inputs:
                if isinstance(a, Var):
                    uses[a.id] = uses.get(a.id, 0) + 1
            for r in n.regions():
                count(r)
        for o in g.outputs:
            if isinstance(o, Var):
                uses[o.id] = uses.get(o.id, 0) + 1
    count(graph)
    return _fold_neg(graph, uses, REGISTRY)


def _fold_neg(graph, uses, registry):
    producers = {o.id: n for n in graph.nodes for o in n.outputs}
    negs = {}                           # id of a negative's result -> its operand
    nodes = []
    for node in graph.nodes:
        name = node.prim.name
        if node.regions():
            params = {k: _fold_neg(v, uses, registry) if isinstance(v, Graph) else v
                      for k, v in node.params.items()}
            if any(params[k] is not v for k, v in node.params.items()):
                node = Node(node.prim, node.inputs, node.outputs, params, node.loc)
        elif name == "negative" and _float(node.outputs[0].aval):
            y = node.inputs[0]
            p = producers.get(y.id) if isinstance(y, Var) else None
            if p is not None and p.prim.name == "multiply" and uses.get(y.id) == 1:
                x, c = p.inputs
                if isinstance(c, Literal) and type(c.value) is float:
                    node = Node(p.prim, (x, Literal(-c.value, c.aval)), node.outputs, {}, node.loc)
                elif isinstance(x, Literal) and type(x.value) is float:
                    node = Node(p.prim, (Literal(-x.value, x.aval), c), node.outputs, {}, node.loc)
            if node.prim.name == "negative":
                negs[node.outputs[0].id] = y
        elif name == "add" and _float(node.outputs[0].aval):
            x, y = node.inputs
            if isinstance(y, Var) and y.id in negs:
                node = Node(registry["subtract"], (x, negs[y.id]), node.outputs, {}, node.loc)
            elif isinstance(x, Var) and x.id in negs:
                node = Node(registry["subtract"], (y, negs[x.id]), node.outputs, {}, node.loc)
        nodes.append(node)
    if all(a is b for a, b in zip(nodes, graph.nodes)):
        return graph
    return Graph(graph.inputs, tuple(nodes), graph.outputs, graph.name)


def _float(a) -> bool:
    import numpy as np
    return _strong(a) and np.dtype(a.dtype).kind == "f"
