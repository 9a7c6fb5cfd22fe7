"""Sharded checkpoints: every process writes its own shards; one manifest ties them together.

    dist.save_sharded("run/ckpt", model, opt_state, step=25)
    model, opt_state, step = dist.load_sharded("run/ckpt", like=(model, opt_state), mesh=mesh,
                                               shardings=(model_specs, opt_specs))

A checkpoint is a directory:

* ``shard-<token>-<i>-of-<n>.safetensors``, one per process ``i``: the shards of
  every array that live on process ``i``'s devices (one copy of each: a shard
  replicated on several devices is written by the holder of replica 0). Keys are
  the flattened pytree path and the shard's box, ``model.layers.0.weight[0:32,0:256]``.
* ``manifest.json``: the format, step, process count, the structure of the model
  and optimizer state (as ``tl.save_checkpoint`` describes them), every array's
  global shape, dtype and shards (file, key, box), and the sha256 of every file.

The manifest is the commit point. Shard files carry a fresh token, so they never
overwrite the files of the checkpoint in place; process 0 writes the manifest
(atomically: temporary file, fsync, ``os.replace``) only after every process
has written its file, then deletes the files no manifest names. A crash leaves
the old checkpoint or the new one, never a mix. The directory must be on a file
system every process sees.

A restore whose layout differs from the stored one (another process count, or
target shards that are not stored shards) is refused by name unless
``reshard=True``; then every target shard is assembled from the stored shards
that overlap it, explicitly.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets

import numpy as np

from .. import _pytree
from .. import sharding as _sharding
from .._runtime import distributed as _rt
from ..checkpoint_io import _ROOTS, _atomic_write, _flatten, _load_tensors
from ..errors import ArgumentError

FORMAT = "tlaloc.sharded-checkpoint/1"
MANIFEST = "manifest.json"


def _box(index, shape) -> tuple:
    """A shard's index (a tuple of slices) as ``((start, stop), ...)``."""
    return tuple((s.start or 0, d if s.stop is None else s.stop) for s, d in zip(index, shape))


def _box_text(box) -> str:
    return "[" + ",".join(f"{a}:{b}" for a, b in box) + "]"


def _local_shards(x):
    """``[(box, data)]``: the shards of ``x`` this process writes (replica 0 of each)."""
    if hasattr(x, "addressable_shards"):
        shape = tuple(x.shape)
        return [(_box(s.index, shape), np.asarray(s.data)) for s in x.addressable_shards if s.replica_id == 0]
    if _rt.group() is not None and _rt.group().process_id != 0:
        return []                                   # a host value: the same everywhere, process 0 writes it
    a = np.asarray(x)
    return [(tuple((0, d) for d in a.shape), a)]


def save_sharded(path, model, opt_state=None, *, step: int = 0, metadata: dict | None = None) -> None:
    """Write ``model`` and ``opt_state`` (pytrees of global or host arrays) to the directory
    ``path``; every process of the run calls it with its own shards, and it returns in every
    process once the manifest is in place.

    Raises:
      ArgumentError: a leaf that is not an array, two leaves with one path, a bad ``step``.
      DistributedError: another process did not take part within the run's timeout.
    """
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise ArgumentError(f"save_sharded: step must be an int, got {step!r}")
    g = _rt.group()
    pid, n = (0, 1) if g is None else (g.process_id, g.num_processes)
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    token = _rt.exchange("save_sharded: token", secrets.token_hex(4))[0]     # process 0's
    name = f"shard-{token}-{pid:05d}-of-{n:05d}.safetensors"
    tensors, arrays, structures = {}, {}, {}
    for root, tree in zip(_ROOTS, (model, opt_state)):
        leaves, _, paths, structures[root] = _flatten(root, tree)
        for p, leaf in zip(paths, leaves):
            if p in arrays:
                raise ArgumentError(f"save_sharded: two leaves have the path `{p}`; rename one")
            dtype = np.dtype(leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype)
            if dtype == object:
                raise ArgumentError(f"save_sharded: leaf `{p}` is a {type(leaf).__name__}, not an array")
            arrays[p] = {"shape": list(np.shape(leaf)), "dtype": dtype.name, "shards": []}
            for box, data in _local_shards(leaf):
                key = f"{p}{_box_text(box)}"
                tensors[key] = np.array(data, order="C")          # (keeps 0-d arrays 0-d)
                arrays[p]["shards"].append({"file": name, "key": key, "box": [list(b) for b in box]})
    from safetensors.numpy import save as st_save
    data = st_save(tensors, metadata={"tlaloc.format": FORMAT, "tlaloc.process": str(pid)})
    _atomic_write(os.path.join(path, name), data)
    mine = json.dumps({"file": name, "sha256": hashlib.sha256(data).hexdigest(),
                       "shards": {p: a["shards"] for p, a in arrays.items()}})
    parts = [json.loads(s) for s in _rt.exchange("save_sharded: shards", mine)]
    if pid == 0:
        for p, a in arrays.items():
            a["shards"] = [s for part in parts for s in part["shards"][p]]
        manifest = {"format": FORMAT, "step": int(step), "num_processes": n,
                    "structure": structures, "metadata": {str(k): str(v) for k, v in (metadata or {}).items()},
                    "files": {part["file"]: part["sha256"] for part in parts}, "arrays": arrays}
        _atomic_write(os.path.join(path, MANIFEST), json.dumps(manifest, indent=1, sort_keys=True).encode())
        for old in os.listdir(path):            # the files of earlier checkpoints in this directory
            if old.startswith("shard-") and old.endswith(".safetensors") and old not in manifest["files"]:
                os.unlink(os.path.join(path, old))
    _rt.barrier("save_sharded: manifest written")


def read_manifest(path) -> dict:
    """The manifest of a sharded checkpoint (``ArgumentError`` if ``path`` holds none)."""
    file = os.path.join(os.fspath(path), MANIFEST)
    try:
        with open(file, "rb") as fh:
            manifest = json.loads(fh.read())
    except FileNotFoundError:
        raise ArgumentError(f"load_sharded: {os.fspath(path)!r} has no {MANIFEST}; it is not a sharded "
                            f"checkpoint (or its save did not finish)") from None
    if manifest.get("format") != FORMAT:
        raise ArgumentError(f"load_sharded: {file!r} has format {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


def load_sharded(path, like, *, mesh=None, shardings=None, reshard: bool = False):
    """Read a checkpoint written by ``save_sharded``, each process only its own shards.

    Args:
      path: the checkpoint directory.
      like: ``(model, opt_state)`` (or a model) with the structure, shapes and dtypes to fill.
      mesh: the ``tl.sharding.Mesh`` to place the arrays on (global arrays); ``None``:
        whole NumPy arrays in this process.
      shardings: with ``mesh``, a pytree prefix of ``like`` of ``PartitionSpec``s
        (``None``: replicated), as ``tl.jit``'s ``in_shardings`` takes.
      reshard: allow a layout other than the stored one (another process count, or
        target shards that are not stored shards); each target shard is then
        assembled from the stored shards overlapping it.

    Returns:
      ``(model, opt_state, step)`` (``opt_state`` None when ``like`` is a model alone).

    Raises:
      ArgumentError: not a sharded checkpoint; a structure, shape or dtype that differs
        from ``like`` (all differences listed); a file whose sha256 differs from the
        manifest; another layout without ``reshard=True`` (naming the stored and the
        requested process counts).
    """
    if shardings is not None and mesh is None:
        raise ArgumentError("load_sharded: shardings name mesh axes; pass the mesh too (mesh=tl.sharding.Mesh(...)), "
                            "or neither for whole NumPy arrays")
    manifest = read_manifest(path)
    want_opt = isinstance(like, tuple) and len(like) == 2
    roots = (like[0], like[1]) if want_opt else (like, None)
    n_now = 1 if _rt.group() is None else _rt.group().num_processes
    if manifest["num_processes"] != n_now and not reshard:
        raise ArgumentError(
            f"load_sharded({os.fspath(path)!r}): written by {manifest['num_processes']} processes, restoring into "
            f"{n_now}; that reshards every array: pass reshard=True to assemble the shards this process needs, "
            f"or restore with {manifest['num_processes']} processes")
    reader = _Reader(os.fspath(path), manifest)
    out, problems = [], []
    for k, (root, tree) in enumerate(zip(_ROOTS, roots)):
        if root == "opt_state" and not want_opt:
            out.append(None)
            continue
        leaves, td, paths, structure = _flatten(root, tree)
        if manifest["structure"].get(root) != structure:
            problems.append(f"{root}: the structure differs from `like`:\n    file: "
                            f"{manifest['structure'].get(root)}\n    like: {structure}")
            continue
        spec = None if shardings is None else (shardings[k] if want_opt and isinstance(shardings, tuple)
                                                and not isinstance(shardings, _sharding.PartitionSpec)
                                                else shardings)
        specs = _sharding.expand(spec, td, f"shardings ({root})") if mesh is not None else [None] * len(leaves)
        new = []
        for p, leaf, s in zip(paths, leaves, specs):
            entry = manifest["arrays"].get(p)
            want = (np.dtype(leaf.dtype).name, list(np.shape(leaf)))
            if entry is None:
                problems.append(f"{p}: missing from the checkpoint")
            elif (entry["dtype"], entry["shape"]) != want:
                problems.append(f"{p}: checkpoint has {entry['dtype']}{entry['shape']}, like has {want[0]}{want[1]}")
            else:
                new.append(reader.array(p, entry, mesh, s, reshard))
        if not problems:
            out.append(_pytree.unflatten(td, new))
    if problems:
        raise ArgumentError(f"load_sharded({os.fspath(path)!r}): does not match `like`:\n  " + "\n  ".join(problems))
    return out[0], out[1], int(manifest["step"])


def _dtype(name: str) -> np.dtype:
    """A dtype from its NumPy name (``bfloat16`` through ``ml_dtypes``)."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))


class _Reader:
    """Reads stored shards on demand (each file once, its sha256 checked against the manifest)."""

    def __init__(self, path: str, manifest: dict):
        self.path, self.manifest, self.files = path, manifest, {}

    def tensor(self, file: str, key: str) -> np.ndarray:
        if file not in self.files:
            with open(os.path.join(self.path, file), "rb") as fh:
                raw = fh.read()
            if hashlib.sha256(raw).hexdigest() != self.manifest["files"].get(file):
                raise ArgumentError(f"load_sharded: {os.path.join(self.path, file)!r} does not match the sha256 "
                                    f"in {MANIFEST}: the file changed or is damaged")
            self.files[file] = _load_tensors(raw, file)
        return self.files[file][key]

    def block(self, p: str, entry: dict, box, reshard: bool) -> np.ndarray:
        """The part ``box`` of array ``p``, from the stored shards (one stored shard unless ``reshard``)."""
        stored = [(tuple(map(tuple, s["box"])), s) for s in entry["shards"]]
        exact = [s for b, s in stored if b == tuple(box)]
        if exact:
            return self.tensor(exact[0]["file"], exact[0]["key"])
        if not reshard:
            raise ArgumentError(
                f"load_sharded: `{p}` is stored in shards {[_box_text(b) for b, _ in stored]} but this process needs "
                f"{_box_text(box)}; that reshards it: pass reshard=True, or restore onto the mesh and shardings "
                f"it was saved with")
        out = np.empty([b - a for a, b in box], dtype=_dtype(entry["dtype"]))
        covered = 0
        for b, s in stored:
            lo = [max(x[0], y[0]) for x, y in zip(b, box)]
            hi = [min(x[1], y[1]) for x, y in zip(b, box)]
            if any(h <= l for l, h in zip(lo, hi)):
                continue
            src = tuple(slice(l - x[0], h - x[0]) for l, h, x in zip(lo, hi, b))
            dst = tuple(slice(l - y[0], h - y[0]) for l, h, y in zip(lo, hi, box))
            out[dst] = self.tensor(s["file"], s["key"])[src]
            covered += int(np.prod([h - l for l, h in zip(lo, hi)]))
        if covered != out.size:
            raise ArgumentError(f"load_sharded: the stored shards of `{p}` cover {covered} of the {out.size} "
                                f"elements of {_box_text(box)}; the checkpoint is incomplete")
        return out

    def array(self, p: str, entry: dict, mesh, spec, reshard: bool):
        shape = tuple(entry["shape"])
        if mesh is None:
            return self.block(p, entry, tuple((0, d) for d in shape), reshard)
        import jax
        from ._arrays import jax_sharding
        sharding = jax_sharding(mesh, spec)
        blocks = [jax.device_put(self.block(p, entry, _box(index, shape), reshard), device)
                  for device, index in sharding.addressable_devices_indices_map(shape).items()]
        return jax.make_array_from_single_device_arrays(shape, sharding, blocks)


__all__ = ["save_sharded", "load_sharded", "read_manifest", "FORMAT"]
