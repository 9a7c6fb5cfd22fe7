"""DXIR → readable Python source.

The generated module imports only ``numpy`` and ``tlaloc.numpy``; every node
is one call ``lax.<primitive>(operands, params)``, and structured control flow
becomes Python ``if``/``for``/``while``. Naming is fixed and deterministic:
user names where the front end knew them, ``x_bar`` for cotangents, ``x_dot``
for tangents, a numeric suffix on clashes (``y_1``), ``v<k>`` otherwise. A
``# file:line: source`` comment precedes the nodes of each primal line and a
``# grad of: source`` comment each adjoint block.

Running the module calls exactly the NumPy implementations the interpreter
calls, in the same order, so results are bit-identical.
"""
from __future__ import annotations

import keyword
import math
import re

import numpy as np

from .._core.control import cond_p, for_range_p, while_loop_p
from .._core.graph import Graph, Literal, Var

_RESERVED = {"np", "tnp", "lax", "range", "len", "reversed", "int", "float", "None", "True", "False",
             "k", "print", "list", "tuple", "dict"}
_SMALL_ARRAY = 64


class _Namer:
    def __init__(self, reserved=()):
        self.names: dict[int, str] = {}
        self.used: set[str] = set(_RESERVED) | set(reserved)
        self.counter = 0

    def fresh(self, base: str | None) -> str:
        base = _clean(base)
        if base is None:
            while True:
                cand = f"v{self.counter}"
                self.counter += 1
                if cand not in self.used:
                    break
        else:
            cand, k = base, 1
            while cand in self.used:
                cand = f"{base}_{k}"
                k += 1
        self.used.add(cand)
        return cand

    def name(self, var: Var) -> str:
        if var.id not in self.names:
            self.names[var.id] = self.fresh(var.hint)
        return self.names[var.id]

    def alias(self, var: Var, expr: str) -> None:
        self.names[var.id] = expr


def _clean(hint):
    if not hint:
        return None
    s = re.sub(r"\W", "_", hint.lstrip("."))
    if not s or s[0].isdigit():
        s = "v_" + s
    if keyword.iskeyword(s):
        s += "_"
    if re.fullmatch(r"v\d+", s):
        return None
    return s


def render_literal(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, (bool, np.bool_)) and not isinstance(value, np.ndarray):
        return repr(bool(value)) if isinstance(value, bool) else f"np.bool_({bool(value)})"
    if isinstance(value, int) and not isinstance(value, bool):
        return repr(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, np.generic):
        inner = _float(float(value)) if value.dtype.kind == "f" else repr(value.item())
        return f"{_dtype(value.dtype)}.type({inner})"
    if isinstance(value, np.ndarray):
        dt = _dtype(value.dtype)
        if value.size == 0:          # regression: (0, 0) rendered as np.asarray([]), of shape (0,)
            return f"np.zeros({tuple(value.shape)!r}, dtype={dt})"
        if value.size <= _SMALL_ARRAY and value.dtype.kind in "biuf" and value.dtype.itemsize >= 4 \
                or value.dtype.kind == "b" and value.size <= _SMALL_ARRAY:
            body = _nested(value.tolist())
            return f"np.asarray({body}, dtype={dt})"
        data = np.ascontiguousarray(value).tobytes().hex()
        return f"np.frombuffer(bytes.fromhex({data!r}), dtype={dt}).reshape({tuple(value.shape)!r})"
    if isinstance(value, (list, tuple)):
        return repr(value)
    return repr(value)


def _nested(v):
    if isinstance(v, list):
        return "[" + ", ".join(_nested(x) for x in v) + "]"
    if isinstance(v, float):
        return _float(v)
    return repr(v)


def _float(x: float) -> str:
    if math.isnan(x):           # the sign bit too (np.log(-1.0) is -nan on x86)
        return "-np.nan" if math.copysign(1.0, x) < 0 else "np.nan"
    if math.isinf(x):
        return "np.inf" if x > 0 else "-np.inf"
    return repr(x)


def _dtype(dt) -> str:
    dt = np.dtype(dt)
    name = {"bool": "bool_"}.get(dt.name, dt.name)
    return f"tnp.{name}"


def render_param(v) -> str:
    if isinstance(v, np.dtype):
        return _dtype(v)
    if isinstance(v, type) and issubclass(v, np.generic):
        return _dtype(v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, tuple):
        inner = ", ".join(render_param(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    return repr(v)


class Renderer:
    def __init__(self, namer: _Namer):
        self.n = namer
        self.lines: list[str] = []
        self.last_comment = None
        self.free_after: dict[int, list] = {}     # top-level node index i -> vars node i - 1 read last

    def atom(self, a) -> str:
        if isinstance(a, Literal):
            return render_literal(a.value)
        return self.n.name(a)

    def emit(self, indent: int, text: str):
        self.lines.append("    " * indent + text)

    def comment(self, node, indent):
        loc = node.loc
        if loc is None:
            return
        key = (loc.filename, loc.lineno, loc.role)
        if key == self.last_comment:
            return
        self.last_comment = key
        if loc.role == "grad":
            self.emit(indent, f"# grad of: {loc.line}")
        elif loc.role == "tangent":
            self.emit(indent, f"# tangent of: {loc.line}")
        else:
            self.emit(indent, f"# {_short(loc.filename)}:{loc.lineno}: {loc.line}")

    def body(self, graph: Graph, indent: int, top: bool = False):
        for i, node in enumerate(graph.nodes):
            if top and i in self.free_after:        # values node i - 1 read last
                self.emit(indent, f"del {', '.join(self.n.name(v) for v in self.free_after[i])}")
            self.comment(node, indent)
            if node.prim is cond_p:
                self.render_cond(node, indent)
            elif node.prim is for_range_p:
                self.render_for(node, indent)
            elif node.prim is while_loop_p:
                self.render_while(node, indent)
            elif getattr(node.prim, "inline_region", None):
                self.render_inline(node, indent)
            elif getattr(node.prim, "function_params", None):
                self.render_with_functions(node, indent)
            else:
                self.render_call(node, indent)

    def render_call(self, node, indent, functions=None):
        """``outs = lax.<prim>(operands, params)``; ``functions`` names the params passed by name."""
        functions = functions or {}
        args = [self.atom(a) for a in node.inputs]
        args += [f"{k}={functions[k] if k in functions else render_param(v)}" for k, v in node.params.items()]
        outs = [self.n.name(o) for o in node.outputs]
        lhs = ", ".join(outs) if outs else "_"
        if node.prim.multiple_results and len(outs) == 1:
            lhs += ","
        self.emit(indent, f"{lhs} = lax.{node.prim.name}({', '.join(args)})")

    def render_with_functions(self, node, indent):
        """A node whose params hold regions it calls as functions (``odeint``'s right-hand side):
        each region becomes a local ``def``, passed to the primitive by name."""
        names = {}
        for key in node.prim.function_params:
            region = node.params[key]
            names[key] = self.n.fresh(region.name or key)
            for line in render_function(region, names[key]).splitlines():
                self.emit(indent, line)
        self.render_call(node, indent, names)

    def render_inline(self, node, indent):
        """A node whose meaning is a region (e.g. a custom-rule call): its body, inline."""
        region = node.params[node.prim.inline_region]
        self._bind_region_inputs(region, node.inputs)
        self.emit(indent, f"# {node.prim.name}: {region.name}")
        self.body(region, indent)
        self._assign(indent, [self.n.name(o) for o in node.outputs], [self.atom(o) for o in region.outputs])

    def _bind_region_inputs(self, region: Graph, operands):
        for v, a in zip(region.inputs, operands):
            self.n.alias(v, self.atom(a))

    def _assign(self, indent, targets, values):
        pairs = [(t, v) for t, v in zip(targets, values) if t != v]
        if not pairs:
            return
        lhs = ", ".join(t for t, _ in pairs)
        rhs = ", ".join(v for _, v in pairs)
        self.emit(indent, f"{lhs} = {rhs}")

    def render_cond(self, node, indent):
        p = node.params
        outs = [self.n.name(o) for o in node.outputs]
        pred, ops = node.inputs[0], node.inputs[1:]
        self.emit(indent, f"if lax.truth({self.atom(pred)}, 'if'):")
        for key in ("true_branch", "false_branch"):
            if key == "false_branch":
                self.emit(indent, "else:")
            region = p[key]
            self._bind_region_inputs(region, ops)
            start = len(self.lines)
            self.last_comment = None
            self.body(region, indent + 1)
            self._assign(indent + 1, outs, [self.atom(o) for o in region.outputs])
            if len(self.lines) == start:
                self.emit(indent + 1, "pass")
        self.last_comment = None

    def render_for(self, node, indent):
        p = node.params
        n_carry, n_consts, n_xs = p["n_carry"], p["n_consts"], p["n_xs"]
        body = p["body"]
        start, stop, step = (self._int(a) for a in node.inputs[:3])
        carry_init = node.inputs[3:3 + n_carry]
        consts = node.inputs[3 + n_carry:3 + n_carry + n_consts]
        xs = node.inputs[3 + n_carry + n_consts:]
        outs = [self.n.name(o) for o in node.outputs]
        carry_names, ys_names = outs[:n_carry], outs[n_carry:]
        self._assign(indent, carry_names, [self.atom(a) for a in carry_init])
        i_var = body.inputs[0]
        simple = not xs and not ys_names and not p["reverse"]
        for v, name in zip(body.inputs[1:1 + n_carry], carry_names):
            self.n.alias(v, name)
        for v, a in zip(body.inputs[1 + n_carry:1 + n_carry + n_consts], consts):
            self.n.alias(v, self.atom(a))
        if simple:
            i_name = self.n.name(i_var)
            self.emit(indent, f"for {i_name} in range({start}, {stop}, {step}):")
        else:
            rng = self.n.fresh("trips")
            self.emit(indent, f"{rng} = range({start}, {stop}, {step})")
            for y in ys_names:
                self.emit(indent, f"{y} = [None] * len({rng})")
            k = self.n.fresh("k")
            order = f"reversed(range(len({rng})))" if p["reverse"] else f"range(len({rng}))"
            self.emit(indent, f"for {k} in {order}:")
            self.emit(indent + 1, f"{self.n.name(i_var)} = {rng}[{k}]")
            for v, a in zip(body.inputs[1 + n_carry + n_consts:], xs):
                self.emit(indent + 1, f"{self.n.name(v)} = {self.atom(a)}[{k}]")
        self.last_comment = None
        self.body(body, indent + 1)
        # stacked outputs are stored before the carries are rebound: a y may be a carry input
        if not simple:
            for y, o in zip(ys_names, body.outputs[n_carry:]):
                self.emit(indent + 1, f"{y}[{k}] = {self.atom(o)}")
        self._assign(indent + 1, carry_names, [self.atom(o) for o in body.outputs[:n_carry]])
        if simple and not body.nodes and not carry_names:
            self.emit(indent + 1, "pass")
        self.last_comment = None

    def _int(self, a) -> str:
        if isinstance(a, Literal) and isinstance(a.value, (int, np.integer)):
            return repr(int(a.value))
        return f"int({self.atom(a)})"

    def render_while(self, node, indent):
        p = node.params
        n_carry, n_consts = p["n_carry"], p["n_consts"]
        body, cond = p["body"], p["cond"]
        carry_init = node.inputs[:n_carry]
        consts = node.inputs[n_carry:]
        outs = [self.n.name(o) for o in node.outputs]
        carry_names, trips, ys_names = outs[:n_carry], outs[n_carry], outs[n_carry + 1:]
        self._assign(indent, carry_names, [self.atom(a) for a in carry_init])
        self.emit(indent, f"{trips} = 0")
        for y in ys_names:
            self.emit(indent, f"{y} = []")
        for region in (cond, body):
            for v, name in zip(region.inputs[:n_carry], carry_names):
                self.n.alias(v, name)
            for v, a in zip(region.inputs[n_carry:], consts):
                self.n.alias(v, self.atom(a))
        self.emit(indent, "while True:")
        self.last_comment = None
        self.body(cond, indent + 1)
        self.emit(indent + 1, f"if not lax.truth({self.atom(cond.outputs[0])}, 'while'):")
        self.emit(indent + 2, "break")
        if p["max_trips"] is not None:
            self.emit(indent + 1, f"lax.check_trips({trips}, {p['max_trips']!r})")
        self.body(body, indent + 1)
        for y, o in zip(ys_names, body.outputs[n_carry:]):
            self.emit(indent + 1, f"{y}.append({self.atom(o)})")
        self._assign(indent + 1, carry_names, [self.atom(o) for o in body.outputs[:n_carry]])
        self.emit(indent + 1, f"{trips} += 1")
        self.last_comment = None


def _short(filename: str) -> str:
    import os
    return os.path.basename(filename)


def render_function(graph: Graph, name: str, arg_names=None, header: str = "", renderer=None) -> str:
    """One ``def`` for ``graph``; inputs named by ``arg_names`` (or hints). ``renderer``
    makes the ``Renderer`` from the namer (default: ``Renderer``)."""
    namer = _Namer()
    params = []
    for k, v in enumerate(graph.inputs):
        if arg_names is not None and k < len(arg_names) and arg_names[k]:
            nm = namer.fresh(arg_names[k])
            namer.alias(v, nm)
        else:
            nm = namer.name(v)
        params.append(nm)
    r = (renderer or Renderer)(namer)
    r.free_after = _last_reads(graph)
    r.emit(0, f"def {name}({', '.join(params)}):")
    if header:
        r.emit(1, f'"""{header}"""')
    r.body(graph, 1, top=True)
    outs = [r.atom(o) for o in graph.outputs]
    r.emit(1, f"return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    return "\n".join(r.lines)


def _last_reads(graph: Graph) -> dict:
    """``{i: vars}``: the values computed in ``graph`` that node ``i - 1`` reads last.

    The function body ``del``s each right after that node. A local otherwise
    keeps its array alive until the function returns; NumPy code written by
    hand frees temporaries as it goes, and a larger working set costs fresh
    pages from the system on every call (glibc unmaps large blocks when freed).
    Left out: the inputs and outputs, values known to be scalars, and values
    read last by the final node (the return frees them)."""
    last, order = {}, []
    for i, node in enumerate(graph.nodes):
        for a in node.inputs:
            if isinstance(a, Var):
                last[a.id] = i + 1
        for o in node.outputs:
            last[o.id] = i + 1
            order.append(o)
    keep = {v.id for v in graph.inputs} | {o.id for o in graph.outputs if isinstance(o, Var)}
    out: dict[int, list] = {}
    for v in order:
        i = last[v.id]
        if v.id not in keep and i < len(graph.nodes) and getattr(v.aval, "shape", None) != ():
            out.setdefault(i, []).append(v)
    return out


def render_module(functions, title: str, renderer=None) -> str:
    """A module of rendered functions: ``functions`` is ``[(graph, name, arg_names, doc)]``.
    ``renderer`` as for ``render_function``; its ``prelude()`` (if any) gives module-level
    lines placed after the imports."""
    parts = [f"# Generated by tlaloc: {title}.",
             "# Plain Python: it runs without tlaloc's transforms and returns the same bits.",
             "import numpy as np",
             "",
             "import tlaloc.numpy as tnp",
             "from tlaloc.numpy import lax",
             ""]
    bodies = []
    for graph, name, arg_names, doc in functions:
        bodies += ["", render_function(graph, name, arg_names, doc, renderer), ""]
    prelude = getattr(renderer, "prelude", None)
    if prelude is not None:
        parts += prelude()
    return "\n".join(parts + bodies)
