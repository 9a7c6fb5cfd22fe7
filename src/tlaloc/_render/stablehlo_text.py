"""StableHLO text helpers: exact ``dense<...>`` literals, and parsing/verifying
modules with the MLIR bindings jaxlib ships (func, StableHLO, CHLO and Shardy dialects)."""
from __future__ import annotations

import functools

import numpy as np

from .. import dtypes as _dt
from ..errors import GraphError

BOOL = _dt.bool_


# -- literals ----------------------------------------------------------------------------

def _float_text(x) -> str:
    f = float(x)
    if not np.isfinite(f):
        bits = np.asarray(f, np.float64).view(np.uint64)
        return f"0x{int(bits):016X}"
    s = repr(f)
    mant, _, exp = s.partition("e")
    if "." not in mant:
        mant += ".0"
    return mant + ("e" + exp if exp else "")


def _elem_text(x, dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return "true" if bool(x) else "false"
    if dtype.kind in "iu":
        return str(int(x))
    if dtype.kind == "c":
        return f"({_float_text(x.real)}, {_float_text(x.imag)})"
    if not np.isfinite(float(x)):
        raw = np.asarray(x, dtype).view(f"u{dtype.itemsize}")
        return f"0x{int(raw):0{2 * dtype.itemsize}X}"
    return _float_text(x)


def dense_text(arr: np.ndarray) -> str:
    """The ``dense<...>`` literal of ``arr`` (exact: floats round-trip)."""
    arr = np.asarray(arr)
    if arr.size == 0:
        return "dense<>"
    flat = arr.reshape(-1)
    if flat.size and np.all(flat == flat[0]) and not (arr.dtype.kind in "fc" and np.isnan(flat).any()):
        return f"dense<{_elem_text(flat[0], arr.dtype)}>"
    if arr.dtype != BOOL and arr.dtype.kind != "c" and arr.size > 16:
        data = np.ascontiguousarray(arr, arr.dtype.newbyteorder("<")).tobytes()
        return f'dense<"0x{data.hex().upper()}">'

    def nest(a):
        if a.ndim == 0:
            return _elem_text(a, arr.dtype)
        return "[" + ", ".join(nest(s) for s in a) + "]"
    return f"dense<{nest(arr)}>"


# -- verification -------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _registry():
    from jaxlib.mlir import ir
    from jaxlib.mlir._mlir_libs import _jax_mlir_ext
    reg = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(reg)
    return reg


def mlir_context():
    """A fresh MLIR context with the func, StableHLO, CHLO and Shardy (``sdy``) dialects loaded."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import chlo, sdy, stablehlo
    ctx = ir.Context()
    ctx.append_dialect_registry(_registry())
    ctx.load_all_available_dialects()
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    sdy.register_dialect(ctx)
    return ctx


def parse(text: str):
    """Parse and verify StableHLO text; raises ``GraphError`` with the MLIR diagnostic."""
    from jaxlib.mlir import ir
    with mlir_context():
        try:
            module = ir.Module.parse(text)
            ok = module.operation.verify()
        except ir.MLIRError as e:
            diags = "\n".join(f"  {d.location}: {d.message}" for d in e.error_diagnostics) or f"  {e}"
            raise GraphError(f"the emitted StableHLO does not verify:\n{diags}") from None
        if not ok:
            raise GraphError("the emitted StableHLO does not verify")
        return module


