"""Running exported programs on one PJRT device: compile with options, call with device buffers.

A thin layer over the PJRT runtime (``tlaloc._runtime.pjrt``: jaxlib's client) for the
serving hot path: arguments are already device arrays (weights, KV pools) or small
NumPy arrays (the per-step request inputs, transferred here); outputs stay on the
device. ``fast_compile`` lowers XLA's backend (LLVM) optimisation level to 0, which
compiles several times faster and runs the same program, somewhat slower.

On the CPU platform the serving runtime asks XLA for its memory-minimising scheduler
instead of the concurrency-optimised one (:data:`CPU_SCHEDULER_FLAG`, added to
``XLA_FLAGS`` when this module is imported). The concurrency-optimised scheduler starts
every independent op as early as it can, so a program that converts its bf16 or int8
weights to float32 converts all of them before the first layer runs and keeps a float32
copy of the whole model in temporary memory (freshly mapped, written and read back at
every step). With the other scheduler each weight is converted just before its dot.
XLA reads this flag from ``XLA_FLAGS`` only, once per process, when its first CPU
client starts (a per-compile option is accepted and ignored): import
``tlaloc.serving.runtime.device`` before anything else starts XLA, or set the flag yourself.
:func:`memory_scheduler_active` says whether it is in effect.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

from ..._runtime import pjrt

#: the XLA flag the serving runtime sets (see the module docstring)
CPU_SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def _prefer_memory_scheduler() -> bool:
    """Add CPU_SCHEDULER_FLAG to XLA_FLAGS unless the user chose a scheduler; True if added."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_enable_concurrency_optimized_scheduler" in flags:
        return False
    os.environ["XLA_FLAGS"] = f"{CPU_SCHEDULER_FLAG} {flags}".strip()     # first: XLA stops at a bad token
    return True


_prefer_memory_scheduler()


def memory_scheduler_active() -> bool:
    """Whether XLA_FLAGS asks for the memory-minimising CPU scheduler (effective if set before XLA started)."""
    return CPU_SCHEDULER_FLAG in os.environ.get("XLA_FLAGS", "").split()


class Program:
    """One compiled StableHLO module.

    Args:
      text: the module (StableHLO text).
      platform: "cpu" or "cuda".
      arg_names, in_avals: per input, a name (for messages) and ``(dtype, shape)``.
      fast_compile: XLA backend optimisation level 0.
      cache_path: a file for the compiled executable: read if it exists (no compile), else
        written after compiling. Only point it into a directory you own: loading an
        executable runs its code.
    """

    def __init__(self, text: str, platform: str, arg_names: list, in_avals: list, fast_compile: bool = False,
                 cache_path: str | None = None):
        from jaxlib import _jax as xc
        self.client = pjrt.client(platform)
        self.device = self.client.local_devices()[0]
        self.arg_names = list(arg_names)
        self.in_avals = [(np.dtype(d), tuple(s)) for d, s in in_avals]
        options = xc.CompileOptions()
        if fast_compile:
            options.executable_build_options.debug_options.xla_backend_optimization_level = 0
        devices = xc.DeviceList((self.device,))
        self.from_cache = False
        if cache_path is not None and os.path.isfile(cache_path):
            with open(cache_path, "rb") as f:
                self._exe = self.client.deserialize_executable(f.read(), devices, options)
            self.from_cache = True
        else:
            self._exe = self.client.compile_and_load(text, devices, options)
            if cache_path is not None:
                _write_atomically(cache_path, self.client.serialize_executable(self._exe))
        put = pjrt.putter(self.device)
        fixed = getattr(put, "fixed", None)
        self._puts = [fixed(s, d) if fixed else put for d, s in self.in_avals]     # per input: no look-up per call
        self._handlers = None       # per output, a C++ result handler (after the first call), or False

    def __call__(self, *args) -> list:
        """Device arrays out; NumPy arguments are transferred (and checked against the compiled types)."""
        return self.execute([self.put(a, k) for k, a in enumerate(args)])

    def put(self, a, k: int):
        """Argument ``k`` for :meth:`execute`: a NumPy array transferred (checked against the compiled
        type), anything else (a device array) as it is."""
        return self._transfer(a, k) if isinstance(a, np.ndarray) else a

    def execute(self, bufs: list) -> list:
        """Run on ``bufs``, every argument already a device array (see :meth:`put`); device arrays out.
        The serving executor transfers only its few request inputs this way instead of testing each
        of the hundreds of arguments (weights, pools) per call."""
        results = self._exe.execute_sharded(bufs)
        if self._handlers:
            return results.consume_with_handlers(self._handlers)
        outs = [r[0] for r in results.disassemble_into_single_device_arrays()]
        if self._handlers is None:
            self._handlers = pjrt.result_handlers(outs, self.device)
        return outs

    def _transfer(self, a: np.ndarray, k: int):
        dtype, shape = self.in_avals[k]
        if a.dtype != dtype or a.shape != shape:
            raise ValueError(f"{self.arg_names[k]}: got {a.dtype}{list(a.shape)}, the program takes "
                             f"{dtype}{list(shape)}")
        return self._puts[k](a)


def _write_atomically(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def device_put(array: np.ndarray, platform: str):
    """A device buffer owned by the runtime (so a program may update it in place when donated)."""
    return pjrt.device_put(array, platform)


def put_weights(arrays: dict, platform: str) -> dict:
    """Read-only arrays on the device, key -> device array. On CPU they are laid out together in
    host memory backed by huge pages and used there in place (``tlaloc._runtime.host_arena``):
    weights stream faster from it. Elsewhere (or with ``TLALOC_HUGE_PAGES=0``) each is copied
    into a buffer of its own. The values are the same either way."""
    from ..._runtime import host_arena
    if platform != "cpu" or not host_arena.enabled():
        return {k: pjrt.device_put(a, platform) for k, a in arrays.items()}
    keys = list(arrays)
    copies = host_arena.arena_copies([arrays[k] for k in keys])
    return {k: pjrt.device_put_in_place(c, platform) for k, c in zip(keys, copies)}


__all__ = ["Program", "device_put", "put_weights", "CPU_SCHEDULER_FLAG", "memory_scheduler_active"]
