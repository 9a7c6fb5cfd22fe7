"""SPMD programs: one StableHLO program with Shardy shardings, partitioned by XLA over a
device mesh, on the devices of this process or of every process of a multi-process run
(``tlaloc._runtime.distributed``).

In a multi-process run every process compiles the same program for the global
mesh, after checking with the others that it is the same (``agree``), and runs
it on its own devices; collectives run inside the program (gloo on the CPU).
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ._common import donated, host_array, without_checks
from .pjrt import _is_device_array, _jax, client


class SpmdExecutable:
    """A program partitioned over a device mesh by XLA's SPMD partitioner (Shardy).

    The program's ``shardings`` name the mesh; its size is the number of
    partitions, one per device (the first ``mesh.size`` devices of ``platform``;
    in a multi-process run, every device of every process). Calling it takes
    NumPy arrays, numbers or device arrays; each argument is placed with the
    sharding XLA compiled for it (a device array already placed that way is used
    as it is). Results are global device arrays, sharded as compiled
    (``np.asarray`` gathers them in one process; across processes it reads only
    replicated ones: ``tlaloc.distributed.gather`` gathers the others).

    Across processes, every process must construct and call it alike: before
    compiling, the processes compare the program and argument types, and before
    each call their NumPy arguments (``DistributedError`` naming what differs);
    a call whose collective loses a peer raises ``DistributedError`` too.
    """

    def __init__(self, program, platform: str = "cpu", arg_names=None):
        from jaxlib import _jax as xc
        jax = _jax()
        mesh = program.shardings.mesh
        self.client = client(platform)
        self.devices = mesh_devices(self.client, mesh, platform)
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
        if self.multiprocess:
            _agree_on_host_inputs(self.name, args, self.arg_names)       # before any transfer
            return self._run_across_processes([self.place(a, k) for k, a in enumerate(args)])
        return self._run([self.place(a, k) for k, a in enumerate(args)])

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
            if a.dtype == dtype and tuple(a.shape) == shape and hasattr(a, "sharding"):
                if a.sharding.is_equivalent_to(target, len(shape)):
                    return a
                if not a.is_fully_addressable:         # a global array sharded otherwise: XLA reshards it
                    return self._jax.device_put(a, target)
        return self._jax.device_put(host_array(a, dtype, shape, self.arg_names[k]), target)


def _shardings(hlo_shardings, devices, n: int) -> list:
    """jax shardings of a compiled program's parameters or outputs (XLA reports none for a
    mesh of one device: everything is on it)."""
    from jax._src.sharding_impls import GSPMDSharding
    if hlo_shardings is None:
        return [GSPMDSharding.get_replicated(devices)] * n
    return [GSPMDSharding(devices, s) for s in hlo_shardings]


def mesh_devices(client_, mesh, platform: str) -> tuple:
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


__all__ = ["SpmdExecutable"]
