"""The StableHLO lowering table: one entry per primitive, or a refusal by name.

Importing this module sets ``prim.lower`` on every primitive in
``tlaloc._core.primitive.REGISTRY``: the rule from ``LOWERINGS``, or, for a
primitive in ``REFUSED``, a rule that raises ``NoRuleError`` with the reason.
A primitive in neither keeps ``lower = None`` and the emitter refuses it by
name; ``tests/jit/test_lowering_table.py`` keeps the three lists in step.
"""
from __future__ import annotations

from .._core.builder import expansion_graph
from .._core.specialize import specialize
from .._core.primitive import REGISTRY
from ..errors import NoRuleError
from . import (stablehlo_coarse, stablehlo_control, stablehlo_elementwise, stablehlo_index, stablehlo_linalg,
               stablehlo_rng, stablehlo_scan, stablehlo_sort, stablehlo_special, stablehlo_structural)

LOWERINGS: dict = {}
for _table in (stablehlo_elementwise.LOWERINGS, stablehlo_structural.LOWERINGS,
               stablehlo_index.LOWERINGS, stablehlo_scan.LOWERINGS, stablehlo_linalg.LOWERINGS,
               stablehlo_control.LOWERINGS, stablehlo_coarse.LOWERINGS, stablehlo_rng.LOWERINGS,
               stablehlo_special.LOWERINGS, stablehlo_sort.LOWERINGS):
    LOWERINGS.update(_table)

_SPECIALIZED = ("specialisation rewrites it to dot_general (tlaloc._core.specialize); "
                "lower the specialised graph")

_INLINED = "specialisation inlines the call's body (custom rules only matter to transforms)"

_SPECTRAL = ("StableHLO has no eigen/singular-value/QR op (XLA reaches LAPACK only through custom calls that "
             "IREE and the artifacts lack); call it outside tl.jit, or pass its result in")

#: ``name -> why compiled code does not take it``.
REFUSED = {
    "matmul": _SPECIALIZED,
    "einsum": ("einsum with '...' or a repeated index in one operand (a diagonal) is not compiled; "
               "write the indices out, or take tnp.diagonal first"),
    "arange": "specialisation folds arange with static bounds into a constant; run-time bounds are refused there",
    "eigh": _SPECTRAL,
    "svd": _SPECTRAL,
    "qr": _SPECTRAL,
    "custom_jvp_call": _INLINED,
    "custom_vjp_call": _INLINED,
    "custom_vjp_jvp_call": _INLINED,
    "custom_vjp_rule": _INLINED,
    "checkpoint_call": "specialisation inlines the call's body (tl.checkpoint only matters to transforms)",
    "odeint": "SciPy's LSODA runs on the host; StableHLO has no ODE solver (call the gradient eagerly)",
    "odeint_adjoint": "SciPy's LSODA runs on the host; StableHLO has no ODE solver (call the gradient eagerly)",
    "fixed_point": "iterates a data-dependent number of times on the host (call the gradient eagerly)",
    "debug_print": "print of a computed value runs in Python at call time; print outside the jitted function",
    "debug_assert": "assert on a computed value runs in Python at call time; check outside the jitted function",
}


def _refusal(name, why):
    def rule(em, node, *ins):
        raise NoRuleError(f"no StableHLO lowering rule for `{name}`: {why}"
                          + (f" (used at {node.loc})" if node.loc else ""))
    rule.refused = why
    return rule


def _composite(prim):
    """The lowering of a composite (``prim.expansion``: ``sum_to``, ``dim_size`` ...): its body
    at the node's avals, lowered in its place. Specialisation already inlines it; this
    covers a node kept by a graph that was not re-bound."""
    def rule(em, node, *ins):
        avals = [a.aval for a in node.inputs]
        body = expansion_graph(prim, avals, node.params)
        if body is None:
            raise NoRuleError(f"no StableHLO lowering rule for `{prim.name}` at operand avals "
                              f"{[str(a) for a in avals]}: its body needs concrete shapes")
        outs = em.lower_graph(specialize(body, avals), list(ins))
        return outs if prim.multiple_results else outs[0]
    rule.expands = True
    return rule


def install() -> None:
    """Set ``lower`` on every registered primitive that has a rule or a refusal (a composite:
    its body)."""
    for name, prim in REGISTRY.items():
        if name in LOWERINGS:
            prim.lower = LOWERINGS[name]
        elif name in REFUSED:
            prim.lower = _refusal(name, REFUSED[name])
        elif prim.expansion is not None:
            prim.lower = _composite(prim)


def unlowered() -> list:
    """Registered primitives with neither a lowering nor a refusal (should be empty)."""
    install()
    return sorted(n for n in REGISTRY if n not in LOWERINGS and n not in REFUSED
                  and REGISTRY[n].expansion is None)


install()
__all__ = ["LOWERINGS", "REFUSED", "install", "unlowered", "NoRuleError"]
