"""Symbolic-zero cotangents of a loop's stacked outputs, in the backward loop's body.

The backward loop of a ``for_range`` or ``while_loop`` reads, per iteration, the
cotangent of each stacked output (``ys``). Where no cotangent reaches a stacked
output (under a second reverse pass, the residual stacks of a first-order program
that its backward loop reads only for their shape), that cotangent is zero. A
stack of zeros is not materialised for it: the backward body takes it as a
symbolic zero, ``ZERO``, which an ``add`` drops (``a + 0 == a``). This is also what
makes such programs run: the entries of a residual stack are undefined on
iterations where the value was not assigned yet (a ``return`` value inside a
loop), so their zeros are undefined too, and an undefined value cannot be summed.

``foldable_zero_ys`` says which stacked outputs can be taken so (their cotangent
only ever meets ``add``, also inside nested backward loops, whose stacked inputs
are taken the same way); ``inline_zeros`` emits the body with them.
"""
from __future__ import annotations

from .._core.builder import Builder, Value, current_builder
from .._core.control import for_range_p
from .._core.graph import Graph, Literal, Var
from .._core.passes import dce, inline
from .._prims.elementwise import add_p

#: a symbolic-zero cotangent while a backward body is inlined
ZERO = object()


def foldable_zero_ys(bwd: Graph, n_in: int, ys_gs) -> list:
    """Per stacked output (``ys_gs[k]``: its cotangent, None for zero), whether ``bwd``
    (whose last inputs are the stacked outputs' cotangents, after ``n_in`` others)
    takes it as a symbolic zero."""
    n_ys = len(ys_gs)

    def fold(ks):
        return _foldable(bwd, [False] * n_in + [k in ks for k in range(n_ys)])
    ks = [k for k, g in enumerate(ys_gs) if g is None and fold({k})]
    while ks and not fold(set(ks)):
        ks.pop()
    return [k in ks for k in range(n_ys)]


def _foldable(graph: Graph, zero_inputs) -> bool:
    """Whether ``graph`` can take the inputs marked in ``zero_inputs`` as symbolic zeros:
    each only meets ``add`` (or is a stacked input of a nested ``for_range`` whose body
    can take it so), and no output is zero."""
    zero = {v.id for v, z in zip(graph.inputs, zero_inputs) if z}
    for node in graph.nodes:
        hit = [k for k, a in enumerate(node.inputs) if isinstance(a, Var) and a.id in zero]
        if not hit:
            continue
        if node.prim is add_p:
            if len(hit) == len(node.inputs):
                zero.add(node.outputs[0].id)
        elif node.prim is for_range_p:
            if not _foldable_loop(node, set(hit)):
                return False
        else:
            return False
    return not any(isinstance(o, Var) and o.id in zero for o in graph.outputs)


def _first_x(node) -> int:
    p = node.params
    return 3 + p["n_carry"] + p["n_consts"]


def _foldable_loop(node, hit: set) -> bool:
    first = _first_x(node)
    if min(hit) < first:                        # only stacked inputs (read one entry per iteration)
        return False
    body = node.params["body"]
    return _foldable(body, [k + 2 in hit for k in range(len(body.inputs))])


def inline_zeros(graph: Graph, args):
    """``inline`` where ``ZERO`` args are symbolic zeros (checked by ``_foldable``)."""
    if not any(a is ZERO for a in args):
        return inline(graph, args)
    env = {v.id: a for v, a in zip(graph.inputs, args)}
    b = current_builder()

    def read(a):
        return a.value if isinstance(a, Literal) else env[a.id]

    for node in graph.nodes:
        ins = [read(a) for a in node.inputs]
        if any(x is ZERO for x in ins) and node.prim is add_p:
            rest = [x for x in ins if x is not ZERO]
            outs = (rest[0] if rest else ZERO,)
        else:
            with b.at(node.loc):
                if any(x is ZERO for x in ins):
                    outs = _loop_without_zeros(node, ins)
                else:
                    out = node.prim.bind(*ins, **dict(node.params))
                    outs = tuple(out) if node.prim.multiple_results else (out,)
        for old, new in zip(node.outputs, outs):
            if type(new) is Value and new.var.hint is None:
                new.var.hint = old.hint
            env[old.id] = new
    return [read(o) for o in graph.outputs]


def _loop_without_zeros(node, ins):
    """A nested ``for_range`` whose zero stacked inputs are dropped from its operands
    and taken as symbolic zeros by its body."""
    p = dict(node.params)
    body = p["body"]
    keep = [x is not ZERO for x in ins]
    rb = Builder(name=body.name)
    with rb.active():
        args = [rb.new_input(v.aval, v.hint) if keep[k + 2] else ZERO
                for k, v in enumerate(body.inputs)]
        g = dce(rb.finish(inline_zeros(body, args)))
    p["body"] = g
    p["n_xs"] = p["n_xs"] - keep.count(False)
    return tuple(for_range_p.bind(*(x for x in ins if x is not ZERO), **p))
