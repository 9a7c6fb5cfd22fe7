"""DXIR printed as Python-like text.

    def f(x: f32[n], w: f32[n]):
        v0 = multiply(x, w)            # f32[n]
        v1 = reduce_sum(v0, axes=None, keepdims=False)   # f32[]
        return v1

Regions print as nested ``def`` blocks under their node. Names are
deterministic: user hints where available, else ``v<k>`` by order.
"""
from __future__ import annotations

from .graph import Graph, Literal


class _Names:
    def __init__(self):
        self.by_id: dict[int, str] = {}
        self.used: set[str] = set()

    def name(self, var) -> str:
        if var.id in self.by_id:
            return self.by_id[var.id]
        base = var.hint or "v"
        cand, k = base, 1
        while cand in self.used or base == "v" and cand == "v":
            cand = f"{base}{k}" if base == "v" else f"{base}_{k}"
            k += 1
        self.used.add(cand)
        self.by_id[var.id] = cand
        return cand


def _atom(a, names: _Names) -> str:
    if isinstance(a, Literal):
        v = a.value
        return repr(v) if not hasattr(v, "shape") or v.shape == () else f"const{tuple(v.shape)}"
    return names.name(a)


def _param(v) -> str:
    if isinstance(v, Graph):
        return f"<region {v.name}>"
    if hasattr(v, "name") and hasattr(v, "kind"):
        return f"{v.name}"
    return repr(v)


def format_graph(graph: Graph, indent: int = 0, names: _Names | None = None) -> str:
    names = names or _Names()
    pad = "    " * indent
    args = ", ".join(f"{names.name(v)}: {v.aval}" for v in graph.inputs)
    lines = [f"{pad}def {graph.name}({args}):"]
    for node in graph.nodes:
        outs = ", ".join(names.name(o) for o in node.outputs) or "_"
        ins = [_atom(a, names) for a in node.inputs]
        ps = [f"{k}={_param(v)}" for k, v in node.params.items() if not isinstance(v, Graph)]
        types = ", ".join(str(o.aval) for o in node.outputs)
        lines.append(f"{pad}    {outs} = {node.prim.name}({', '.join(ins + ps)})  # {types}")
        for k, v in node.params.items():
            if isinstance(v, Graph):
                lines.append(f"{pad}    # {k}:")
                lines.append(format_graph(v, indent + 1, names))
    outs = ", ".join(_atom(o, names) for o in graph.outputs)
    lines.append(f"{pad}    return {outs}")
    return "\n".join(lines)
