"""Training across processes on XLA's distributed runtime.

    # every process runs the same script (``tlaloc launch -n 2 train.py`` starts them)
    import tlaloc as tl
    from tlaloc import distributed as dist
    dist.initialize()                                  # reads $TLALOC_COORDINATOR_ADDRESS, ... (set by the launcher)
    mesh = tl.sharding.Mesh({"data": dist.process_count()})
    P = tl.sharding.PartitionSpec
    step = tl.jit(train_step, mesh=mesh, in_shardings=(P(), P(), P("data")), out_shardings=(P(), P(), P()))
    for x_local, y_local in my_shard_of_each_batch:    # rows [i*B/n, (i+1)*B/n) of every global batch of B
        batch = dist.global_array((x_local, y_local), mesh, P("data"))
        model, opt_state, loss = step(model, opt_state, batch)

``initialize`` joins the run (process 0 starts the coordination service; the
PJRT client then spans every process's devices, with collectives through gloo
on the CPU; NCCL on GPUs through the same runtime, untested here). ``tl.jit``
with a ``mesh`` compiles one program for the global mesh (Shardy annotations,
XLA's SPMD partitioner); every process runs it on its own devices and feeds its
own shard (``global_array``). Gradients are all-reduced inside the program by
the partitioner: a data-parallel step is the single-process step with its batch
sharded. ``fsdp_shardings`` shards parameters and optimizer state over a mesh
axis (FSDP) and ``put`` places them (the same value in every process, each
keeping its shards); ``save_sharded``/``load_sharded`` write and read
checkpoints whose shards each process writes itself. A ``tl.capture`` step runs
across processes the same way: ``tl.capture(model, batch, loss_fn, mesh=mesh,
in_shardings=(P(), P("data")))`` gives the loss (replicated) and the gradients
(sharded as their parameters) of the global batch.

Failures: a collective whose peer process is gone raises ``DistributedError``
at once; a mismatch of program or shapes across processes is refused by name
before compiling; outside a collective, the runtime's heartbeat stops the
others within ``heartbeat_timeout`` seconds (jaxlib's message). A run that
failed exits without waiting for the others.
"""
from __future__ import annotations

from .._runtime.distributed import ENV
from ._arrays import fsdp_shardings, gather, global_array, local_nbytes, put
from .checkpoint import load_sharded, save_sharded


def initialize(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None,
               *, heartbeat_timeout: int = 10, init_timeout: int = 60, timeout: float = 120.0) -> None:
    """Join a run of ``num_processes`` processes, before this process's first ``tl.jit`` call.

    Args:
      coordinator: ``"host:port"`` of process 0 (which starts the coordination
        service there); default ``$TLALOC_COORDINATOR_ADDRESS``, else torchrun's
        ``$MASTER_ADDR:$MASTER_PORT``.
      num_processes: default ``$TLALOC_NUM_PROCESSES``, else ``$WORLD_SIZE``.
      process_id: this process, ``0 <= process_id < num_processes``; default
        ``$TLALOC_PROCESS_ID``, else ``$RANK``.
      heartbeat_timeout: seconds without a heartbeat after which the runtime
        declares a process dead and stops the others.
      init_timeout: seconds to wait for every process to join.
      timeout: seconds to wait for the others at an agreement (before each
        compile), a barrier, or the end of the run (every process waits for the
        others at exit).

    Raises:
      ArgumentError: a value missing or malformed, a second ``initialize`` with
        other values, or a call after the PJRT client was created.
      DistributedError: the coordination service cannot start (port in use), or
        this process finds no coordinator within ``init_timeout``. (A run whose
        other processes never join ends after ``init_timeout`` with jaxlib's
        message: its connect stops the process rather than raising.)
    """
    from .._runtime import distributed as rt
    rt.initialize(coordinator, num_processes, process_id, heartbeat_timeout=heartbeat_timeout,
                  init_timeout=init_timeout, timeout=timeout)


def is_initialized() -> bool:
    """Whether this process joined a run with ``initialize``."""
    from .._runtime.distributed import group
    return group() is not None


def process_index() -> int:
    """This process's id in the run (0 without ``initialize``)."""
    from .._runtime.distributed import group
    g = group()
    return 0 if g is None else g.process_id


def process_count() -> int:
    """The number of processes in the run (1 without ``initialize``)."""
    from .._runtime.distributed import group
    g = group()
    return 1 if g is None else g.num_processes


def shutdown() -> None:
    """Leave the run now (it happens at exit otherwise): after a clean run wait until every
    process gets here, then disconnect; after a failure, exit the process at once (status 1)."""
    from .._runtime.distributed import shutdown as _shutdown
    _shutdown()


__all__ = ["initialize", "is_initialized", "process_index", "process_count", "shutdown", "global_array", "put", "gather",
           "local_nbytes", "fsdp_shardings", "save_sharded", "load_sharded", "ENV"]
