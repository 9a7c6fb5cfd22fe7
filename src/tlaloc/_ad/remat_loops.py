"""``tl.checkpoint(..., every=k)``: a function's loops split into checkpointed segments.

See ``remat.py``'s docstring for the scheme and its memory; this module rewrites the graph.
"""
from __future__ import annotations

import numpy as np

from .._core.aval import AbstractValue
from .._core.builder import Builder, Value
from .._core.control import for_range_p
from .._core.graph import Graph, Literal
from ..errors import ArgumentError
from .remat import checkpoint_call_p


# -- every=k: loops in segments --------------------------------------------------------------------

def _segmentable(node) -> bool:
    p = node.params
    return (node.prim is for_range_p and p["n_xs"] == 0 and not p["reverse"]
            and len(p["body"].outputs) == p["n_carry"])


def segment_loops(graph: Graph, every: tuple, policy, name: str) -> Graph:
    """``graph`` with each top-level carry-only ``for_range`` split into checkpointed segments of
    ``every[0]`` iterations, each segment's loop split by ``every[1:]`` in turn (see the module
    docstring)."""
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
    return AbstractValue(np.dtype(np.int64), (), weak=True)      # a Python int, as in the interpreter


def _nested(inner: Graph, levels: tuple, policy, name) -> Graph:
    """A segment's graph, its own loop split by the next levels of ``every``."""
    return segment_loops(inner, levels[1:], policy, name) if len(levels) > 1 else inner


def _segmented(node, vals, levels, policy, name):
    """Emit ``for s in range(n_segments): carry = checkpoint(inner loop over segment s)(carry)``."""
    every = levels[0]
    from .. import numpy as tnp
    p = dict(node.params)
    n_carry, n_consts, body = p["n_carry"], p["n_consts"], p["body"]
    start, stop, step = vals[:3]
    carry, consts = list(vals[3:3 + n_carry]), list(vals[3 + n_carry:])
    if not (isinstance(step, (int, np.integer)) and step > 0):
        raise ArgumentError(f"tl.checkpoint(every={every}) segments loops with a constant positive step; "
                            f"this loop's step is {step!r}")
    if all(isinstance(v, (int, np.integer)) for v in (start, stop)):
        return _segmented_static(node, int(start), int(stop), int(step), carry, consts, levels, policy, name)
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
        inner = _nested(ib.finish(list(res)), levels, policy, name)

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


def _segmented_static(node, start, stop, step, carry, consts, levels, policy, name):
    """Static bounds: ``n // every`` segments of exactly ``every`` iterations and a tail of the
    rest, each loop with a constant trip count (so compiled reverse mode takes it)."""
    every = levels[0]
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
            return _nested(ib.finish(list(res)), levels, policy, name)

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
