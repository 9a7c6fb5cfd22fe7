"""``jacfwd``, ``jacrev`` and ``hessian`` as DXIR transforms: a vmap over a basis.

``jacfwd`` batches the JVP graph of ``f`` (tangent of the differentiated
argument only) over the identity basis of that argument; ``jacrev`` batches the
VJP graph over the identity basis of the output; ``hessian`` is
``jacfwd(grad(f))``. The result is one DXIR graph (shape ``f(x).shape + x.shape``
per argument), built at the first call for the argument shapes, rendered to
Python (``tl.source``) and run; it is also what ``as_lowered`` returns, so these
transforms nest like the others (``tl.jacfwd(tl.jacrev(f))``,
``tl.vmap(tl.jacrev(f))``, ``tl.grad`` of a function calling ``tl.hessian``) and
``tl.jit`` compiles the same graph.

The basis is a constant of the program (``n * n`` for ``n`` elements). Where
batching refuses the graph (a while loop whose Python-float counter the basis
would make per-example float64), the graph is inlined once per basis vector
instead: still one graph. An empty argument (or output) gives an empty Jacobian.
"""
from __future__ import annotations

import os

import numpy as np

from .. import _pytree
from .._core import aval as _aval
from .._core.aval import AbstractValue
from .._core.builder import Builder
from .._core.passes import dce, inline
from .._core.verifier import verify
from .._frontend import specialise
from .._frontend.call_binding import check_positional_count, require_callable
from .._frontend.lower import LoweredFunction
from .._frontend.structure import ShapeNeeded, StructureNeeded
from ..errors import ArgumentError, TlalocError
from .api import _fn_name, _normalize_argnums
from .batching import batch_graph, batched
from .forward import jvp_graph
from .reverse import vjp_graph
from .call_checks import refuse_array_subclasses, refuse_none_argnums, refuse_none_arguments
from .transformed import _LEAF, ShapeDependent, _as_array, _check_against_interpreter, known_shapes, render_and_load


# -- the graph transform ------------------------------------------------------------------------------

def jacobian_graph(graph, in_avals, argnums, mode: str, name: str):
    """The Jacobians of ``graph`` (one output) with respect to inputs ``argnums``.

    Args:
      graph: a DXIR graph with one output.
      in_avals: a concrete aval per input of ``graph``.
      argnums: indices of the (floating-point) inputs to differentiate.
      mode: ``"fwd"`` (vmap of the JVP over the argument's basis) or ``"rev"``
        (vmap of the VJP over the output's basis).
    Returns:
      A graph with ``graph``'s inputs and one output per argnum, of shape
      ``out.shape + in_avals[a].shape``.
    """
    out_av = _out_aval(graph, in_avals)
    b = Builder(name=name)
    with b.active():
        ins = [b.new_input(av, v.hint) for av, v in zip(in_avals, graph.inputs)]
        jacs = []
        out_shape = tuple(out_av.shape)
        from .. import numpy as tnp
        if mode == "fwd":
            for a in argnums:
                x_shape = tuple(in_avals[a].shape)
                jg, _ = jvp_graph(graph, tangent_mask=[k == a for k in range(len(graph.inputs))])
                dout = _over_basis(jg, ins, in_avals, in_avals[a], [1], f"{name}_basis")[0]   # (n, *out)
                jac = tnp.moveaxis(dout, 0, -1) if out_shape else dout
                jacs.append(tnp.reshape(jac, out_shape + x_shape))
        else:
            vg, _ = vjp_graph(graph, wrt=[k in argnums for k in range(len(graph.inputs))], with_primal=False)
            bars = _over_basis(vg, ins, in_avals, out_av, list(range(len(argnums))), f"{name}_basis")
            for bar, a in zip(bars, argnums):                 # (m, *x) with m = out.size
                jacs.append(tnp.reshape(bar, out_shape + tuple(in_avals[a].shape)))
        g = b.finish(list(jacs))
    return dce(g)


def _out_aval(graph, in_avals):
    """The output's aval: as lowered where concrete, else found by specialising."""
    from .._core.specialize import specialize
    av = graph.outputs[0].aval
    if av.is_concrete:
        return av
    return specialize(graph, list(in_avals)).outputs[0].aval


def _over_basis(raw, ins, in_avals, basis_av, outs, name):
    """The outputs ``outs`` of ``raw`` (a JVP or VJP graph whose last input takes a basis
    vector) for each vector of the identity basis of ``basis_av``, stacked on a new
    leading axis.

    One batched program (vmap over the basis) of ``raw`` specialised (batching needs
    every size; specialising after the transform keeps ``stop_gradient`` meaningful).
    Where specialisation or batching refuses it (a reverse-mode while loop without a
    bound), ``raw`` is inlined once per basis vector instead."""
    from .._core.specialize import specialize
    from .. import numpy as tnp
    shape = tuple(basis_av.shape)
    n = int(np.prod(shape))
    basis = np.eye(n, dtype=basis_av.dtype).reshape((n,) + shape)
    try:
        spec = specialize(raw, list(in_avals) + [basis_av])
        if n == 0:                                     # an empty argument (or output): no columns
            return [np.zeros((0,) + tuple(spec.outputs[k].aval.shape), spec.outputs[k].aval.dtype) for k in outs]

        def front(pairs):
            return [(None, None) if v is None else (batched(v, d), 0) for v, d in pairs]

        bg, _ = batch_graph(spec, [None] * len(ins) + [0],
                            list(in_avals) + [AbstractValue(np.dtype(basis_av.dtype), (n,) + shape)],
                            n, name=name, out_fn=front)
    except TlalocError:
        if n == 0:
            raise
        cols = [inline(raw, list(ins) + [basis[k]]) for k in range(n)]
        return [tnp.stack([c[k] for c in cols], axis=0) for k in outs]
    res = inline(bg, list(ins) + [basis])
    return [res[k] for k in outs]


def _jacobians_of_every_output(graph, in_avals, wrt, mode, name, n_main=None):
    """One graph: for each of the first ``n_main`` outputs of ``graph`` (all by default) in turn, its
    Jacobians by the inputs ``wrt``; then the other outputs as they are (``has_aux``'s aux)."""
    n_main = len(graph.outputs) if n_main is None else n_main
    if len(graph.outputs) == 1 and n_main == 1:
        return jacobian_graph(graph, in_avals, wrt, mode, name)
    from .._core.graph import Graph
    b = Builder(name=name)
    with b.active():
        ins = [b.new_input(av, v.hint) for av, v in zip(in_avals, graph.inputs)]
        outs = []
        for k, out in enumerate(graph.outputs[:n_main]):
            one = dce(Graph(graph.inputs, graph.nodes, (out,), f"{graph.name}_out{k}"))
            outs.extend(inline(jacobian_graph(one, in_avals, wrt, mode, f"{name}_out{k}"), ins))
        if n_main < len(graph.outputs):
            aux = dce(Graph(graph.inputs, graph.nodes, tuple(graph.outputs[n_main:]), f"{graph.name}_aux"))
            outs.extend(inline(aux, ins))
        g = b.finish(outs)
    return dce(g)


def _result_tree(out_tree, arg_trees, single):
    """The structure of the Jacobians: the output's, each leaf holding, per argnum, the argument's
    structure (one argnum given as an int: that structure alone)."""
    per_output = arg_trees[0] if single else _pytree.TreeDef("tuple", None, tuple(arg_trees))
    dummy = _pytree.unflatten(per_output, [0] * per_output.num_leaves)
    out_tree = out_tree if out_tree is not None else _LEAF
    return _pytree.flatten(_pytree.unflatten(out_tree, [dummy] * out_tree.num_leaves))[1]


# -- the transform --------------------------------------------------------------------------------------

class JacobianTransform(ShapeDependent):
    """``tl.jacfwd(f)`` / ``tl.jacrev(f)``: built per argument shapes (like ``vmap``)."""
    same_signature = True

    def __init__(self, fn, argnums, mode, has_aux=False):
        require_callable(f"jac{mode}", fn)
        self.has_aux = has_aux
        self.argnums, self.single = _normalize_argnums(argnums, f"jac{mode}")
        self.mode, self.kind = mode, f"jac{mode}"
        self.fn, self.name = fn, f"jac{mode}_{_fn_name(fn)}"
        self._entries, self._last, self._eager_error = {}, None, None
        self.__name__ = self.__qualname__ = self.name
        self.__doc__ = f"{self.kind} of `{_fn_name(fn)}` (generated by tlaloc)."
        self.__wrapped__ = fn
        self.__tlaloc_transformed__ = self
        try:        # the front end's checks (language fence, typed tensors) at definition time
            low = self.primal_lowering(None)
        except StructureNeeded:
            return  # pytree arguments, or an inner shape-dependent transform: checked at the first call
        # the mode's refusals too (a custom_vjp without defjvp under jacfwd): where the transform is applied
        if mode == "fwd":
            jvp_graph(low.graph)
        else:
            vjp_graph(low.graph)

    def _built(self, trees, avals):
        """The entry for arguments with structures ``trees`` and leaf ``avals``.

        Pytrees in and out, as JAX's: for each output leaf, per argnum, the argument's structure
        with the Jacobian of that output leaf by each of its leaves (shape ``out.shape +
        leaf.shape``); a tuple over ``argnums`` unless one int was given; all in the output's
        structure. (Regression: dict arguments and tuple outputs were refused, and so was
        ``hessian(f, argnums=(0, 1))``, which is jacfwd of a tuple-valued grad.)"""
        n = len(trees)
        for a in self.argnums:
            if not -n <= a < n:
                raise ArgumentError(f"{self.kind}: argnums={a} but {n} arguments were given")
        argnums = tuple(a % n for a in self.argnums)
        ranges, k = [], 0
        for tr in trees:
            ranges.append((k, k + tr.num_leaves))
            k += tr.num_leaves
        wrt = [i for a in argnums for i in range(*ranges[a])]
        for a in argnums:
            for i in range(*ranges[a]):
                if avals[i] is None or np.dtype(avals[i].dtype).kind != "f":
                    raise ArgumentError(f"{self.kind}: argument {a} has a leaf of dtype "
                                        f"{getattr(avals[i], 'dtype', type(avals[i]).__name__)}; differentiate "
                                        f"with respect to floating-point arrays")
        low = self.primal_lowering(list(trees), list(avals))
        closure_avals = [g.value.aval if getattr(g, "__tlaloc_captured__", False) else _aval.of(np.asarray(g()))
                         for g in low.closure_getters]                    # captured: local_transform.py
        key = (tuple(trees), tuple(avals), tuple(closure_avals))
        if key in self._entries and not self.drop_if_stale(self._entries[key]["lowered"]):
            return self._entries[key]
        in_avals = [a.aval if isinstance(a, specialise.StaticValue) else a for a in avals] + closure_avals
        out_tree, n_main = low.out_tree, len(low.graph.outputs)
        if self.has_aux:
            if out_tree is None or out_tree.kind not in ("tuple", "list") or len(out_tree.children) != 2:
                raise ArgumentError(f"{self.kind}(has_aux=True): `{_fn_name(self.fn)}` must return a pair "
                                    f"(out, aux), got structure {out_tree!r}")
            out_tree, n_main = out_tree.children[0], out_tree.children[0].num_leaves
        g = verify(_jacobians_of_every_output(low.graph, in_avals, wrt, self.mode, self.name, n_main))
        arg_names = [v.hint for v in low.graph.inputs]
        doc = f"The Jacobian of `{_fn_name(self.fn)}` ({self.kind}, argnums={self.argnums!r})."
        source, namespace = render_and_load([(g, self.name, arg_names, doc)], f"{self.kind} of {_fn_name(self.fn)}",
                                            self.name)
        out_tree = _result_tree(out_tree, [trees[a] for a in argnums], self.single)
        if self.has_aux:                     # (jacobians, aux), aux as the function returned it
            out_tree = _pytree.TreeDef("tuple", None, (out_tree, low.out_tree.children[1]))
        as_lowered = LoweredFunction(g, low.fn, low.arg_names, low.arg_trees, low.closure_getters, out_tree,
                                     low.src, tuple(low.guards))
        entry = {"source": source, "fn": namespace[self.name], "lowered": low,
                 "graphs": [(g, self.name, arg_names, doc)], "as_lowered": as_lowered, "out_tree": out_tree}
        self._entries[key] = entry
        return entry

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self.bind_call(args, kwargs)
        else:
            check_positional_count(self.name, self.fn, len(args))
        refuse_none_argnums(self.kind, self.fn, args, self.argnums)
        refuse_none_arguments(self.kind, self.fn, args)
        refuse_array_subclasses(self.kind, self.fn, args)
        wrt = {a % len(args) for a in self.argnums if -len(args) <= a < len(args)}
        flat, trees, avals = [], [], []
        for k, a in enumerate(args):
            leaves, tree = _pytree.flatten(a)
            trees.append(tree)
            for x in leaves:
                if specialise.is_object(x) and k not in wrt:
                    # a function or model object: static, as under tl.grad (regression: refused,
                    # "expected an array or a number, got function")
                    flat.append(specialise.NOTHING)
                    avals.append(specialise.StaticValue(x, _aval.of(specialise.NOTHING)))
                    continue
                # a Python float not differentiated stays one: weak, as NumPy (NEP 50) and JAX take it
                flat.append(x if type(x) is float and k not in wrt else _as_array(x))
                avals.append(_aval.of(flat[-1]))
        entry = self._built(trees, avals)
        self._last = entry
        closure = [g() for g in entry["lowered"].closure_getters]
        outs = entry["fn"](*flat, *closure)
        if os.environ.get("TLALOC_CHECK_RENDER"):
            _check_against_interpreter(entry, list(flat) + closure, outs)
        return _pytree.unflatten(entry["out_tree"], list(outs))

    def as_lowered(self, arg_trees, arg_avals=None) -> LoweredFunction:
        if not known_shapes(arg_trees, arg_avals):
            raise ShapeNeeded(
                f"{self.name}: {self.kind} builds its graph from the shapes of its arguments, which are not "
                f"known here; call it on arrays, or annotate the arguments with their shapes")
        return self._built(list(arg_trees), list(arg_avals))["as_lowered"]


__all__ = ["JacobianTransform", "jacobian_graph"]
