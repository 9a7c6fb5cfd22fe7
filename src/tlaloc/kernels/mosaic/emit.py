"""``stablehlo.custom_call @tpu_custom_call`` text for a Mosaic payload.

The call carries jax.export's attributes verbatim (target, ``backend_config``
payload, kernel name, operand and result layouts, frontend attributes), so
XLA:TPU sees the same custom call jax would have emitted.
"""
from __future__ import annotations

import numpy as np

from .payload import MosaicPayload


def tensor_type(shape, dtype) -> str:
    from ..._render.stablehlo import tensor_type as tt
    return tt(np.dtype(dtype), tuple(shape))


def custom_call(p: MosaicPayload, operands, result: str = "%0") -> str:
    """The op in generic form; ``operands`` are SSA names matching ``p.in_avals``."""
    attrs = ", ".join(f"{k} = {v}" for k, v in p.attrs)
    ins = ", ".join(tensor_type(s, d) for s, d in p.in_avals)
    outs = [tensor_type(s, d) for s, d in p.out_avals]
    out_t = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
    lhs = result if len(outs) == 1 else f"{result}:{len(outs)}"
    return f'{lhs} = "stablehlo.custom_call"({", ".join(operands)}) {{{attrs}}} : ({ins}) -> {out_t}'


def module_text(p: MosaicPayload, name: str = "mosaic") -> str:
    """A whole verified module whose ``main`` is the one custom call."""
    from ..._render.stablehlo import parse
    args = [f"%arg{i}" for i in range(len(p.in_avals))]
    params = ", ".join(f"{a}: {tensor_type(s, d)}" for a, (s, d) in zip(args, p.in_avals))
    outs = [tensor_type(s, d) for s, d in p.out_avals]
    rets = "%0" if len(outs) == 1 else ", ".join(f"%0#{i}" for i in range(len(outs)))
    text = (f"module @jit_{name} attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32}} {{\n"
            f"  func.func public @main({params}) -> ({', '.join(outs)}) {{\n"
            f"    {custom_call(p, args)}\n"
            f'    "func.return"({rets}) : ({", ".join(outs)}) -> ()\n  }}\n}}\n')
    return str(parse(text))
