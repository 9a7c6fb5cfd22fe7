"""Kernels on a device: the CUDA driver (``driver.py``) and XLA FFI targets (``ffi.py``).

``register_kernel(spec)`` makes a specialized kernel an FFI target on CUDA, so a
compiled program's ``stablehlo.custom_call @<name>`` (or ``jax.ffi.ffi_call``)
launches it on XLA's stream; the module is loaded on first call, in XLA's
context. ``register_simulated(spec)`` does the same on the CPU platform with the
simulator as the launcher (for tests and machines without a GPU).
``ffi_call(spec, name)`` returns a jax-traceable function calling the target.
"""
from __future__ import annotations

import numpy as np

from ..claims import ffi_target_name
from . import ffi
from .driver import CudaError, CudaUnavailable, LoadedKernel, available

__all__ = ["register_kernel", "register_simulated", "ffi_call", "available", "CudaUnavailable", "CudaError",
           "LoadedKernel", "ffi"]


def register_kernel(spec, name: str | None = None) -> str:
    """Register ``spec`` as a CUDA FFI target; returns the target name."""
    name = name or ffi_target_name(spec)
    loaded: dict = {}

    def launch(ins, outs, stream):
        k = loaded.get("k")
        if k is None:
            k = loaded["k"] = LoadedKernel(spec)
        k.launch([p for p, _, _ in ins] + [p for p, _, _ in outs], stream)
    ffi.register(name, launch, spec.signature(), platform="CUDA")
    return name


def register_simulated(spec, name: str | None = None) -> str:
    """Register ``spec`` on the CPU platform, run by the simulator; returns the target name."""
    from .. import sim
    name = name or ffi_target_name(spec) + "_sim"
    ins_d, outs_d = spec.signature()

    def launch(ins, outs, stream):
        args = [np.array(a) for a in ffi.host_arrays(ins, ins_d)] + ffi.host_arrays(outs, outs_d)
        sim.run(spec, args)
    ffi.register(name, launch, spec.signature(), platform="cpu")
    return name


def ffi_call(spec, name: str):
    """``f(*inputs) -> outputs`` calling FFI target ``name`` of ``spec`` (inside jax.jit too)."""
    import jax
    _, outs = spec.signature()
    shapes = [jax.ShapeDtypeStruct(tuple(s), np.dtype(d)) for _, s, d in outs]
    call = jax.ffi.ffi_call(name, shapes)
    return lambda *xs: tuple(call(*xs))
