"""Global arrays of a multi-process run: built from each process's shard, gathered, measured.

A *global array* is one jax array whose shards live on the devices of every
process; ``tl.jit`` programs with a ``mesh`` take and return them. Each process
holds (and feeds) only its own shards.
"""
from __future__ import annotations

import numpy as np

from .. import _pytree
from ..errors import ArgumentError
from ..sharding import Mesh, PartitionSpec, expand, resolve


def jax_sharding(mesh: Mesh, spec):
    """The ``jax.sharding.NamedSharding`` of ``spec`` on ``mesh`` (the run's devices in mesh order)."""
    import jax
    from .._runtime.pjrt import client, has_platform
    from .._runtime.spmd import mesh_devices
    if not isinstance(mesh, Mesh):
        raise ArgumentError(f"mesh must be a tl.sharding.Mesh, got {type(mesh).__name__}")
    spec = PartitionSpec() if spec is None else spec
    if not isinstance(spec, PartitionSpec):
        raise ArgumentError(f"spec must be a tl.sharding.PartitionSpec (or None: replicated), got {spec!r}")
    for e in spec:
        for a in ((e,) if isinstance(e, str) else (e or ())):
            if a not in mesh.axes:
                raise ArgumentError(f"spec {spec!r}: mesh axis {a!r} is not in {mesh!r}")
    platform = "cuda" if has_platform("cuda") else "cpu"        # tl.jit's default platform
    devices = mesh_devices(client(platform), mesh, platform)
    grid = np.array([devices[i] for i in mesh.device_ids], dtype=object).reshape(mesh.shape)
    return jax.sharding.NamedSharding(jax.sharding.Mesh(grid, mesh.axis_names), jax.sharding.PartitionSpec(*spec))


def global_array(local, mesh: Mesh, spec=None):
    """The global array whose shard in this process is ``local`` (a pytree of arrays: each leaf).

    Along every axis that ``spec`` splits over mesh axes spanning processes, the
    global array is the processes' ``local`` arrays concatenated in process
    order (process ``i`` feeds rows ``[i*B/n, (i+1)*B/n)`` of a batch of ``B``
    split over ``n`` processes); along the other axes every process passes the
    whole value. With one process it is ``local`` placed on the mesh.

    Args:
      local: an array (or a pytree of arrays), this process's part.
      mesh: the ``tl.sharding.Mesh`` of the run (every process's devices).
      spec: a ``PartitionSpec`` (``P("data")``: split the first axis) or ``None``
        (replicated: every process passes the same value), for every leaf; or a
        pytree prefix of ``local`` holding them, as ``tl.jit``'s ``in_shardings``.

    Returns:
      Device arrays (jax ``Array``) with the global shapes, in ``local``'s structure.

    Raises:
      ArgumentError: a spec naming an axis not in the mesh, a mesh without every
        device of the run, or a local shape that does not split evenly.
      ShapeError: a spec with more entries than its array has axes.
    """
    import jax
    leaves, tree = _pytree.flatten(local)
    specs = expand(spec, tree, "global_array: spec")
    out = []
    for k, (leaf, s) in enumerate(zip(leaves, specs)):
        arr = np.asarray(leaf)
        where = "global_array" if tree.kind == "leaf" else f"global_array (leaf {k})"
        resolve(mesh, s, arr.shape, None, where)              # names a bad axis or rank
        try:
            out.append(jax.make_array_from_process_local_data(jax_sharding(mesh, s), arr))
        except ValueError as e:
            raise ArgumentError(f"{where}: this process's part {arr.dtype}{list(arr.shape)} does not fit {s!r} on "
                                f"{mesh!r}: {str(e).splitlines()[0]}") from None
    return _pytree.unflatten(tree, out)


def put(value, mesh: Mesh, spec=None):
    """``value`` (a pytree of arrays, the same in every process) as global arrays placed with
    ``spec``: each process keeps only its shards (the model and optimizer state at the start
    of an FSDP run). Every process must pass the same value; that is checked (a hash of the
    values, compared across processes).

    Args:
      value: an array or a pytree of arrays, whole, the same in every process.
      mesh: the ``tl.sharding.Mesh`` of the run.
      spec: a ``PartitionSpec`` or ``None`` (replicated) for every leaf, or a pytree
        prefix of ``value`` holding them (``fsdp_shardings(value, mesh)``).

    Raises:
      ArgumentError: a spec that does not fit (see ``global_array``).
      DistributedError: the processes passed different values.
    """
    import hashlib
    import jax
    from .._runtime.distributed import agree
    leaves, tree = _pytree.flatten(value)
    specs = expand(spec, tree, "put: spec")
    arrays = [np.asarray(leaf) for leaf in leaves]
    digests = [hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest() for a in arrays]
    agree("put", "put", hashlib.sha256("".join(digests).encode()).hexdigest(),
          [f"leaf {k}: {a.dtype}{list(a.shape)} sha256 {d[:12]}" for k, (a, d) in enumerate(zip(arrays, digests))],
          "put places one value the same in every process; give each process's own part to global_array instead")
    out = []
    for k, (a, s) in enumerate(zip(arrays, specs)):
        resolve(mesh, s, a.shape, None, "put" if tree.kind == "leaf" else f"put (leaf {k})")
        out.append(jax.device_put(a, jax_sharding(mesh, s)))
    return _pytree.unflatten(tree, out)


def gather(tree):
    """Every leaf of ``tree`` as a whole NumPy array in every process (global arrays are
    all-gathered across processes by an XLA program; other leaves pass through ``np.asarray``)."""
    leaves, td = _pytree.flatten(tree)
    spread = [k for k, x in enumerate(leaves)
              if not (getattr(x, "is_fully_addressable", True) or getattr(x, "is_fully_replicated", False))]
    out = list(leaves)
    if spread:                          # one program for all of them: XLA all-gathers, each process gets all
        import jax
        from jax._src.sharding_impls import GSPMDSharding
        xs = [leaves[k] for k in spread]
        replicated = tuple(GSPMDSharding.get_replicated(x.sharding._device_assignment) for x in xs)
        for k, y in zip(spread, jax.jit(lambda *a: a, out_shardings=replicated)(*xs)):
            out[k] = y
    return _pytree.unflatten(td, [np.asarray(x) for x in out])


def local_nbytes(tree) -> int:
    """Bytes of ``tree``'s arrays held by this process: each global array's shards on this
    process's devices (each device counted once), and the whole of every other array."""
    total = 0
    for x in _pytree.leaves(tree):
        shards = getattr(x, "addressable_shards", None)
        if shards is None:
            total += np.asarray(x).nbytes
        else:
            total += sum(s.data.nbytes for s in shards)
    return total


def fsdp_shardings(tree, mesh: Mesh, axis: str = "data"):
    """FSDP shardings for ``tree`` (a model, an optimizer state): a pytree of ``PartitionSpec``
    with ``tree``'s structure, splitting each array over mesh axis ``axis`` along its largest
    dimension that ``axis`` divides (the first of equal ones); arrays with none (scalars,
    odd sizes) are replicated. Give it to ``tl.jit`` as ``in_shardings`` and ``out_shardings``
    so parameters and optimizer state stay sharded from step to step: each process then
    holds ``1 / mesh.axes[axis]`` of them, and XLA gathers each weight where it is used.

    Raises:
      ArgumentError: ``axis`` is not an axis of ``mesh``.
    """
    if axis not in mesh.axes:
        raise ArgumentError(f"fsdp_shardings: axis {axis!r} is not in {mesh!r}")
    n = mesh.axes[axis]
    leaves, td = _pytree.flatten(tree)
    specs = []
    for x in leaves:
        shape = tuple(getattr(x, "shape", np.shape(x)))
        dims = [d for d in sorted(range(len(shape)), key=lambda d: -shape[d]) if shape[d] % n == 0 and shape[d] >= n]
        if not dims:
            specs.append(PartitionSpec())
        else:
            specs.append(PartitionSpec(*[axis if d == dims[0] else None for d in range(len(shape))]))
    return _pytree.unflatten(td, specs)


__all__ = ["global_array", "put", "gather", "local_nbytes", "fsdp_shardings", "jax_sharding"]
