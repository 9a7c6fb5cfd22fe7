"""Running exported programs on one PJRT device: compile with options, call with device buffers.

A thin layer over the PJRT runtime (``tlaloc._runtime.pjrt``: jaxlib's client) for the
serving hot path: arguments are already device arrays (weights, KV pools) or small
NumPy arrays (the per-step request inputs, transferred here); outputs stay on the
device. ``fast_compile`` lowers XLA's backend (LLVM) optimisation level to 0, which
compiles several times faster and runs the same program, somewhat slower.
"""
from __future__ import annotations

import numpy as np

from .._runtime import pjrt


class Program:
    """One compiled StableHLO module.

    Args:
      text: the module (StableHLO text).
      platform: "cpu" or "cuda".
      arg_names, in_avals: per input, a name (for messages) and ``(dtype, shape)``.
      fast_compile: XLA backend optimisation level 0.
    """

    def __init__(self, text: str, platform: str, arg_names: list, in_avals: list, fast_compile: bool = False):
        from jaxlib import _jax as xc
        self.client = pjrt.client(platform)
        self.device = self.client.local_devices()[0]
        self.arg_names = list(arg_names)
        self.in_avals = [(np.dtype(d), tuple(s)) for d, s in in_avals]
        options = xc.CompileOptions()
        if fast_compile:
            options.executable_build_options.debug_options.xla_backend_optimization_level = 0
        self._exe = self.client.compile_and_load(text, xc.DeviceList((self.device,)), options)
        self._put = pjrt._putter(self.device)

    def __call__(self, *args) -> list:
        """Device arrays out; NumPy arguments are transferred (and checked against the compiled types)."""
        bufs = [self._transfer(a, k) if isinstance(a, np.ndarray) else a for k, a in enumerate(args)]
        return [r[0] for r in self._exe.execute_sharded(bufs).disassemble_into_single_device_arrays()]

    def _transfer(self, a: np.ndarray, k: int):
        dtype, shape = self.in_avals[k]
        if a.dtype != dtype or a.shape != shape:
            raise ValueError(f"{self.arg_names[k]}: got {a.dtype}{list(a.shape)}, the program takes "
                             f"{dtype}{list(shape)}")
        return self._put(a)


def device_put(array: np.ndarray, platform: str):
    """A device buffer owned by the runtime (so a program may update it in place when donated)."""
    return pjrt.device_put(array, platform)


__all__ = ["Program", "device_put"]
