"""Coarsened ops: one DXIR primitive per recognized pattern.

A coarsened node keeps two regions in its params:

* ``fwd``: the forward body, the matched nodes themselves (inputs: the op's
  operands; one output). The interpreter runs it, specialisation and the
  renderer inline it, and ``decompose`` inlines it before emission unless a
  kernel claims the op (then the emitter writes ``stablehlo.custom_call``).
* ``grad``: the analytic gradient body (inputs: the operands, then the output
  cotangent; outputs: one cotangent per operand whose ``diff`` flag is set), or
  ``None`` until the reverse rule first needs it (``coarsen(..., gradients=False)``).

Transforms: the reverse rule keeps the coarsened node in the forward sweep and
inlines ``grad`` in the backward sweep; the forward rule differentiates ``fwd``
(forward mode of the matched nodes); batching batches ``fwd`` inline.

``attrs`` holds the op's static parameters (``(("eps", 1e-6), ...)``): what
``summary`` reports and what a kernel's ``claims(op, target, **attrs)`` reads.
"""
from __future__ import annotations

from .._core.interpreter import eval_graph
from .._core.passes import inline
from .._core.primitive import REGISTRY, Primitive

#: The ops the recognizers produce, in matching order (larger patterns first).
OP_NAMES = ("attention", "swiglu", "rms_norm", "rope", "cross_entropy")


class CoarsenedOp(Primitive):
    """A recognized pattern as one node; its meaning is its ``fwd`` region."""
    inline_region = "fwd"

    def abstract_eval(self, *avals, **params):
        return params["fwd"].outputs[0].aval


def _impl(*ins, fwd, grad, diff, attrs, claim=None):
    return eval_graph(fwd, *ins)[0]


def _reverse(node, ins):
    params = dict(node.params)
    out = node.prim.bind(*ins, **params)

    def backward(gs):
        g = gs[0]
        if g is None:
            return [None] * len(ins)
        grad = params["grad"]
        if grad is None:                        # coarsened without gradients (see ``coarsen``)
            from .gradients import grad_body
            grad = grad_body(node.prim.name, [a.aval for a in node.inputs], node.outputs[0].aval,
                             dict(params["attrs"]), params["diff"])
        bars = iter(inline(grad, list(ins) + [g]))
        return [next(bars) if d else None for d in params["diff"]]

    return (out,), backward


def _forward(node, ins, tins):
    from .._ad.forward import forward_tangents
    params = dict(node.params)
    if all(t is None for t in tins):
        return (node.prim.bind(*ins, **params),), (None,)
    outs, touts = forward_tangents(params["fwd"], list(ins), list(tins))
    return tuple(outs), tuple(touts)


def _declare(name: str) -> CoarsenedOp:
    if name in REGISTRY:
        return REGISTRY[name]
    p = CoarsenedOp(name, impl=_impl, shape_rule=lambda *a, **k: None, dtype_rule=lambda *a, **k: None)
    p.reverse_rule = _reverse
    p.forward_rule = _forward
    return p


OPS = {name: _declare(name) for name in OP_NAMES}


def is_coarsened(node) -> bool:
    return isinstance(node.prim, CoarsenedOp)


__all__ = ["OPS", "OP_NAMES", "CoarsenedOp", "is_coarsened"]
