"""StableHLO lowerings of the coarsened ops (``tlaloc._recognize``).

``decompose`` normally inlines a coarsened op's forward body before emission;
what reaches the emitter is either a claimed op (``params["claim"]`` names the
kernel) or one a caller kept on purpose. A claimed op becomes
``stablehlo.custom_call @<claim>`` (typed FFI, ``api_version = 4``) on the op's
operands, with the op's result type; any other is emitted as its forward body.
"""
from __future__ import annotations

from .._recognize.ops import OP_NAMES
from .stablehlo import out_aval


def lower_coarsened(em, node, *ins):
    claim = node.params.get("claim")
    if claim is None:
        return em.lower_graph(node.params["fwd"], list(ins))[0]
    vals = [em.value(x) for x in ins]
    name = str(claim).replace("\\", "\\\\").replace('"', '\\"')
    return em.op("stablehlo.custom_call", vals, out_aval(node),
                 attrs={"call_target_name": f'"{name}"', "api_version": "4 : i32"})


LOWERINGS = {name: lower_coarsened for name in OP_NAMES}
