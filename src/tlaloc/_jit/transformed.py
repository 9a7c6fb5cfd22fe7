"""What ``jit`` compiles for forward mode, batching and Jacobians: one DXIR graph each.

* ``tl.jit(tl.jvp(f))((x, ...), (v, ...))``: the JVP graph, with its inputs
  reordered to (primal leaves, tangent leaves, closure).
* ``tl.jit(tl.vmap(f, ...))(xs, ...)``: the batched graph vmap builds for the
  argument shapes (``as_lowered``).
* ``tl.jit(tl.jacfwd(f))``, ``tl.jit(tl.jacrev(f))``, ``tl.jit(tl.hessian(f))``:
  the eager transforms loop over basis vectors in Python; compiled, the loop is
  a *vmap over the basis* instead. ``jacfwd`` batches the JVP graph of ``f``
  (tangent of the argument only) over the identity basis of the argument,
  ``jacrev`` batches the VJP graph over the identity basis of the output, and
  ``hessian`` is ``jacfwd(grad(f))``: the same construction on the gradient's
  graph. The basis is a constant of the program (size ``n * n`` for ``n``
  elements), so one compiled program computes the whole Jacobian; its shape
  is ``f(x).shape + x.shape``, as eagerly. Where batching refuses the graph
  (a while loop whose Python-float counter the basis would make per-example
  float64), the graph is inlined once per basis vector instead: still one
  program. An empty argument (or output) gives an empty Jacobian.

Each is a ``Source`` whose graph depends on the argument shapes, so ``jit``
keys these by the argument avals too (``shape_dependent``).
"""
from __future__ import annotations

import numpy as np

from .. import _pytree
from .._core import aval as _aval
from .._core.aval import AbstractValue
from .._core.builder import Builder
from .._core.graph import Graph
from .._core.passes import dce, inline
from ..errors import ArgumentError

_LEAF = _pytree.TreeDef("leaf")
SHAPE_DEPENDENT = ("vmap", "jacfwd", "jacrev")


def shape_dependent(fun) -> bool:
    t = getattr(fun, "__tlaloc_transformed__", None)
    return t is not None and getattr(t, "kind", None) in SHAPE_DEPENDENT


def transformed_source(t, trees, arg_avals):
    """The ``Source`` of transform ``t`` (kind jvp, vmap, jacfwd or jacrev), or ``None``."""
    from .lowering import Source
    kind = getattr(t, "kind", None)
    if kind == "jvp":
        return _jvp_source(t, trees, Source)
    if kind == "vmap":
        return _vmap_source(t, trees, arg_avals, Source)
    if kind in ("jacfwd", "jacrev"):
        return _jacobian_source(t, trees, arg_avals, Source)
    return None


def _arity_check(name, n):
    def check(args, trees, leaves):
        if len(args) != n:
            raise ArgumentError(f"{name}: takes {n} positional arguments, got {len(args)}")
    return check


# -- jvp ------------------------------------------------------------------------------------------

def _jvp_source(t, trees, Source):
    if len(trees) != 2 or any(tr is None or tr.kind not in ("tuple", "list") for tr in trees):
        raise ArgumentError(f"jit of {t.name}: call it as f((x, ...), (v, ...)) with a tuple of primals and a "
                            f"tuple of tangents")
    ptrees, ttrees = list(trees[0].children), list(trees[1].children)
    if ptrees != ttrees:
        raise ArgumentError(f"jvp: the tangents have structure {trees[1]!r} but the primals have {trees[0]!r}")
    entry = t._entry(ptrees if any(tr != _LEAF for tr in ptrees) else None)
    g = entry["graphs"][0][0]
    lowered = entry["lowered"]
    n_args = sum(tr.num_leaves for tr in ptrees)
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
                  out_tree=_pytree.TreeDef("tuple", None, (out_tree, out_tree)))


# -- vmap -----------------------------------------------------------------------------------------

def _vmap_source(t, trees, arg_avals, Source):
    low = t.as_lowered(list(trees), list(arg_avals))
    out_tree = low.out_tree

    def finish(args, trees, outs):
        return _pytree.unflatten(out_tree, list(outs))

    return Source(low.graph, list(low.closure_getters), finish, _arity_check(t.name, len(trees)),
                  out_tree=out_tree)


# -- jacfwd / jacrev / hessian: vmap over a basis -------------------------------------------------

def _jacobian_source(t, trees, arg_avals, Source):
    from .._ad import vmap  # noqa: F401  (registers every batching rule)
    from .._ad.forward import jvp_graph
    from .._ad.reverse import vjp_graph
    from .._core.specialize import specialize
    from .. import numpy as tnp

    if any(tr != _LEAF for tr in trees):
        raise ArgumentError(f"jit of {t.name}: jacfwd/jacrev/hessian take array arguments (no pytrees)")
    n = len(trees)
    for a in t.argnums:
        if not -n <= a < n:
            raise ArgumentError(f"{t.kind}: argnums={a} but {n} arguments were given")
    argnums = tuple(a % n for a in t.argnums)
    low = t.primal_lowering(list(trees))          # shape-polymorphic: the specialisations below type it
    graph = low.graph
    if low.out_tree is not None and low.out_tree != _LEAF or len(graph.outputs) != 1:
        raise ArgumentError(f"jit of {t.name}: the function must return one array, got structure {low.out_tree!r}")
    closure_avals = [_aval.of(np.asarray(g())) for g in low.closure_getters]
    in_avals = list(arg_avals) + closure_avals
    out_av = specialize(graph, in_avals).outputs[0].aval
    for a in argnums:
        if np.dtype(arg_avals[a].dtype).kind != "f":
            raise ArgumentError(f"{t.kind}: argument {a} has dtype {arg_avals[a].dtype}; differentiate with "
                                f"respect to floating-point arguments")

    b = Builder(name=t.name)
    with b.active():
        ins = [b.new_input(av, v.hint) for av, v in zip(in_avals, graph.inputs)]
        jacs = []
        out_shape = tuple(out_av.shape)
        if t.mode == "fwd":
            for a in argnums:
                x_av = arg_avals[a]
                x_shape = tuple(x_av.shape)
                jg, _ = jvp_graph(graph, tangent_mask=[k == a for k in range(len(graph.inputs))])
                dout = _over_basis(jg, ins, in_avals, x_av, [1], f"{t.name}_basis")[0]   # (n, *out)
                jac = tnp.moveaxis(dout, 0, -1) if out_shape else dout
                jacs.append(tnp.reshape(jac, out_shape + x_shape))
        else:
            vg, _ = vjp_graph(graph, wrt=[k in argnums for k in range(len(graph.inputs))], with_primal=False)
            bars = _over_basis(vg, ins, in_avals, out_av, list(range(len(argnums))), f"{t.name}_basis")
            for bar, a in zip(bars, argnums):                 # (m, *x) with m = out.size
                jacs.append(tnp.reshape(bar, out_shape + tuple(arg_avals[a].shape)))
        g = b.finish(list(jacs))
    g = dce(g)
    single = t.single
    out_tree = _LEAF if single else _pytree.TreeDef("tuple", None, tuple(_LEAF for _ in jacs))

    def finish(args, trees, outs):
        return outs[0] if single else tuple(outs)

    return Source(g, list(low.closure_getters), finish, _arity_check(t.name, n), out_tree=out_tree)


def _over_basis(raw, ins, in_avals, basis_av, outs, name):
    """The outputs ``outs`` of ``raw`` (a JVP or VJP graph whose last input takes a basis
    vector) for each vector of the identity basis of ``basis_av``, stacked on a new
    leading axis.

    One batched program (vmap over the basis) of ``raw`` specialised (batching needs
    every size; specialising after the transform keeps ``stop_gradient`` meaningful);
    where batching refuses it (a while loop whose Python-float counter the basis makes
    per-example float64), ``raw`` inlined once per basis vector instead."""
    from .._ad.batching import batch_graph, batched
    from .._core.specialize import specialize
    from .. import numpy as tnp
    from ..errors import TlalocError
    shape = tuple(basis_av.shape)
    n = int(np.prod(shape))
    spec = specialize(raw, list(in_avals) + [basis_av])
    if n == 0:                                         # an empty argument (or output): no columns
        return [np.zeros((0,) + tuple(spec.outputs[k].aval.shape), spec.outputs[k].aval.dtype) for k in outs]
    basis = np.eye(n, dtype=basis_av.dtype).reshape((n,) + shape)
    dims = [None] * len(ins) + [0]
    try:
        bg, _ = batch_graph(spec, dims, in_avals + [AbstractValue(np.dtype(basis_av.dtype), (n,) + shape)], n,
                            name=name, out_fn=_front_fn(batched))
    except TlalocError:
        cols = [inline(raw, list(ins) + [basis[k]]) for k in range(n)]
        return [tnp.reshape(tnp.stack([c[k] for c in cols], axis=0), (n,) + tuple(spec.outputs[k].aval.shape))
                for k in outs]
    res = inline(bg, list(ins) + [basis])
    return [res[k] for k in outs]


def _front_fn(batched):
    """``out_fn`` for ``batch_graph``: every output batched at axis 0."""
    def place(pairs):
        return [(None, None) if v is None else (batched(v, d), 0) for v, d in pairs]
    return place


__all__ = ["transformed_source", "shape_dependent"]
