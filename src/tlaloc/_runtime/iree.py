"""The IREE runtime: compile the same StableHLO with IREE (``llvm-cpu``) and run
it with the ``local-sync`` driver.

* ``Executable(program, graph=...)`` takes the ``Program`` the PJRT runtime
  takes. Shardy annotations (``sdy.mesh``, ``sdy.sharding``) and donation
  aliases (``tf.aliasing_output``) are stripped first: IREE runs the program on
  one device and does not know them.
* Float64 stays float64 (``--iree-input-demote-f64-to-f32=false``). IREE's
  ``llvm-cpu`` target links no float64 ``tanh``/``sin``/``cos``/``atan2``/
  ``fmod``; such a program fails to link, and the failure is mapped back to
  the primitive that needs the symbol and refused by name (``NoRuleError``,
  with the user's ``file:line:col``), never run with a wrong answer.
* Calling it takes NumPy arrays, Python numbers or IREE device arrays and
  returns IREE ``DeviceArray``s (``np.asarray`` reads them); a device array
  passed back in stays on the device.

Measured here (iree 3.13): a compile takes about 1 s (3 s for a loop's
gradient); a call costs about 10 µs plus the program.
"""
from __future__ import annotations

import functools
import re

import numpy as np

from ..errors import GraphError, NoRuleError, TlalocError
from ._common import donated, host_array, without_checks

#: ``iree.compiler.compile_str`` flags: keep float64; target the host CPU
#: (the programs run where they are compiled).
COMPILE_FLAGS = ("--iree-input-demote-f64-to-f32=false", "--iree-llvmcpu-target-cpu=host")
TARGET = "llvm-cpu"
DRIVER = "local-sync"

#: libm symbol the llvm-cpu linker misses -> the DXIR primitives that need it.
LIBM_SOURCES = {
    "tanh": ("tanh",),
    "sin": ("sin", "tan"),
    "cos": ("cos", "tan"),
    "tan": ("tan",),
    "atan2": ("arctan2", "arctan", "arcsin", "arccos"),
    "atan": ("arctan",),
    "fmod": ("remainder", "floor_divide"),
    "pow": ("power",),
}


def _iree():
    try:
        import iree.compiler as compiler
        import iree.runtime as runtime
    except ImportError:                                    # pragma: no cover
        raise TlalocError("tl.jit(backend='iree') needs IREE (pip install iree-base-compiler==3.13.0 "
                          "iree-base-runtime==3.13.0); use backend='xla' without it") from None
    return compiler, runtime


def available() -> bool:
    try:
        _iree()
        return True
    except TlalocError:
        return False


@functools.lru_cache(maxsize=None)
def _config(driver: str):
    _, rt = _iree()
    return rt.Config(driver)


# -- the module IREE compiles -------------------------------------------------------------------

_STRIP_ATTRS = ("sdy.sharding", "tf.aliasing_output", "jax.result_info")


def strip_for_iree(text: str) -> str:
    """``text`` without Shardy meshes and shardings or donation aliases (verified MLIR)."""
    if "sdy." not in text and "tf.aliasing_output" not in text:
        return text
    from jaxlib.mlir import ir
    from .._render.stablehlo_text import mlir_context
    with mlir_context():
        module = ir.Module.parse(text)
        for op in list(module.body.operations):
            name = op.operation.name
            if name == "sdy.mesh":
                op.operation.erase()
            elif name == "func.func":
                for key in ("arg_attrs", "res_attrs"):
                    if key in op.operation.attributes:
                        op.operation.attributes[key] = _without(op.operation.attributes[key])
        for key in ("mhlo.num_partitions",):
            if key in module.operation.attributes:
                module.operation.attributes[key] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1)
        return str(module)


def _without(array_attr):
    from jaxlib.mlir import ir
    out = []
    for d in ir.ArrayAttr(array_attr):
        d = ir.DictAttr(d)
        keep = {}
        for k in range(len(d)):
            named = d[k]
            if named.name not in _STRIP_ATTRS:
                keep[named.name] = named.attr
        out.append(ir.DictAttr.get(keep))
    return ir.ArrayAttr.get(out)


def compile_vmfb(text: str, graph=None) -> bytes:
    """IREE's VM flatbuffer for StableHLO ``text``.

    Raises:
      NoRuleError: the program needs a float64 math function IREE cannot link
        (named, with the primitive's location in ``graph`` where known).
      GraphError: any other IREE compile failure, with IREE's diagnostics.
    """
    compiler, _ = _iree()
    try:
        return compiler.compile_str(strip_for_iree(text), target_backends=[TARGET], input_type="stablehlo",
                                    extra_args=list(COMPILE_FLAGS))
    except compiler.CompilerToolError as e:
        raise _map_failure(str(e), graph) from None


def _map_failure(message: str, graph):
    missing = re.findall(r"undefined symbol: (\w+)", message)
    if missing:
        sym = missing[0]
        prims = LIBM_SOURCES.get(sym, (sym,))
        node = _find(graph, prims) if graph is not None else None
        what = node.prim.name if node is not None else "/".join(prims)
        where = f" (used at {node.loc})" if node is not None and node.loc else ""
        return NoRuleError(
            f"IREE ({TARGET}) cannot compile `{what}` in float64{where}: its float64 math library has no "
            f"`{sym}` (undefined symbol at link time). Use backend='xla' for float64 `{what}`, or run the "
            f"program in float32 on IREE")
    lines = [ln for ln in message.splitlines() if "error" in ln.lower()][:12]
    return GraphError("IREE could not compile the program:\n  " + "\n  ".join(lines or message.splitlines()[:12]))


def _find(graph, prim_names):
    """The first node (regions included) applying one of ``prim_names`` to float64."""
    for node in graph.nodes:
        if node.prim.name in prim_names and any(
                getattr(o.aval, "dtype", None) == np.float64 for o in node.outputs):
            return node
        for region in node.regions():
            hit = _find(region, prim_names)
            if hit is not None:
                return hit
    return None


# -- executables ------------------------------------------------------------------------------

class Executable:
    """A program compiled by IREE for the host CPU, run with ``local-sync``.

    Args:
      program: a ``Program`` from ``tlaloc._render.stablehlo.emit_module``, or
        StableHLO text with ``in_avals`` given.
      graph: the specialised DXIR graph (to name a refused primitive's location).
      arg_names: names for error messages, one per input.
    """

    def __init__(self, program, graph=None, arg_names=None, in_avals=None, driver: str = DRIVER):
        _, rt = _iree()
        text = getattr(program, "text", program)
        self.in_avals = [(np.dtype(a.dtype), tuple(a.shape)) for a in
                         (getattr(program, "in_avals", None) or in_avals or [])]
        self.out_avals = list(getattr(program, "out_avals", []) or [])
        self.checks = list(getattr(program, "checks", ()))
        self.arg_names = arg_names or [f"argument {k}" for k in range(len(self.in_avals))]
        self.vmfb = compile_vmfb(text, graph)
        self._ctx = rt.SystemContext(config=_config(driver))
        module = rt.VmModule.copy_buffer(self._ctx.instance, self.vmfb)
        self._ctx.add_vm_module(module)
        self._fn = self._ctx.modules[module.name]["main"]
        self._device_array = rt.DeviceArray

    def __call__(self, *args):
        bufs = [a if type(a) is self._device_array else self.to_host(a, k) for k, a in enumerate(args)]
        res = self._fn(*bufs)
        if res is None:
            outs = []
        elif isinstance(res, (tuple, list)):
            outs = list(res)
        else:
            outs = [res]
        return without_checks(outs, self.checks)

    def to_host(self, a, k: int):
        """Argument ``k`` as a NumPy array of the compiled dtype and shape."""
        dtype, shape = self.in_avals[k]
        if hasattr(a, "is_deleted") and a.is_deleted():
            raise donated(self.arg_names[k])
        arr = host_array(a, dtype, shape, self.arg_names[k])
        return arr if arr.flags.c_contiguous else arr.copy()      # (ascontiguousarray makes 0-d 1-d)


__all__ = ["Executable", "compile_vmfb", "strip_for_iree", "available", "LIBM_SOURCES"]
