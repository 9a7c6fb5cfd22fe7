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
        self._put = _putter(self.device)
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
                self._handlers = _result_handlers(outs, self.device)
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
        mesh = program.shardings.mesh
        self.client = client(platform)
        self.devices = _mesh_devices(self.client, mesh, platform)
        self.multiprocess = len(self.client.devices()) != len(self.client.local_devices())
        self.in_avals = [(np.dtype(a.dtype), tuple(a.shape)) for a in program.in_avals]
        self.out_avals = list(program.out_avals)
        self.checks = list(program.checks)
        self.arg_names = arg_names or [f"argument {k}" for k in range(len(self.in_avals))]
        self.name = getattr(program, "name", None) or "program"
        opts = xc.CompileOptions()
        build = opts.executable_build_options
        build.num_partitions = mesh.size
        build.num_replicas = 1
        build.use_spmd_partitioning = True
        build.use_shardy_partitioner = True
        build.device_assignment = xc.DeviceAssignment.create(
            np.array([d.id for d in self.devices]).reshape(1, mesh.size))
        if self.multiprocess:
            _agree_on_program(program, self.name, mesh, self.in_avals, self.arg_names)
        self._exe = self.client.compile_and_load(program.text, xc.DeviceList(self.devices), opts)
        n_out = len(self.out_avals) + len(self.checks)
        self.in_shardings = _shardings(self._exe.get_parameter_shardings(), self.devices, len(self.in_avals))
        self.out_shardings = _shardings(self._exe.get_output_shardings(), self.devices, n_out)
        self._jax = jax

    def __call__(self, *args):
        bufs = [self.place(a, k) for k, a in enumerate(args)]
        if self.multiprocess:
            _agree_on_host_inputs(self.name, args, self.arg_names)
            return self._run_across_processes(bufs)
        return self._run(bufs)

    def _run(self, bufs) -> list:
        res = self._exe.execute_sharded(bufs).disassemble_into_single_device_arrays()
        shapes = [tuple(s) for _, s in self.out_avals] + [()] * len(self.checks)
        outs = [self._jax.make_array_from_single_device_arrays(shape, sh, list(shards))
                for shape, sh, shards in zip(shapes, self.out_shardings, res)]
        return without_checks(outs, self.checks)

    def _run_across_processes(self, bufs) -> list:
        """``_run``, waiting for the results so that a collective whose peer is gone fails here,
        as a ``DistributedError`` that says so (``tlaloc._runtime.distributed.lost_peer``)."""
        from .distributed import lost_peer
        try:
            outs = self._run(bufs)
            for o in outs:
                o.block_until_ready()
            return outs
        except Exception as e:
            error = lost_peer(e, self.name)
            if error is None:
                raise
            raise error from None

    def place(self, a, k: int):
        """Argument ``k`` as a global device array with its compiled sharding."""
        dtype, shape = self.in_avals[k]
        target = self.in_shardings[k]
        if _is_device_array(a):
            if a.is_deleted():
                raise donated(self.arg_names[k])
            if a.dtype == dtype and tuple(a.shape) == shape and hasattr(a, "sharding") and \
                    a.sharding.is_equivalent_to(target, len(shape)):
                return a
        return self._jax.device_put(host_array(a, dtype, shape, self.arg_names[k]), target)


def _shardings(hlo_shardings, devices, n: int) -> list:
    """jax shardings of a compiled program's parameters or outputs (XLA reports none for a
    mesh of one device: everything is on it)."""
    from jax._src.sharding_impls import GSPMDSharding
    if hlo_shardings is None:
        return [GSPMDSharding.get_replicated(devices)] * n
    return [GSPMDSharding(devices, s) for s in hlo_shardings]


def _mesh_devices(client_, mesh, platform: str) -> tuple:
    """The devices of ``mesh``, in mesh order: the first ``mesh.size`` of the client's (global) devices.
    In a multi-process run the mesh must hold every process's devices."""
    devices = client_.devices()
    local = client_.local_devices()
    if len(devices) != len(local):
        if mesh.size != len(devices):
            raise ArgumentError(
                f"{mesh!r} has {mesh.size} devices, but this multi-process run has {len(devices)} ({len(local)} in "
                f"each process); give the mesh every device of the run, e.g. Mesh({{'data': {len(devices)}}})")
        return tuple(devices)
    if len(devices) < mesh.size:
        raise ArgumentError(
            f"{mesh!r} needs {mesh.size} devices but the {platform} backend has {len(devices)} here; for "
            f"virtual CPU devices set XLA_FLAGS=--xla_force_host_platform_device_count={mesh.size} before "
            f"jax starts (before the first tl.jit call or jax import); across processes, "
            f"tlaloc.distributed.initialize first")
    return tuple(devices[:mesh.size])


def _agree_on_program(program, name: str, mesh, in_avals, arg_names) -> None:
    """Every process compiles the same program (``DistributedError`` naming what differs otherwise)."""
    import hashlib
    from .distributed import agree
    digest = hashlib.sha256(f"{mesh.axes}\n{program.text}".encode()).hexdigest()
    items = [f"mesh: {mesh!r}"] + [f"argument {k} `{n}`: {np.dtype(d).name}{list(s)}"
                                   for k, (n, (d, s)) in enumerate(zip(arg_names, in_avals))]
    agree("compile", name, digest, items,
          "every process must compile the same program, with arguments of the same global shapes, in the same "
          "order (each process feeds its shard of a global array: tl.distributed.global_array)")


def _agree_on_host_inputs(name: str, args, arg_names) -> None:
    """Host (NumPy) arguments of a multi-process program are global values: every process must pass
    the same ones. Device arrays (outputs, ``tlaloc.distributed.global_array``) are not checked."""
    import hashlib
    from .distributed import agree
    host = [(k, np.asarray(a)) for k, a in enumerate(args) if not _is_device_array(a)]
    if not host:
        return
    digests = [hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest() for _, a in host]
    items = [f"argument {k} `{arg_names[k]}`: content sha256 {d[:12]}" for (k, _), d in zip(host, digests)]
    agree("inputs", name, hashlib.sha256("".join(digests).encode()).hexdigest(), items,
          "a NumPy argument of a program run across processes is one global value, the same in every "
          "process; feed a value that differs between processes as each process's shard of a global array "
          "(tl.distributed.global_array)")


def _putter(device):
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


def _result_handlers(outs, device):
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


__all__ = ["client", "has_platform", "Executable", "SpmdExecutable", "device_put"]
