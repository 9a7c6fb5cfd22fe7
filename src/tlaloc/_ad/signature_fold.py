"""Folding what one argument signature decides in a derivative graph (eager code).

A derivative graph built at definition time knows neither ranks nor dtypes, so
its rules undo broadcasting with shape-generic helpers that read a ``like``
operand at run time (``sum_to``, ``broadcast_like``, ``expand_reduced`` ...,
``_prims/broadcasting.py``). Given the shapes and dtypes of the arguments
(``fold(graph, in_avals)``), this pass infers every value's aval with the
primitives' own shape and dtype rules and rewrites what those avals decide:

* ``sum_to``/``broadcast_like``/``reshape_like`` of a value that already has the
  ``like`` shape (and, for the first two, no float width to cast to),
  ``cast_like`` to the value's own dtype, and ``expand_reduced``
  with ``keepdims`` become the value itself (what their impls return);
* ``reduced_count`` and ``grad_seed`` (results that depend only on shapes and
  dtypes) become constants, computed by their impls;
* nodes whose operands are all constants are evaluated (small results only).

``safe_mul``/``safe_div`` by a finite non-zero constant are *not* made plain
``multiply``/``divide``: where the result holds a NaN, their repair also turns
every ``-0.0`` of a zero factor (dividend) into ``+0.0``, so the plain op would
change sign bits (``signature_nan.plain_products`` handles them instead).

Each rewrite computes the same NumPy values as the node it replaces, so the
results keep their bits. Only what the avals decide is folded: a dim the
shape rules do not know (a value-dependent shape, a loop carry whose shape
changes from trip to trip) leaves its nodes as they were. Loop carries are
iterated to a fixed point of their avals; stacked loop outputs keep their
element aval for the loop that reads them back. Region-holding nodes other
than ``cond``/``for_range``/``while_loop``/inline calls are kept unchanged.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from .._core.aval import AbstractValue
from .._core.graph import Graph, Literal, Node, Var
from .._core.simplify import literal_aval
from .._prims.broadcasting import float_cast

UNKNOWN = AbstractValue()
_SAME_SHAPE_IDENTITY = {"sum_to", "broadcast_like", "reshape_like"}
_SHAPE_ONLY = {"reduced_count", "grad_seed"}
_FOLD_LIMIT = 64            # elements: larger constants stay nodes
_FIXED_POINT_TRIES = 4


def fold(graph: Graph, in_avals) -> Graph:
    """``graph`` with what ``in_avals`` (one ``AbstractValue`` per input, ``UNKNOWN``
    where nothing is known) decides folded away; new vars carry the inferred avals.

    Raises ``KeyError`` on a region that reads an outer value it does not take
    as an input (the caller keeps the unfolded code)."""
    return _Folder().graph(graph, list(in_avals))[0]


def concrete(a: AbstractValue) -> bool:
    """A non-weak value of known dtype and shape (an ndarray or a NumPy scalar at run time)."""
    return a.is_concrete and not a.weak


def aval(atom) -> AbstractValue:
    return atom.aval if isinstance(atom, Var) else literal_aval(atom.value)


class _Folder:
    def __init__(self):
        self.stacks: dict = {}        # id of a stacked loop output -> its element aval

    def graph(self, g: Graph, in_avals):
        if len(in_avals) != len(g.inputs):
            raise ValueError(f"{g.name}: {len(g.inputs)} inputs, {len(in_avals)} avals")
        env = {}
        inputs = []
        for v, a in zip(g.inputs, in_avals):
            nv = Var(a, v.hint)
            env[v.id] = nv
            inputs.append(nv)
        nodes: list = []
        for node in g.nodes:
            ins = tuple(env[a.id] if isinstance(a, Var) else a for a in node.inputs)
            outs = self.node(node, ins, nodes)
            for old, new in zip(node.outputs, outs):
                env[old.id] = new
        outputs = tuple(env[o.id] if isinstance(o, Var) else o for o in g.outputs)
        return Graph(tuple(inputs), tuple(nodes), outputs, g.name), [aval(o) for o in outputs]

    # -- one node --------------------------------------------------------------------------
    def node(self, node, ins, nodes):
        prim, params = node.prim, dict(node.params)
        name = prim.name
        if name == "for_range":
            return self.for_range(node, ins, params, nodes)
        if name == "while_loop":
            return self.while_loop(node, ins, params, nodes)
        if name == "cond":
            return self.cond(node, ins, params, nodes)
        key = getattr(prim, "inline_region", None)
        if key is not None and isinstance(params.get(key), Graph):
            region = params[key]
            params[key], out_avals = self.graph(region, [aval(a) for a in ins[:len(region.inputs)]])
            return self.emit(nodes, node, ins, params, out_avals)
        if node.regions():
            return self.emit(nodes, node, ins, params, [UNKNOWN] * len(node.outputs))
        if not prim.effectful:
            folded = self.rewrite(prim, ins, params)
            if folded is not None:
                if isinstance(folded, Node):
                    prim, ins = folded.prim, folded.inputs
                else:
                    return [folded]
        return self.emit(nodes, node, ins, params, _abstract(prim, ins, params, len(node.outputs)), prim)

    def emit(self, nodes, node, ins, params, out_avals, prim=None):
        outs = tuple(Var(a, o.hint) for a, o in zip(out_avals, node.outputs))
        nodes.append(Node(prim or node.prim, tuple(ins), outs, params, node.loc))
        return outs

    def rewrite(self, prim, ins, params):
        """An atom that replaces the node, a ``Node`` (prim and inputs to use instead), or None."""
        name = prim.name
        avals = [aval(a) for a in ins]
        if name in _SAME_SHAPE_IDENTITY:
            x, like = avals
            if concrete(x) and like.is_concrete and x.shape == like.shape and (
                    name == "reshape_like" or float_cast(x.dtype, like.dtype) is None):
                return ins[0]
        elif name == "cast_like":
            x, like = avals
            if params.get("arrays_only") and like.shape == ():
                return ins[0]
            if concrete(x) and like.dtype is not None and (not _dt.is_float(like.dtype) or x.dtype == like.dtype):
                return ins[0]
        elif name == "expand_reduced":
            if params.get("keepdims") and concrete(avals[0]):
                return ins[0]
        elif name in _SHAPE_ONLY:
            if all(concrete(a) for a in avals):
                return _constant(prim, [np.zeros(a.shape, a.dtype) for a in avals], params)
        if ins and all(isinstance(a, Literal) for a in ins) and not any(
                isinstance(v, Graph) for v in params.values()):
            return _constant(prim, [a.value for a in ins], params)
        return None

    # -- control flow -------------------------------------------------------------------------
    def for_range(self, node, ins, params, nodes):
        n_carry, n_consts = params["n_carry"], params["n_consts"]
        ops = ins[3:]
        carry = [aval(a) for a in ops[:n_carry]]
        rest = [aval(a) for a in ops[n_carry:n_carry + n_consts]]
        rest += [self.stacks.get(a.id, UNKNOWN) if isinstance(a, Var) else UNKNOWN
                 for a in ops[n_carry + n_consts:]]
        body, outs = self.fixed_point(params["body"], [UNKNOWN], carry, rest, n_carry)
        params["body"] = body
        out_avals = outs[:n_carry] + [_stacked(a) for a in outs[n_carry:]]
        new = self.emit(nodes, node, ins, params, out_avals)
        for v, elem in zip(new[n_carry:], outs[n_carry:]):
            self.stacks[v.id] = elem
        return new

    def while_loop(self, node, ins, params, nodes):
        n_carry = params["n_carry"]
        carry = [aval(a) for a in ins[:n_carry]]
        consts = [aval(a) for a in ins[n_carry:]]
        for _ in range(_FIXED_POINT_TRIES):
            cond, _c = self.graph(params["cond"], carry + consts)
            body, outs = self.graph(params["body"], carry + consts)
            joined = [_join(a, b) for a, b in zip(carry, outs[:n_carry])]
            if joined == carry:
                break
            carry = joined
        else:
            carry = [UNKNOWN] * n_carry
            cond, _c = self.graph(params["cond"], carry + consts)
            body, outs = self.graph(params["body"], carry + consts)
        params["cond"], params["body"] = cond, body
        return self.emit(nodes, node, ins, params, carry + [UNKNOWN] * (len(node.outputs) - n_carry))

    def fixed_point(self, body, lead, carry, rest, n_carry):
        for _ in range(_FIXED_POINT_TRIES):
            new_body, outs = self.graph(body, lead + carry + rest)
            joined = [_join(a, b) for a, b in zip(carry, outs[:n_carry])]
            if joined == carry:
                return new_body, carry + outs[n_carry:]
            carry = joined
        carry = [UNKNOWN] * n_carry
        new_body, outs = self.graph(body, lead + carry + rest)
        return new_body, carry + outs[n_carry:]

    def cond(self, node, ins, params, nodes):
        ops = [aval(a) for a in ins[1:]]
        params["true_branch"], t = self.graph(params["true_branch"], ops)
        params["false_branch"], f = self.graph(params["false_branch"], ops)
        return self.emit(nodes, node, ins, params, [_join(a, b) for a, b in zip(t, f)])


def _join(a: AbstractValue, b: AbstractValue) -> AbstractValue:
    return a if a == b and (a.dtype is None) == (b.dtype is None) else UNKNOWN


def _stacked(elem: AbstractValue) -> AbstractValue:
    """A per-trip stack (a Python list at run time): nothing is known of it as a value."""
    return UNKNOWN


def _abstract(prim, ins, params, n):
    """The output avals from the primitive's shape and dtype rules (UNKNOWN where they fail)."""
    avals = [aval(a) for a in ins]
    if all(a.weak or a.dtype is None for a in avals):
        return [UNKNOWN] * n           # Python scalars in: a Python scalar may come out (apply_impl)
    try:
        out = prim.abstract_eval(*avals, **params)
    except Exception:
        return [UNKNOWN] * n
    out = list(out) if prim.multiple_results else [out]
    # a weak operand may make the dtype rule guess; keep only what is certain
    return [o if o.dtype is not None and o.shape is not None else UNKNOWN for o in out]


def _constant(prim, values, params):
    """``prim`` evaluated on constant operands, as a ``Literal``; None where it raises,
    warns or is large (the node then stays and raises or warns at run time)."""
    try:
        with np.errstate(all="raise"):
            out = prim.apply_impl(*values, **params)
    except Exception:
        return None
    if prim.multiple_results or isinstance(out, (list, tuple)) or np.size(out) > _FOLD_LIMIT:
        return None
    if not isinstance(out, (np.ndarray, np.generic, bool, int, float)):
        return None
    if isinstance(out, np.ndarray) and not out.flags.c_contiguous:
        out = np.ascontiguousarray(out)          # as the rendered constant is (builder.atom)
    return Literal(out, literal_aval(out))
