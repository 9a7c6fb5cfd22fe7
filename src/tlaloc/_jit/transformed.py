"""What ``jit`` compiles for forward mode, batching and Jacobians: one DXIR graph each.

* ``tl.jit(tl.jvp(f))((x, ...), (v, ...))``: the JVP graph, with its inputs
  reordered to (primal leaves, tangent leaves, closure).
* ``tl.jit(tl.vmap(f, ...))(xs, ...)``, ``tl.jit(tl.jacfwd(f))``,
  ``tl.jit(tl.jacrev(f))``, ``tl.jit(tl.hessian(f))``: the graph the transform
  builds for the argument shapes (``as_lowered``), the same one it runs eagerly
  (``tlaloc._ad.vmap``, ``tlaloc._ad.jacobian``).

Each is a ``Source`` whose graph depends on the argument shapes, so ``jit``
keys these by the argument avals too (``shape_dependent``).
"""
from __future__ import annotations

from .. import _pytree
from .._core.graph import Graph
from ..errors import ArgumentError

_LEAF = _pytree.TreeDef("leaf")
SHAPE_DEPENDENT = ("vmap", "jacfwd", "jacrev")


def shape_dependent(fun) -> bool:
    t = getattr(fun, "__tlaloc_transformed__", None)
    return t is not None and getattr(t, "kind", None) in SHAPE_DEPENDENT


def transformed_source(t, trees, arg_avals, Source):
    """The ``Source`` (the class, from ``tlaloc._jit.lowering``) of transform ``t``
    (kind jvp, vmap, jacfwd or jacrev), or ``None``."""
    kind = getattr(t, "kind", None)
    if kind == "jvp":
        return _jvp_source(t, trees, arg_avals, Source)
    if kind in SHAPE_DEPENDENT:
        return _lowered_source(t, trees, arg_avals, Source)
    return None


def _arity_check(name, n):
    def check(args, trees, leaves):
        if len(args) != n:
            raise ArgumentError(f"{name}: takes {n} positional arguments, got {len(args)}")
    return check


# -- jvp ------------------------------------------------------------------------------------------

def _jvp_source(t, trees, arg_avals, Source):
    if len(trees) != 2 or any(tr is None or tr.kind not in ("tuple", "list") for tr in trees):
        raise ArgumentError(f"jit of {t.name}: call it as f((x, ...), (v, ...)) with a tuple of primals and a "
                            f"tuple of tangents")
    ptrees, ttrees = list(trees[0].children), list(trees[1].children)
    if ptrees != ttrees:
        raise ArgumentError(f"jvp: the tangents have structure {trees[1]!r} but the primals have {trees[0]!r}")
    n_args = sum(tr.num_leaves for tr in ptrees)
    if arg_avals:        # the code needs the primals' shapes (e.g. np.dot's ranks): lowered for them
        entry = t._entry(ptrees, list(arg_avals)[:n_args])
    else:
        entry = t._entry(ptrees if any(tr != _LEAF for tr in ptrees) else None)
    g = entry["graphs"][0][0]
    lowered = entry["lowered"]
    n_closure = len(lowered.closure_getters)
    ins = list(g.inputs)
    primals, closure, tangents = ins[:n_args], ins[n_args:n_args + n_closure], ins[n_args + n_closure:]
    graph = Graph(tuple(primals + tangents + closure), g.nodes, g.outputs, g.name)
    n_out = len(g.outputs) // 2
    out_tree = lowered.out_tree

    def finish(args, trees, outs):
        outs = list(outs)
        return (_pytree.unflatten(out_tree, outs[:n_out]), _pytree.unflatten(out_tree, outs[n_out:]))

    return Source(graph, list(lowered.closure_getters), finish, _arity_check(t.name, 2),
                  out_tree=_pytree.TreeDef("tuple", None, (out_tree, out_tree)),
                  guards=tuple(getattr(lowered, "guards", ())))


# -- vmap, jacfwd, jacrev, hessian: the transform's own graph for these shapes ------------------------

def _lowered_source(t, trees, arg_avals, Source):
    low = t.as_lowered(list(trees), list(arg_avals))
    out_tree = low.out_tree

    def finish(args, trees, outs):
        return _pytree.unflatten(out_tree, list(outs))

    return Source(low.graph, list(low.closure_getters), finish, _arity_check(t.name, len(trees)),
                  out_tree=out_tree, guards=tuple(getattr(low, "guards", ())))


__all__ = ["transformed_source", "shape_dependent"]
