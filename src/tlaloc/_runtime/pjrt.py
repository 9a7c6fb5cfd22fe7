"""The PJRT runtime: compile StableHLO with XLA through the client jaxlib ships,
and run it on device arrays.

* ``client(platform)`` is the PJRT client for ``"cpu"`` or ``"cuda"`` (the
  CUDA plugin where a GPU and the plugin exist).
* ``Executable(program)`` compiles a ``Program`` (or StableHLO text, or a
  portable artifact's bytes) once; calling it takes NumPy arrays, Python
  numbers or device arrays and returns device arrays (``np.asarray`` reads
  them). Device arrays passed back in stay on the device.
* ``SpmdExecutable(program)`` compiles a program with Shardy shardings for a
  device mesh and runs it partitioned (XLA's SPMD partitioner), one shard per
  device.
* Float64 needs ``jax_enable_x64`` before the first transfer (otherwise
  float64 input silently becomes float32); importing this module sets it.

This module imports only NumPy and jax/jaxlib (it is what a serving process
loads to run exported programs).
"""
from __future__ import annotations

import functools

import numpy as np

from ..errors import ArgumentError, TlalocError


def _jax():
    try:
        import jax
    except ImportError:                                    # pragma: no cover
        raise TlalocError("tl.jit with backend='xla' needs jax and jaxlib (pip install jax==0.10.2 "
                          "jaxlib==0.10.2); use backend='interpreter' without them") from None
    if not jax.config.jax_enable_x64:
        jax.config.update("jax_enable_x64", True)
    return jax


@functools.lru_cache(maxsize=None)
def client(platform: str = "cpu"):
    """The PJRT client for ``platform`` ("cpu" or "cuda"); ``ArgumentError`` if absent."""
    _jax()
    from jax.extend.backend import get_backend
    try:
        return get_backend(platform)
    except RuntimeError as e:
        raise ArgumentError(f"no PJRT backend for platform {platform!r} here ({e}); "
                            f"use platform='cpu'") from None


def has_platform(platform: str) -> bool:
    try:
        client(platform)
        return True
    except ArgumentError:
        return False


def _array_impl():
    try:
        from jaxlib import _jax
        return _jax.ArrayImpl
    except Exception:                                      # pragma: no cover
        return None


_ARRAY = _array_impl()


def _is_device_array(x) -> bool:
    return hasattr(x, "unsafe_buffer_pointer") and hasattr(x, "is_deleted")


class Executable:
    """A compiled program on one device.

    Args:
      program: a ``Program`` from ``tlaloc._render.stablehlo.emit_module``, or
        StableHLO text / portable-artifact bytes with ``in_avals`` given.
      platform: "cpu" or "cuda".
      arg_names: names for error messages, one per input.
    """

    def __init__(self, program, platform: str = "cpu", arg_names=None, in_avals=None, n_checks=0,
                 check_messages=()):
        from jaxlib import _jax as xc
        self.client = client(platform)
        self.device = self.client.local_devices()[0]
        text = getattr(program, "text", program)
        self.in_avals = [(np.dtype(a.dtype), tuple(a.shape)) for a in
                         (getattr(program, "in_avals", None) or in_avals or [])]
        self.checks = list(getattr(program, "checks", check_messages))
        self.donated = set(getattr(program, "aliases", {}) or {})
        self.arg_names = arg_names or [f"argument {k}" for k in range(len(self.in_avals))]
        self._exe = self.client.compile_and_load(text, xc.DeviceList((self.device,)), xc.CompileOptions())
        self._put = _putter(self.device)

    def __call__(self, *args):
        bufs = [a if (type(a) is _ARRAY and not a.is_deleted()) else self.to_device(a, k)
                for k, a in enumerate(args)]
        res = self._exe.execute_sharded(bufs).disassemble_into_single_device_arrays()
        outs = [r[0] for r in res]
        if self.checks:
            flags, outs = outs[len(outs) - len(self.checks):], outs[:len(outs) - len(self.checks)]
            for flag, message in zip(flags, self.checks):
                if bool(np.asarray(flag)):
                    raise TlalocError(message)
        return outs

    def to_device(self, a, k: int):
        """Argument ``k`` as a device array of the compiled dtype and shape."""
        dtype, shape = self.in_avals[k]
        if _is_device_array(a):
            if a.is_deleted():
                raise ArgumentError(f"{self.arg_names[k]} was donated to an earlier call (donate_argnums) and "
                                    f"its buffer is gone; pass the array that call returned instead")
            if a.dtype == dtype and tuple(a.shape) == shape:
                return a
            a = np.asarray(a)
        arr = np.asarray(a)
        if arr.dtype != dtype:
            arr = arr.astype(dtype)
        if arr.shape != shape:
            raise ArgumentError(f"{self.arg_names[k]} has shape {arr.shape}; this program was compiled "
                                f"for {shape}")
        return self._put(arr)

    def serialize_executable(self) -> bytes:
        return self.client.serialize_executable(self._exe)


class SpmdExecutable:
    """A program partitioned over a device mesh by XLA's SPMD partitioner (Shardy).

    The program's ``shardings`` name the mesh; its size is the number of
    partitions, one per device (the first ``mesh.size`` devices of ``platform``).
    Calling it takes NumPy arrays, numbers or device arrays; each argument is
    placed with the sharding XLA compiled for it (a device array already placed
    that way is used as it is). Results are global device arrays (``np.asarray``
    gathers them), sharded as compiled.
    """

    def __init__(self, program, platform: str = "cpu", arg_names=None):
        from jaxlib import _jax as xc
        jax = _jax()
        from jax._src.sharding_impls import GSPMDSharding
        mesh = program.shardings.mesh
        self.client = client(platform)
        devices = self.client.local_devices()
        if len(devices) < mesh.size:
            raise ArgumentError(
                f"{mesh!r} needs {mesh.size} devices but the {platform} backend has {len(devices)} here; for "
                f"virtual CPU devices set XLA_FLAGS=--xla_force_host_platform_device_count={mesh.size} before "
                f"jax starts (before the first tl.jit call or jax import)")
        self.devices = tuple(devices[:mesh.size])
        self.in_avals = [(np.dtype(a.dtype), tuple(a.shape)) for a in program.in_avals]
        self.out_avals = list(program.out_avals)
        self.checks = list(program.checks)
        self.arg_names = arg_names or [f"argument {k}" for k in range(len(self.in_avals))]
        opts = xc.CompileOptions()
        build = opts.executable_build_options
        build.num_partitions = mesh.size
        build.num_replicas = 1
        build.use_spmd_partitioning = True
        build.use_shardy_partitioner = True
        build.device_assignment = xc.DeviceAssignment.create(np.arange(mesh.size).reshape(1, mesh.size))
        self._exe = self.client.compile_and_load(program.text, xc.DeviceList(self.devices), opts)
        self.in_shardings = [GSPMDSharding(self.devices, s) for s in self._exe.get_parameter_shardings()]
        self.out_shardings = [GSPMDSharding(self.devices, s) for s in self._exe.get_output_shardings()]
        self._jax = jax

    def __call__(self, *args):
        bufs = [self.place(a, k) for k, a in enumerate(args)]
        res = self._exe.execute_sharded(bufs).disassemble_into_single_device_arrays()
        shapes = [tuple(s) for _, s in self.out_avals] + [()] * len(self.checks)
        outs = [self._jax.make_array_from_single_device_arrays(shape, sh, list(shards))
                for shape, sh, shards in zip(shapes, self.out_shardings, res)]
        if self.checks:
            flags, outs = outs[len(outs) - len(self.checks):], outs[:len(outs) - len(self.checks)]
            for flag, message in zip(flags, self.checks):
                if bool(np.asarray(flag)):
                    raise TlalocError(message)
        return outs

    def place(self, a, k: int):
        """Argument ``k`` as a global device array with its compiled sharding."""
        dtype, shape = self.in_avals[k]
        target = self.in_shardings[k]
        if _is_device_array(a):
            if a.is_deleted():
                raise ArgumentError(f"{self.arg_names[k]} was donated to an earlier call (donate_argnums) and "
                                    f"its buffer is gone; pass the array that call returned instead")
            if a.dtype == dtype and tuple(a.shape) == shape and hasattr(a, "sharding") and \
                    a.sharding.is_equivalent_to(target, len(shape)):
                return a
        arr = np.asarray(a)
        if arr.dtype != dtype:
            arr = arr.astype(dtype)
        if arr.shape != shape:
            raise ArgumentError(f"{self.arg_names[k]} has shape {arr.shape}; this program was compiled "
                                f"for {shape}")
        return self._jax.device_put(arr, target)


def _putter(device):
    """A fast host→device transfer (``batched_device_put``), else ``jax.device_put``."""
    jax = _jax()
    try:
        from jax._src import core
        from jaxlib import _jax as xc
        sharding = jax.sharding.SingleDeviceSharding(device)
        avals = {}

        def put(arr):
            key = (arr.shape, arr.dtype)
            aval = avals.get(key)
            if aval is None:
                aval = avals[key] = core.ShapedArray(arr.shape, arr.dtype)
            return xc.batched_device_put(aval, sharding, [arr], [device], True, False)
        put(np.zeros((1,), np.float32))
        return put
    except Exception:                                      # pragma: no cover  (jaxlib internals moved)
        return lambda arr: jax.device_put(arr, device)


def device_put(x, platform: str = "cpu"):
    """``x`` copied into a device buffer the runtime owns (so it can be donated in place).

    A plain transfer may alias the NumPy array's memory on CPU (zero copy); such
    a buffer is not XLA's to overwrite, and donating it costs a copy.
    """
    _jax()
    from jax._src import core
    from jaxlib import _jax as xc
    import jax
    dev = client(platform).local_devices()[0]
    arr = np.array(x, copy=True)
    out = xc.batched_device_put(core.ShapedArray(arr.shape, arr.dtype), jax.sharding.SingleDeviceSharding(dev),
                                [arr], [dev], True, True, xc.HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL)
    out.block_until_ready()
    return out


__all__ = ["client", "has_platform", "Executable", "SpmdExecutable", "device_put"]
