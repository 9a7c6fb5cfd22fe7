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
of O(n), smallest near ``k = √n``. This is two-level checkpointing; Griewank &
Walther, "Algorithm 799: revolve" (ACM TOMS 26(1), 2000) give the optimal
multi-level (binomial) schedule, which is not implemented here. With static
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
from .._core.aval import AbstractValue
from .._core.builder import Builder, Value
from .._core.control import for_range_p
from .._core.graph import Graph, Literal, SourceLoc
from .._core.interpreter import eval_graph
from .._frontend.lower import LoweredFunction, lower_function
from ..errors import ArgumentError
from .custom import _RegionCall, lower_wrapped
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

    dots_with_no_batch_dims_saveable = dots_saveable


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


# -- every=k: loops in segments --------------------------------------------------------------------

def _segmentable(node) -> bool:
    p = node.params
    return (node.prim is for_range_p and p["n_xs"] == 0 and not p["reverse"]
            and len(p["body"].outputs) == p["n_carry"])


def segment_loops(graph: Graph, every: int, policy, name: str) -> Graph:
    """``graph`` with each top-level carry-only ``for_range`` split into checkpointed segments of
    ``every`` iterations (see the module docstring)."""
    if not any(_segmentable(n) for n in graph.nodes):
        return graph
    b = Builder(name=graph.name)
    with b.active():
        ins = [b.new_input(v.aval, v.hint) for v in graph.inputs]
        env = {v.id: x for v, x in zip(graph.inputs, ins)}

        def read(a):
            return a.value if isinstance(a, Literal) else env[a.id]

        for node in graph.nodes:
            vals = [read(a) for a in node.inputs]
            with b.at(node.loc):
                if _segmentable(node):
                    outs = _segmented(node, vals, every, policy, name)
                else:
                    outs = _rebind(node, vals)
            for o, v in zip(node.outputs, outs):
                env[o.id] = v
        out = b.finish([read(o) for o in graph.outputs])
    return out


def _rebind(node, vals):
    out = node.prim.bind(*vals, **dict(node.params))
    return tuple(out) if node.prim.multiple_results else (out,)


def _int_aval():
    return AbstractValue(np.dtype(np.int64), ())


def _segmented(node, vals, every, policy, name):
    """Emit ``for s in range(n_segments): carry = checkpoint(inner loop over segment s)(carry)``."""
    from .. import numpy as tnp
    p = dict(node.params)
    n_carry, n_consts, body = p["n_carry"], p["n_consts"], p["body"]
    start, stop, step = vals[:3]
    carry, consts = list(vals[3:3 + n_carry]), list(vals[3 + n_carry:])
    if not (isinstance(step, (int, np.integer)) and step > 0):
        raise ArgumentError(f"tl.checkpoint(every={every}) segments loops with a constant positive step; "
                            f"this loop's step is {step!r}")
    if all(isinstance(v, (int, np.integer)) for v in (start, stop)):
        return _segmented_static(node, int(start), int(stop), int(step), carry, consts, every, policy, name)
    trips = tnp.maximum(tnp.floor_divide(tnp.subtract(tnp.add(stop, step - 1), start), step), 0)
    n_seg = tnp.floor_divide(tnp.add(trips, every - 1), every)
    span = every * int(step)

    # inner(lo, hi, *carry, *consts) = the original loop over range(lo, hi, step)
    carry_avals = [_aval(c) for c in carry]
    const_avals = [_aval(c) for c in consts]
    ib = Builder(name=f"{body.name}_segment")
    with ib.active(), ib.at(node.loc):
        lo, hi = ib.new_input(_int_aval(), "lo"), ib.new_input(_int_aval(), "hi")
        c_in = [ib.new_input(a, v.hint) for a, v in zip(carry_avals, body.inputs[1:1 + n_carry])]
        k_in = [ib.new_input(a, "const") for a in const_avals]
        res = for_range_p.bind(lo, hi, step, *c_in, *k_in, **p)
        inner = ib.finish(list(res))

    # outer body(s, *carry, start, stop, *consts): one checkpointed segment
    ob = Builder(name=f"{body.name}_segments")
    with ob.active(), ob.at(node.loc):
        s = ob.new_input(_int_aval(), "segment")
        c_in = [ob.new_input(a, v.hint) for a, v in zip(carry_avals, body.inputs[1:1 + n_carry])]
        st, sp = ob.new_input(_aval(start), "start"), ob.new_input(_aval(stop), "stop")
        k_in = [ob.new_input(a, "const") for a in const_avals]
        lo = tnp.add(st, tnp.multiply(s, span))
        hi = tnp.minimum(tnp.add(lo, span), sp)
        res = checkpoint_call_p.bind(lo, hi, *c_in, *k_in, fun=inner, policy=policy, name=name)
        outer = ob.finish(list(res))
    outs = for_range_p.bind(0, n_seg, 1, *carry, start, stop, *consts, body=outer, n_carry=n_carry,
                            n_consts=2 + n_consts, n_xs=0, reverse=False)
    return tuple(outs)


def _segmented_static(node, start, stop, step, carry, consts, every, policy, name):
    """Static bounds: ``n // every`` segments of exactly ``every`` iterations and a tail of the
    rest, each loop with a constant trip count (so compiled reverse mode takes it)."""
    n_full, rem = divmod(len(range(start, stop, step)), every)
    span = every * step
    p = dict(node.params)
    n_carry, body = p["n_carry"], p["body"]
    carry_avals = [_aval(c) for c in carry]
    const_avals = [_aval(c) for c in consts]
    hints = [v.hint for v in body.inputs[1:1 + n_carry]]

    def segment(count):
        """(lo, *carry, *consts) -> carry after ``count`` iterations i = lo, lo + step, ..."""
        from .. import numpy as tnp
        from .._core.passes import inline
        wb = Builder(name=body.name)
        with wb.active(), wb.at(node.loc):
            j = wb.new_input(_int_aval(), "j")
            c_in = [wb.new_input(a, h) for a, h in zip(carry_avals, hints)]
            lo = wb.new_input(_int_aval(), "lo")
            k_in = [wb.new_input(a, "const") for a in const_avals]
            wrapped = wb.finish(inline(body, [tnp.add(lo, tnp.multiply(j, step)), *c_in, *k_in]))
        ib = Builder(name=f"{body.name}_segment")
        with ib.active(), ib.at(node.loc):
            lo = ib.new_input(_int_aval(), "lo")
            c_in = [ib.new_input(a, h) for a, h in zip(carry_avals, hints)]
            k_in = [ib.new_input(a, "const") for a in const_avals]
            res = for_range_p.bind(0, count, 1, *c_in, lo, *k_in, body=wrapped, n_carry=n_carry,
                                   n_consts=1 + len(consts), n_xs=0, reverse=False)
            return ib.finish(list(res))

    if n_full:
        inner = segment(every)
        ob = Builder(name=f"{body.name}_segments")
        with ob.active(), ob.at(node.loc):
            from .. import numpy as tnp
            s = ob.new_input(_int_aval(), "segment")
            c_in = [ob.new_input(a, h) for a, h in zip(carry_avals, hints)]
            k_in = [ob.new_input(a, "const") for a in const_avals]
            lo = tnp.add(start, tnp.multiply(s, span))
            outer = ob.finish(list(checkpoint_call_p.bind(lo, *c_in, *k_in, fun=inner, policy=policy, name=name)))
        carry = list(for_range_p.bind(0, n_full, 1, *carry, *consts, body=outer, n_carry=n_carry,
                                      n_consts=len(consts), n_xs=0, reverse=False))
    if rem:
        carry = list(checkpoint_call_p.bind(start + n_full * span, *carry, *consts, fun=segment(rem),
                                            policy=policy, name=name))
    return tuple(carry)


def _aval(x):
    if type(x) is Value:
        return x.aval
    from .._core import aval as _a
    return _a.of(x)


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
            g = segment_loops(g, self.every, self.policy, self.__name__)
        return lowered, g

    def _emit(self, args, closure, error=None):
        flat, trees = [], []
        for a in args:
            leaves, tree = _pytree.flatten(a)
            flat.extend(leaves)
            trees.append(tree)
        avals = [x.aval if type(x) is Value else _aval(x) for x in flat]
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


def checkpoint(fun=None, *, policy=None, every=None):
    """Make the backward pass recompute ``fun``'s internals instead of storing them (``jax.checkpoint``).

    Args:
      fun: the function (usable as a decorator, with or without arguments).
      policy: ``policy(prim_name, params) -> bool``, which results may be saved; e.g.
        ``tl.checkpoint_policies.dots_saveable``. Default: nothing is saved.
      every: an int k: also split each top-level carry-only ``for`` loop of ``fun`` into
        checkpointed segments of k iterations (O(n/k + k) stored residuals for n iterations).
    Returns:
      a callable that runs ``fun`` eagerly and is one checkpointed node under
      ``grad``/``vjp``/``jvp``/``vmap``/``jit``. Values and gradients are unchanged.
    Raises:
      ArgumentError: ``every`` not a positive int, or a ``policy`` that is not callable;
        ``every`` on a loop whose step is not a constant positive int.
    """
    if every is not None and (not isinstance(every, (int, np.integer)) or isinstance(every, bool) or every < 1):
        raise ArgumentError(f"tl.checkpoint: every must be a positive int (iterations per segment), got {every!r}")
    if policy is not None and not callable(policy):
        raise ArgumentError(f"tl.checkpoint: policy must be callable (e.g. tl.checkpoint_policies.dots_saveable), "
                            f"got {policy!r}")
    if fun is None:
        return functools.partial(checkpoint, policy=policy, every=None if every is None else int(every))
    if not callable(fun):
        raise ArgumentError(f"tl.checkpoint decorates a function, got {fun!r}")
    return Checkpointed(fun, policy, None if every is None else int(every))
