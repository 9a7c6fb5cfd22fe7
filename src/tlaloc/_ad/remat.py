"""``tl.checkpoint`` (rematerialization): the backward pass recomputes instead of storing.

    step = tl.checkpoint(step)                       # as jax.checkpoint: inside grad, the
    def loss(x, W):                                  # backward pass recomputes step's internals
        for i in range(1000):
            x = step(x, W)
        return (x * x).sum()

    loss_ck = tl.checkpoint(loss, every=32)          # its loops: store O(n/k + k) residuals

A call becomes one coarsened node, ``checkpoint_call``, whose ``fun`` region is
the lowered function. Its reverse rule runs the node as it is in the forward
sweep (the region's internals are not residuals) and, in the backward sweep,
runs the region's forward sweep again from the node's inputs, followed by its
backward sweep. The recomputed nodes are marked as backward-sweep nodes, so
when the call sits in a loop body the loop stores only the call's inputs per
iteration (``_core/passes.split``). ``policy(prim_name, params) -> bool`` marks
the region's top-level results that may be saved instead (JAX's
``checkpoint_policies`` names); those are extra outputs of the forward node and
are not recomputed.

``every=k`` restructures each top-level ``for`` loop of ``fun`` (a carry-only
loop: no stacked inputs or outputs) into an outer loop over segments of ``k``
iterations whose body is a checkpointed inner loop of at most ``k`` iterations.
The forward sweep stores one carry per segment; the backward sweep recomputes a
segment at a time, storing its ``k`` iterations' residuals: O(n/k + k) instead
of O(n), smallest near ``k = √n``. ``every=(k₁, k₂, ...)`` nests the split
(segments of segments): O(n/k₁ + k₁/k₂ + ... + k_last) residuals for one more
forward recomputation per level, e.g. ``(100, 10)`` for n = 1,000. This is
fixed-stride multi-level checkpointing; Griewank & Walther, "Algorithm 799:
revolve" (ACM TOMS 26(1), 2000) give the optimal (binomial) schedule for a
given number of stored states, which is not implemented here. With static
loop bounds the segments are ``n // k`` loops of exactly ``k`` iterations and a
tail loop of ``n % k``, all with constant trip counts, so ``tl.jit`` compiles
them; with run-time bounds (``range(len(x))`` before shapes are known) the
segment bounds are values, which compiled reverse mode refuses by name (the
interpreter and the generated Python run them).

Forward mode (``jvp``) has nothing to save and runs the region's forward rules;
``vmap`` batches the region and keeps the node; ``jit`` and the renderer run the
region inline. Gradients are bit-identical to those without the checkpoint in
the interpreter (the same operations in the same order).
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .. import _pytree
from .._core import aval as _aval
from .._core.builder import Value
from .._core.graph import Graph, SourceLoc
from .._core.interpreter import eval_graph
from .._frontend.lower import LoweredFunction, lower_function
from ..errors import ArgumentError
from .custom import lower_wrapped
from .custom_call import _RegionCall
from .reverse import forward_sweep, grad_loc


# -- policies (JAX's names) -----------------------------------------------------------------------

_DOTS = frozenset({"matmul", "dot_general", "einsum", "matmul_t_lhs", "matmul_t_rhs"})


class checkpoint_policies:
    """What a checkpointed function may save for the backward pass instead of recomputing.

    Each is ``policy(prim_name, params) -> bool`` (True: save that result); pass any such
    function as ``policy=``."""

    @staticmethod
    def nothing_saveable(prim_name, params):
        """Save nothing: recompute everything (the default, as ``jax.checkpoint``)."""
        return False

    @staticmethod
    def everything_saveable(prim_name, params):
        """Save everything: the same as no checkpoint."""
        return True

    @staticmethod
    def dots_saveable(prim_name, params):
        """Save the results of matrix products (``matmul``, ``dot_general``, ``einsum``)."""
        return prim_name in _DOTS


# -- the coarsened node ---------------------------------------------------------------------------

def _call_impl(*ins, fun, policy, name):
    return tuple(eval_graph(fun, *ins))


checkpoint_call_p = _RegionCall("checkpoint_call", impl=_call_impl, hlo=None, multiple_results=True,
                                shape_rule=lambda *a, **k: None, dtype_rule=lambda *a, **k: None)
checkpoint_call_p.inline_region = "fun"


def _as_backward(graph: Graph, loc) -> Graph:
    """``graph`` with its top-level nodes marked as backward-sweep nodes (``loc.role == "grad"``),
    so that the loop split keeps the recomputation on the backward side."""
    fallback = grad_loc(loc) or SourceLoc("<tl.checkpoint>", 0, 0, role="grad")
    nodes = tuple(dataclasses.replace(n, loc=grad_loc(n.loc) if n.loc is not None else fallback)
                  for n in graph.nodes)
    return Graph(graph.inputs, nodes, graph.outputs, graph.name)


def _saved_vars(graph: Graph, policy):
    if policy is None:
        return []
    return [o for n in graph.nodes if n.prim.reverse_rule is None and policy(n.prim.name, dict(n.params))
            for o in n.outputs]


def _reverse(node, ins):
    p = dict(node.params)
    fun, policy = p["fun"], p["policy"]
    saved_vars = _saved_vars(fun, policy)
    n_out = len(fun.outputs)
    if saved_vars:
        fwd = Graph(fun.inputs, fun.nodes, tuple(fun.outputs) + tuple(saved_vars), fun.name + "_save")
        res = checkpoint_call_p.bind(*ins, fun=fwd, policy=policy, name=p["name"])
    else:
        res = checkpoint_call_p.bind(*ins, **p)
    outs, saved = list(res[:n_out]), list(res[n_out:])

    def backward(gs):
        if all(g is None for g in gs):
            return [None] * len(ins)
        given = {v.id: s for v, s in zip(saved_vars, saved)}
        _, back = forward_sweep(_as_backward(fun, node.loc), list(ins), given=given)
        return back(list(gs))

    return tuple(outs), backward


def _forward(node, ins, tins):
    from .forward import forward_tangents
    if all(t is None for t in tins):
        outs = checkpoint_call_p.bind(*ins, **dict(node.params))
        return tuple(outs), (None,) * len(outs)
    outs, touts = forward_tangents(node.params["fun"], list(ins), list(tins))
    return tuple(outs), tuple(touts)


def _batch(args, dims, *, fun, policy, name):
    from .batching import aval_of, region
    g, out_dims = region(fun, [aval_of(a) for a in args], list(dims), name=fun.name)
    outs = checkpoint_call_p.bind(*args, fun=g, policy=policy, name=name)
    return tuple(outs), tuple(out_dims)


checkpoint_call_p.reverse_rule = _reverse
checkpoint_call_p.forward_rule = _forward
checkpoint_call_p.batch = _batch


# -- the user-facing object -----------------------------------------------------------------------

class Checkpointed:
    """``tl.checkpoint(fun)``: calls run ``fun``; inside a transform the call is a
    ``checkpoint_call`` node (see the module docstring)."""

    def __init__(self, fun, policy, every):
        functools.update_wrapper(self, fun)
        self.fun, self.policy, self.every = fun, policy, every

    @property
    def __tlaloc_custom__(self):
        return self

    def __call__(self, *args, **kwargs):
        return self.fun(*args, **kwargs)

    def __repr__(self):
        return f"<tl.checkpoint {self.__name__}>"

    def _graph(self, trees, avals):
        lowered = lower_function(self.fun, arg_trees=list(trees), arg_avals=list(avals), name=self.__name__)
        g = lowered.graph
        if self.every is not None:
            from .remat_loops import segment_loops
            g = segment_loops(g, self.every, self.policy, self.__name__)
        return lowered, g

    def _emit(self, args, closure, error=None):
        flat, trees = [], []
        for a in args:
            leaves, tree = _pytree.flatten(a)
            flat.extend(leaves)
            trees.append(tree)
        avals = [x.aval if type(x) is Value else _aval.of(x) for x in flat]
        lowered, g = self._graph(trees, avals)
        closures = [closure(getter, "c", k) for k, getter in enumerate(lowered.closure_getters)]
        outs = checkpoint_call_p.bind(*flat, *closures, fun=g, policy=self.policy, name=self.__name__)
        return _pytree.unflatten(lowered.out_tree, list(outs))

    def lower_call(self, lowerer, args, kwargs, node):
        """A call inside a function being lowered: one ``checkpoint_call`` node."""
        if kwargs:
            raise lowerer.src.error(node, f"call the checkpointed function `{self.__name__}` with "
                                          f"positional arguments only")

        def closure(getter, role, k):
            return lowerer._external(getter(), ("checkpoint", id(getter)), getter, f"{self.__name__}_c{k}")
        return self._emit(list(args), closure)

    def __tlaloc_lower__(self, arg_trees, arg_avals) -> LoweredFunction:
        """``tl.grad(tl.checkpoint(f))``: f's graph inside one checkpoint node."""
        return lower_wrapped(self, self.fun, arg_trees, arg_avals, self._emit)


def _levels(every):
    """``every`` as a tuple of strictly decreasing positive ints (one per level), or None."""
    if every is None:
        return None
    levels = (every,) if isinstance(every, (int, np.integer)) and not isinstance(every, bool) else every
    ok = isinstance(levels, (tuple, list)) and len(levels) > 0 and all(
        isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1 for k in levels)
    if not ok or any(a <= b for a, b in zip(levels, levels[1:])):
        raise ArgumentError(f"tl.checkpoint: every must be a positive int (iterations per segment) or a tuple of "
                            f"strictly decreasing ones (segments of segments), got {every!r}")
    return tuple(int(k) for k in levels)


def checkpoint(fun=None, *, policy=None, every=None):
    """Make the backward pass recompute ``fun``'s internals instead of storing them (``jax.checkpoint``).

    Args:
      fun: the function (usable as a decorator, with or without arguments).
      policy: ``policy(prim_name, params) -> bool``, which results may be saved; e.g.
        ``tl.checkpoint_policies.dots_saveable``. Default: nothing is saved.
      every: an int k: also split each top-level carry-only ``for`` loop of ``fun`` into
        checkpointed segments of k iterations (O(n/k + k) stored residuals for n iterations);
        or decreasing ints (k₁, k₂, ...): segments of k₁ whose loops are split into k₂, ...
        (O(n/k₁ + k₁/k₂ + ... + k_last), one more recomputation per level).
    Returns:
      a callable that runs ``fun`` eagerly and is one checkpointed node under
      ``grad``/``vjp``/``jvp``/``vmap``/``jit``. Values and gradients are unchanged.
    Raises:
      ArgumentError: ``every`` not a positive int (or decreasing tuple of them), or a ``policy``
        that is not callable;
        ``every`` on a loop whose step is not a constant positive int.
    """
    levels = _levels(every)
    if policy is not None and not callable(policy):
        raise ArgumentError(f"tl.checkpoint: policy must be callable (e.g. tl.checkpoint_policies.dots_saveable), "
                            f"got {policy!r}")
    if fun is None:
        return functools.partial(checkpoint, policy=policy, every=levels)
    if not callable(fun):
        raise ArgumentError(f"tl.checkpoint decorates a function, got {fun!r}")
    return Checkpointed(fun, policy, levels)
