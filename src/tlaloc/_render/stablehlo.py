"""DXIR → StableHLO text (MLIR), verified by parsing it with jaxlib's MLIR bindings.

The input is a *specialised* graph (``tlaloc._core.specialize``): every var
has a dtype and integer dims. Each primitive lowers through its ``lower``
entry (filled from ``stablehlo_rules.LOWERINGS``); a primitive without one is
refused by name (``NoRuleError: no StableHLO lowering rule for `x```).

Ops are written in MLIR's generic form (``"stablehlo.add"(%a, %b) : (...) -> ...``),
one per line, with the user's ``file:line:col`` as the op location, so an
MLIR diagnostic points at the user's code. ``Program.text`` is the module as
MLIR prints it back (the readable custom form).

Stacks (the ``ys`` of loops) are arrays with a leading iteration axis,
preallocated and filled with ``dynamic_update_slice``.
"""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from .. import dtypes as _dt
from ..errors import GraphError, NoRuleError, at_location
from .._core.graph import Graph, Literal
from .._core.rules import ensure_rules
from .stablehlo_text import BOOL, dense_text, mlir_context, parse  # noqa: F401  (re-exported)

_MLIR_DTYPES = {
    _dt.float64: "f64", _dt.float32: "f32", _dt.float16: "f16", _dt.bfloat16: "bf16",
    _dt.int8: "i8", np.dtype(np.int16): "i16", _dt.int32: "i32", _dt.int64: "i64",
    _dt.uint8: "ui8", np.dtype(np.uint16): "ui16", _dt.uint32: "ui32", _dt.uint64: "ui64",
    _dt.bool_: "i1", np.dtype(np.complex64): "complex<f32>", np.dtype(np.complex128): "complex<f64>",
}
I64 = _dt.int64


def mlir_dtype(dtype) -> str:
    try:
        return _MLIR_DTYPES[np.dtype(dtype)]
    except KeyError:
        raise NoRuleError(f"no StableHLO type for dtype {np.dtype(dtype)}") from None


def tensor_type(dtype, shape) -> str:
    dims = "".join(f"{int(d)}x" for d in shape)
    return f"tensor<{dims}{mlir_dtype(dtype)}>"


class Val:
    """An SSA value of the module being written: its name and type."""
    __slots__ = ("name", "dtype", "shape")

    def __init__(self, name: str, dtype, shape):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)

    @property
    def ty(self) -> str:
        return tensor_type(self.dtype, self.shape)

    def __repr__(self) -> str:
        return f"{self.name}: {self.ty}"


def i64s(xs) -> str:
    """An MLIR dense i64 array attribute: ``array<i64: 0, 1>``."""
    xs = [int(x) for x in xs]
    return f"array<i64: {', '.join(map(str, xs))}>" if xs else "array<i64>"


def ints(xs) -> str:
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


# -- the emitter ---------------------------------------------------------------------------

@dataclasses.dataclass
class Program:
    """A lowered program.

    text: the StableHLO module (MLIR custom form, as printed after verification).
    in_avals / out_avals: the argument and result types, in order.
    aliases: ``{input index: output index}`` for donated inputs.
    checks: messages of the run-time checks; their flags follow the outputs.
    shardings: the mesh and per-value mesh axes of an SPMD program, or None.
    """
    text: str
    in_avals: list
    out_avals: list
    aliases: dict
    checks: list
    name: str
    shardings: object = None     # ``Shardings`` of an SPMD program (mesh, per-input/-output dims)


_I32_INDICES = ("stablehlo.gather", "stablehlo.scatter")


class Emitter:
    """Writes one module. Rules call ``op``, ``value``, ``const`` and friends."""

    def __init__(self, backend: str = "xla"):
        self._n = 0
        self._blocks = [[]]
        self.loc = None
        self.checks: list = []       # (Val of i1, message)
        self.backend = backend
        self.split_reductions = backend == "iree"      # see stablehlo_structural.reduce
        self.non_negative: set = set()   # names of i64 values known >= 0 (a for loop's index)

    # -- text ----------------------------------------------------------------------------
    def fresh(self) -> str:
        self._n += 1
        return f"%v{self._n}"

    def line(self, text: str) -> None:
        self._blocks[-1].append(text)

    def _loc(self) -> str:
        loc = self.loc
        if loc is None:
            return ""
        fname = str(loc.filename).replace("\\", "\\\\").replace('"', '\\"')
        return f' loc("{fname}":{int(loc.lineno)}:{int(loc.col)})'

    def op(self, name: str, operands, results, attrs=None, regions=None):
        """Emit ``name`` in generic form. ``results``: one ``(dtype, shape)`` (returns a Val)
        or a list of them (returns a list of Vals)."""
        single = isinstance(results, tuple) and len(results) == 2 and not isinstance(results[0], tuple)
        res = [results] if single else list(results)
        if (self.backend == "iree" and name == "stablehlo.convert" and operands[0].dtype == np.float64
                and not operands[0].shape and np.dtype(res[0][0]) != np.float64):
            # IREE 3.13 runs scalar arithmetic of loop indices on the host, whose VM cannot
            # narrow float64 ("failed to legalize operation 'arith.truncf' (f64) -> f32", e.g.
            # `0.5 * k` met float32 data): a barrier keeps the conversion on the device
            operands = [self.op("stablehlo.optimization_barrier", [operands[0]], (np.float64, ()))]
        if self.backend == "iree" and name in _I32_INDICES and operands[1].dtype == I64:
            # IREE 3.13 cannot legalize i64 gather/scatter indices ("failed to legalize unresolved
            # source materialization from tensor<1xi64> to tensor<1xi32>"): give it i32 ones
            operands = [operands[0], self.op("stablehlo.convert", [operands[1]], (np.int32, operands[1].shape))] \
                + list(operands[2:])
        head = self.fresh()
        outs = [Val(head if len(res) == 1 else f"{head}#{k}", d, s) for k, (d, s) in enumerate(res)]
        lhs = "" if not res else (f"{head} = " if len(res) == 1 else f"{head}:{len(res)} = ")
        args = ", ".join(v.name for v in operands)
        attr = ""
        if attrs:
            attr = " {" + ", ".join(f"{k} = {v}" for k, v in attrs.items()) + "}"
        in_t = ", ".join(v.ty for v in operands)
        out_t = ", ".join(tensor_type(d, s) for d, s in res)
        sig = f"({in_t}) -> " + (out_t if len(res) == 1 else f"({out_t})")
        if not regions:
            self.line(f'{lhs}"{name}"({args}){attr} : {sig}{self._loc()}')
        else:
            self.line(f'{lhs}"{name}"({args}) ({{')
            for k, body in enumerate(regions):
                for text in body:
                    self.line("  " + text)
                self.line("}, {" if k + 1 < len(regions) else f"}}){attr} : {sig}{self._loc()}")
        return outs[0] if single else outs

    @contextlib.contextmanager
    def region(self, arg_types=()):
        """Collect the ops of a region; yields ``(args, lines)``."""
        args = [Val(self.fresh(), d, s) for d, s in arg_types]
        lines: list = []
        if args:
            lines.append("^bb0(" + ", ".join(f"{a.name}: {a.ty}" for a in args) + "):")
        self._blocks.append(lines)
        try:
            yield args, lines
        finally:
            self._blocks.pop()

    def ret(self, vals, op="stablehlo.return") -> None:
        args = ", ".join(v.name for v in vals)
        tys = ", ".join(v.ty for v in vals)
        self.line(f'"{op}"({args}) : ({tys}) -> ()')

    # -- values ----------------------------------------------------------------------------
    def const(self, value, dtype, shape=None) -> Val:
        arr = np.asarray(value)
        if arr.dtype != np.dtype(dtype):
            with np.errstate(all="ignore"):
                arr = arr.astype(dtype)
        shape = arr.shape if shape is None else tuple(shape)
        if arr.shape != shape:
            if arr.size != 1:
                return self.broadcast(self.const(arr, dtype), shape)
            arr = np.broadcast_to(arr.reshape(()), shape)
        text = dense_text(arr)
        return self.op("stablehlo.constant", [], (dtype, shape),
                       attrs={"value": f"{text} : {tensor_type(dtype, shape)}"})

    def value(self, x, dtype=None, shape=None) -> Val:
        """``x`` (a Val or a Literal) as a Val of ``dtype``, broadcast to ``shape``."""
        if isinstance(x, Literal):
            arr = np.asarray(x.value)
            dt = dtype if dtype is not None else arr.dtype
            return self.const(arr, dt, shape if shape is not None else arr.shape)
        v = x
        if dtype is not None and np.dtype(dtype) != v.dtype:
            v = self.convert(v, dtype)
        if shape is not None and tuple(shape) != v.shape:
            v = self.broadcast(v, shape)
        return v

    def convert(self, v: Val, dtype) -> Val:
        dtype = np.dtype(dtype)
        if v.dtype == dtype:
            return v
        if dtype == BOOL:
            return self.compare("NE", v, self.const(0, v.dtype, v.shape))
        return self.op("stablehlo.convert", [v], (dtype, v.shape))

    def broadcast(self, v: Val, shape, dims=None) -> Val:
        """NumPy broadcasting of ``v`` to ``shape`` (or explicit ``broadcast_dimensions``)."""
        shape = tuple(shape)
        if dims is None:
            if v.shape == shape:
                return v
            dims = range(len(shape) - len(v.shape), len(shape))
        return self.op("stablehlo.broadcast_in_dim", [v], (v.dtype, shape),
                       attrs={"broadcast_dimensions": i64s(dims)})

    def reshape(self, v: Val, shape) -> Val:
        shape = tuple(shape)
        return v if v.shape == shape else self.op("stablehlo.reshape", [v], (v.dtype, shape))

    def compare(self, direction: str, a: Val, b: Val) -> Val:
        kind = "FLOAT" if a.dtype.kind in "fV" or a.dtype == _dt.bfloat16 else (
            "SIGNED" if a.dtype.kind == "i" else "UNSIGNED")
        return self.op("stablehlo.compare", [a, b], (BOOL, a.shape),
                       attrs={"comparison_direction": f"#stablehlo<comparison_direction {direction}>",
                              "compare_type": f"#stablehlo<comparison_type {kind}>"})

    def binary(self, name: str, a: Val, b: Val) -> Val:
        return self.op(name, [a, b], (a.dtype, a.shape))

    def unary(self, name: str, a: Val) -> Val:
        return self.op(name, [a], (a.dtype, a.shape))

    def select(self, p: Val, a: Val, b: Val) -> Val:
        return self.op("stablehlo.select", [p, a, b], (a.dtype, a.shape))

    def reducer(self, op_name: str, dtype, n: int = 1):
        """A reduction body ``^bb0(a, b): a <op> b`` for ``n`` operand pairs (lines)."""
        with self.region([(dtype, ())] * (2 * n)) as (args, lines):
            outs = [self.binary(op_name, args[k], args[n + k]) for k in range(n)]
            self.ret(outs)
        return lines

    def check(self, flag: Val, message: str) -> None:
        """A run-time check: the runtime raises ``message`` when ``flag`` is true."""
        self.checks.append((flag, message))

    # -- graphs ----------------------------------------------------------------------------
    def lower_graph(self, graph: Graph, in_vals) -> list:
        """Emit ``graph``'s nodes with ``in_vals`` as its inputs; returns its outputs
        (Vals, or Literals for constant outputs)."""
        env = {v.id: x for v, x in zip(graph.inputs, in_vals)}

        def read(a):
            return a if isinstance(a, Literal) else env[a.id]

        for node in graph.nodes:
            rule = node.prim.lower
            if rule is None:
                raise NoRuleError(f"no StableHLO lowering rule for `{node.prim.name}`"
                                  + (f" (used at {node.loc})" if node.loc else ""))
            old, self.loc = self.loc, node.loc or self.loc
            try:
                outs = rule(self, node, *[read(a) for a in node.inputs])
            except NoRuleError as e:          # a construct compiled code cannot express (a mask)
                raise at_location(e, node.loc) from None
            finally:
                self.loc = old
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            for var, v in zip(node.outputs, outs):
                if not isinstance(v, Literal):
                    want = (np.dtype(var.aval.dtype), tuple(var.aval.shape))
                    if (v.dtype, v.shape) != want:
                        raise GraphError(f"lowering `{node.prim.name}` gave {v.ty} where DXIR says "
                                         f"{tensor_type(*want)}")
                env[var.id] = v
        return [read(o) for o in graph.outputs]


def out_aval(node, k: int = 0):
    """``(dtype, shape)`` of result ``k`` of ``node``."""
    a = node.outputs[k].aval
    return np.dtype(a.dtype), tuple(a.shape)


# -- modules -------------------------------------------------------------------------------

def emit_module(graph: Graph, *, name: str = "main", donate=(), shardings=None, backend: str = "xla") -> Program:
    """Lower a specialised graph to a verified StableHLO module.

    Args:
      graph: a graph from ``specialize`` (concrete avals).
      name: the module's name (``@jit_<name>``).
      donate: input indices whose buffers the program may overwrite; each is
        aliased (``tf.aliasing_output``) to the first unaliased output of the
        same type.
      shardings: ``Shardings`` (a mesh and per-input / per-output mesh axes per
        dim): written as Shardy attributes (``sdy.mesh``, ``sdy.sharding``) and
        ``mhlo.num_partitions``; ``None`` for a one-device program.
      backend: ``"xla"`` or ``"iree"`` (the few lowerings that differ, to steer
        around compiler bugs, read it from the emitter).
    Raises:
      NoRuleError: a primitive without a lowering (named).
      GraphError: the emitted module does not verify (with the MLIR diagnostic).
    """
    ensure_rules()                   # primitives declared since the last call get their rules too
    em = Emitter(backend)
    in_vals = [Val(f"%arg{k}", v.aval.dtype, v.aval.shape) for k, v in enumerate(graph.inputs)]
    outs = em.lower_graph(graph, in_vals)
    outs = [em.value(o, o.aval.dtype, tuple(o.aval.shape)) if isinstance(o, Literal) and o.aval.dtype is not None
            else em.value(o) for o in outs]
    flags = [em.convert(f, BOOL) for f, _ in em.checks]
    results = outs + flags
    em.ret(results, op="func.return")
    aliases = _aliases(in_vals, outs, donate)
    in_sdy, out_sdy = _sdy_attrs(shardings, len(in_vals), len(outs), len(flags))
    params = []
    for k, v in enumerate(in_vals):
        attrs = ([f"tf.aliasing_output = {aliases[k]} : i32"] if k in aliases else []) + in_sdy[k]
        extra = f" {{{', '.join(attrs)}}}" if attrs else ""
        params.append(f"{v.name}: {v.ty}{extra}")
    res_t = ", ".join(v.ty + (f" {{{', '.join(a)}}}" if a else "") for v, a in zip(results, out_sdy))
    body = "\n".join("    " + line for line in em._blocks[0])
    sym = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    parts = 1 if shardings is None else shardings.mesh.size
    mesh = "" if shardings is None else f"  {shardings.mesh.sdy_text()}\n"
    text = (f"module @jit_{sym} attributes {{mhlo.num_partitions = {parts} : i32, mhlo.num_replicas = 1 : i32}} "
            f"{{\n{mesh}  func.func public @main({', '.join(params)}) -> ({res_t}) {{\n{body}\n  }}\n}}\n")
    module = parse(text)
    return Program(str(module), [v.aval for v in graph.inputs], [(v.dtype, v.shape) for v in outs],
                   aliases, [m for _, m in em.checks], sym, shardings)


def _sdy_attrs(shardings, n_in, n_out, n_flags):
    """``sdy.sharding`` attribute text per argument and per result (empty lists without a mesh).
    Run-time check flags are replicated; an unspecified output is left to the partitioner."""
    if shardings is None:
        return [[] for _ in range(n_in)], [[] for _ in range(n_out + n_flags)]
    from ..sharding import sdy_sharding

    def attr(dims):
        return [] if dims is None else [f"sdy.sharding = {sdy_sharding(dims)}"]
    ins = [attr(d) for d in shardings.inputs]
    outs = [attr(d) for d in shardings.outputs] + [attr(())] * n_flags
    return ins, outs


def _aliases(in_vals, outs, donate) -> dict:
    taken, out = set(), {}
    for k in sorted(set(donate)):
        for j, o in enumerate(outs):
            if j not in taken and (o.dtype, o.shape) == (in_vals[k].dtype, in_vals[k].shape):
                taken.add(j)
                out[k] = j
                break
    return out


__all__ = ["emit_module", "parse", "Program", "Emitter", "Val", "mlir_context", "tensor_type", "dense_text"]
