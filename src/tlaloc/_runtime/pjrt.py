"""The PJRT runtime: compile StableHLO with XLA through the client jaxlib ships,
and run it on device arrays.

* ``client(platform)`` is the PJRT client for ``"cpu"`` or ``"cuda"`` (the
  CUDA plugin where a GPU and the plugin exist).
* ``Executable(program)`` compiles a ``Program`` (or StableHLO text, or a
  portable artifact's bytes) once; calling it takes NumPy arrays, Python
  numbers or device arrays and returns device arrays (``np.asarray`` reads
  them). Device arrays passed back in stay on the device.
* ``tlaloc._runtime.spmd.SpmdExecutable(program)`` compiles a program with
  Shardy shardings for a device mesh (of one process, or of every process of a
  multi-process run) and runs it partitioned (XLA's SPMD partitioner).
* Float64 needs ``jax_enable_x64`` before the first transfer (otherwise
  float64 input silently becomes float32); importing this module sets it.

This module imports only NumPy and jax/jaxlib (it is what a serving process
loads to run exported programs).
"""
from __future__ import annotations

import functools

import numpy as np

from ..errors import ArgumentError, TlalocError
from ._common import donated, host_array, without_checks


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
        self._put = putter(self.device)
        self._handlers = None           # per output, a C++ result handler (after the first call), or False

    def __call__(self, *args):
        bufs = [a if (type(a) is _ARRAY and not a.is_deleted()) else self.to_device(a, k)
                for k, a in enumerate(args)]
        return self._outputs(self._exe.execute_sharded(bufs))

    def runner(self, leaves, name: str = "f"):
        """A call specialised to arguments like ``leaves``: the same types, dtypes and shapes
        (``tl.jit``'s hit path, whose signature guarantees that). Device arrays of the compiled
        type pass as they are, NumPy arrays of the compiled type take one transfer each, and
        anything else (a Python number, another dtype) goes through ``to_device``. An argument
        donated to an earlier call is refused by name, as ``__call__`` does.

        Where every argument is an array of the compiled type and the program has no run-time
        checks, the call goes through jax's C++ dispatch (``_cpp_runner``)."""
        puts, converts = [], []
        for k, a in enumerate(leaves):
            dtype, shape = self.in_avals[k]
            if type(a) is _ARRAY and a.dtype == dtype and tuple(a.shape) == shape:
                continue
            if type(a) is np.ndarray and a.dtype == dtype and a.shape == shape:
                puts.append((k, self._put.fixed(shape, dtype)))
            else:
                converts.append(k)
        execute, outputs, to_device = self._exe.execute_sharded, self._outputs, self.to_device

        def run(leaves):
            bufs = list(leaves)
            for k, put in puts:
                bufs[k] = put(bufs[k])
            for k in converts:
                bufs[k] = to_device(bufs[k], k)
            try:
                results = execute(bufs)
            except Exception:
                self._refuse_deleted(bufs)
                raise
            return outputs(results)
        if not converts and not self.checks:
            return _cpp_runner(self, run, len(leaves), name) or run
        return run

    def _refuse_deleted(self, args) -> None:
        """``ArgumentError`` naming the first argument whose buffer was donated to an earlier call."""
        for k, a in enumerate(args):
            if _is_device_array(a) and a.is_deleted():
                self.to_device(a, k)

    def _outputs(self, results) -> list:
        """The device arrays of one execution, with the run-time checks applied."""
        handlers = self._handlers
        if handlers:
            outs = results.consume_with_handlers(handlers)
        else:
            outs = [r[0] for r in results.disassemble_into_single_device_arrays()]
            if handlers is None:
                self._handlers = result_handlers(outs, self.device)
        return without_checks(outs, self.checks)

    def to_device(self, a, k: int):
        """Argument ``k`` as a device array of the compiled dtype and shape."""
        dtype, shape = self.in_avals[k]
        if _is_device_array(a):
            if a.is_deleted():
                raise donated(self.arg_names[k])
            if a.dtype == dtype and tuple(a.shape) == shape:
                return a
            a = np.asarray(a)
        return self._put(host_array(a, dtype, shape, self.arg_names[k]))

    def serialize_executable(self) -> bytes:
        return self.client.serialize_executable(self._exe)


def putter(device):
    """A fast host→device transfer (``batched_device_put``), else ``jax.device_put``."""
    jax = _jax()
    try:
        from jax._src import core
        from jaxlib import _jax as xc
        sharding = jax.sharding.SingleDeviceSharding(device)
        avals = {}
        devices = [device]

        def put(arr):
            key = (arr.shape, arr.dtype)
            aval = avals.get(key)
            if aval is None:
                aval = avals[key] = core.ShapedArray(arr.shape, arr.dtype)
            return xc.batched_device_put(aval, sharding, [arr], devices, True, False)

        def fixed(shape, dtype):
            """``put`` for arrays of this shape and dtype only (no look-up)."""
            aval = core.ShapedArray(shape, dtype)
            return lambda arr: xc.batched_device_put(aval, sharding, [arr], devices, True, False)
        put.fixed = fixed
        put(np.zeros((1,), np.float32))
        fixed((1,), np.dtype(np.float32))(np.zeros((1,), np.float32))
        return put
    except Exception:                                      # pragma: no cover  (jaxlib internals moved)
        def put(arr):
            return jax.device_put(arr, device)
        put.fixed = lambda shape, dtype: put
        return put


def _cpp_runner(exe: Executable, slow, n_in: int, name: str):
    """``slow`` (``Executable.runner``'s Python call) behind jaxlib's C++ dispatch: the
    function object jax's own ahead-of-time ``Compiled`` calls through. The first call (and
    any call whose argument types jaxlib has not seen) runs ``slow`` and hands jaxlib the
    executable and the output types; later ones transfer NumPy arguments, execute and wrap
    the outputs without Python, as ``jax.jit`` does. ``None`` where jax's internals differ
    from what this expects (the Python call then serves)."""
    try:
        import jax
        from jax._src import tree_util
        from jax._src.interpreters import pxla
        from jaxlib import _jax as xc
        sharding = jax.sharding.SingleDeviceSharding(exe.device)
        registry = tree_util.dispatch_registry

        def cache_miss(*leaves):
            outs = slow(list(leaves))
            fastpath = None
            if all(type(o) is _ARRAY for o in outs):
                try:
                    fastpath = pxla.MeshExecutableFastpathData(
                        exe._exe, registry.flatten(tuple(outs), None)[1], [sharding] * n_in,
                        [sharding] * len(outs), [o.aval for o in outs], [True] * len(outs), [True] * n_in,
                        [None] * n_in, [])
                except Exception:                          # pragma: no cover  (jax internals moved)
                    fastpath = None
            return tuple(outs), fastpath, False

        def python_call(*leaves):                          # what jaxlib runs under jax.disable_jit()
            return tuple(slow(list(leaves)))
        call = xc.pjit(f"tlaloc.jit:{name}", python_call, cache_miss, [], [], pxla.JitGlobalCppCacheKeys(),
                       registry, pxla.cc_shard_arg)
    except Exception:                                      # pragma: no cover  (jax internals moved)
        return None

    def run(leaves):
        try:
            return list(call(*leaves))
        except Exception:
            exe._refuse_deleted(leaves)
            raise
    return run


def result_handlers(outs, device):
    """C++ result handlers that wrap each output of an execution as a device array like ``outs``
    (what jax's own dispatch uses: no Python per output), or ``False`` where jaxlib has none."""
    try:
        import jax
        from jax._src import core
        from jaxlib import _jax as xc
        sharding = jax.sharding.SingleDeviceSharding(device)
        handlers = []
        for o in outs:
            if type(o) is not _ARRAY or o.weak_type or not o.committed or o.sharding != sharding:
                return False
            handlers.append(xc.array_result_handler(core.ShapedArray(o.shape, o.dtype), sharding, True,
                                                    _skip_checks=True))
        return handlers
    except Exception:                                      # pragma: no cover  (jaxlib internals moved)
        return False


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


def device_put_in_place(x: np.ndarray, platform: str = "cpu"):
    """``x`` on the device, using its memory in place where the backend can (XLA CPU does for
    data aligned to its minimum alignment), else copied. For arrays nothing will write: the
    device array must never be donated, and ``x`` must not change while it lives (the device
    array keeps ``x`` alive)."""
    jax = _jax()
    dev = client(platform).local_devices()[0]
    out = jax.device_put(x, dev)
    out.block_until_ready()
    return out


__all__ = ["client", "has_platform", "Executable", "device_put", "device_put_in_place"]
