"""Loading emitted PTX with the CUDA driver and launching it (cuda-python).

``cuda-bindings`` (the optional ``gpu`` extra) wraps the driver API; the driver
JIT-compiles the PTX when the module loads, so no CUDA toolkit is needed at run
time. Everything here raises ``CudaUnavailable`` (with the reason) where there
is no driver or device, which tests use to skip by name.

``LoadedKernel(spec)`` loads one specialized kernel into the current (or the
device's primary) context; ``launch(pointers, stream)`` runs it on a stream
(XLA's, from the FFI handler). ``run(spec, *inputs)`` and ``time(...)`` are
for checking and timing outside XLA: they copy to the device, launch, copy back.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ...errors import TlalocError


class CudaUnavailable(TlalocError, RuntimeError):
    """No CUDA driver, device or cuda-python here; the message says which."""


class CudaError(TlalocError, RuntimeError):
    """A CUDA driver call failed; the message names the call and the error."""


_cu = None


def cu():
    """The ``cuda.bindings.driver`` module, initialised (``cuInit``) once."""
    global _cu
    if _cu is not None:
        return _cu
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver        # cuda-python < 12.6
        except ImportError:
            raise CudaUnavailable("cuda-python is not installed (pip install 'tlaloc-py[gpu]')") from None
    try:
        (err,) = driver.cuInit(0)
    except RuntimeError as e:                      # libcuda.so missing
        raise CudaUnavailable(f"no CUDA driver: {e}") from None
    if int(err) != 0:
        raise CudaUnavailable(f"cuInit failed: {_name(driver, err)}")
    _cu = driver
    return driver


def _name(driver, err) -> str:
    try:
        e, s = driver.cuGetErrorName(err)
        return s.decode() if isinstance(s, bytes) else str(err)
    except Exception:
        return str(err)


def check(result, what: str):
    """Unpack a cuda-python result tuple, raising ``CudaError`` on failure."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise CudaError(f"{what} failed: {_name(cu(), err)}")
    return rest[0] if len(rest) == 1 else tuple(rest) if rest else None


def available() -> tuple:
    """``(True, "")`` when a CUDA device is usable, else ``(False, reason)``."""
    try:
        d = cu()
        n = check(d.cuDeviceGetCount(), "cuDeviceGetCount")
        return (n > 0, "" if n > 0 else "no CUDA device")
    except (CudaUnavailable, CudaError) as e:
        return False, str(e)


def primary_context(device: int = 0):
    """Make the device's primary context (the one XLA uses) current; returns it."""
    d = cu()
    dev = check(d.cuDeviceGet(device), "cuDeviceGet")
    ctx = check(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


class LoadedKernel:
    """One specialized kernel loaded in a context; call ``launch`` with device pointers."""

    def __init__(self, spec, device: int = 0):
        d = cu()
        ctx = check(d.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if ctx is None or int(ctx) == 0:             # outside XLA: use the device's primary context
            primary_context(device)
        self.spec = spec
        self.module = check(d.cuModuleLoadData(spec.ptx.encode() + b"\0"), f"cuModuleLoadData({spec.name})")
        self.function = check(d.cuModuleGetFunction(self.module, spec.name.encode()), "cuModuleGetFunction")
        self.grid, self.block = spec.launch.grid, spec.launch.block

    def launch(self, pointers, stream=0) -> None:
        """Launch with one device pointer per ``.param`` (inputs, then outputs)."""
        d = cu()
        if len(pointers) != len(self.spec.kernel.params):
            raise CudaError(f"{self.spec.name} takes {len(self.spec.kernel.params)} pointers, got {len(pointers)}")
        params = (tuple(int(p) for p in pointers), tuple(ctypes.c_void_p for _ in pointers))
        check(d.cuLaunchKernel(self.function, *self.grid, *self.block, 0, d.CUstream(int(stream)), params, 0),
              f"cuLaunchKernel({self.spec.name})")

    def ffi_launcher(self):
        """``launcher(inputs, outputs, stream)`` for ``ffi.register``."""
        return lambda ins, outs, stream: self.launch([p for p, _, _ in ins] + [p for p, _, _ in outs], stream)


class DeviceBuffer:
    def __init__(self, nbytes: int):
        self.nbytes = max(int(nbytes), 4)
        self.ptr = int(check(cu().cuMemAlloc(self.nbytes), "cuMemAlloc"))

    @classmethod
    def from_array(cls, a: np.ndarray) -> "DeviceBuffer":
        a = np.ascontiguousarray(a)
        b = cls(a.nbytes)
        check(cu().cuMemcpyHtoD(b.ptr, a.ctypes.data, a.nbytes), "cuMemcpyHtoD")
        return b

    def to_array(self, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype)
        check(cu().cuMemcpyDtoH(out.ctypes.data, self.ptr, out.nbytes), "cuMemcpyDtoH")
        return out

    def free(self):
        if self.ptr:
            check(cu().cuMemFree(self.ptr), "cuMemFree")
            self.ptr = 0


def run(spec, *inputs):
    """Run ``spec`` once on the GPU; returns its outputs (like ``sim.simulate``)."""
    ins, outs = spec.signature()
    k = LoadedKernel(spec)
    bufs = [DeviceBuffer.from_array(np.asarray(x, dt)) for x, (_, _, dt) in zip(inputs, ins)]
    obufs = [DeviceBuffer.from_array(np.full(s, np.nan if np.dtype(dt).kind == "f" else 0, dt))
             for _, s, dt in outs]
    try:
        k.launch([b.ptr for b in bufs + obufs])
        check(cu().cuCtxSynchronize(), f"running {spec.name}")
        return tuple(b.to_array(s, dt) for b, (_, s, dt) in zip(obufs, outs))
    finally:
        for b in bufs + obufs:
            b.free()


def time_kernel(spec, *inputs, iters: int = 50, warmup: int = 5) -> float:
    """Mean seconds per launch of ``spec`` (CUDA events around ``iters`` launches)."""
    d = cu()
    ins, outs = spec.signature()
    k = LoadedKernel(spec)
    bufs = [DeviceBuffer.from_array(np.asarray(x, dt)) for x, (_, _, dt) in zip(inputs, ins)]
    obufs = [DeviceBuffer(int(np.prod(s)) * np.dtype(dt).itemsize) for _, s, dt in outs]
    ptrs = [b.ptr for b in bufs + obufs]
    try:
        for _ in range(warmup):
            k.launch(ptrs)
        start, stop = (check(d.cuEventCreate(0), "cuEventCreate") for _ in range(2))
        check(d.cuEventRecord(start, 0), "cuEventRecord")
        for _ in range(iters):
            k.launch(ptrs)
        check(d.cuEventRecord(stop, 0), "cuEventRecord")
        check(d.cuEventSynchronize(stop), "cuEventSynchronize")
        ms = check(d.cuEventElapsedTime(start, stop), "cuEventElapsedTime")
        return ms / 1e3 / iters
    finally:
        for b in bufs + obufs:
            b.free()
