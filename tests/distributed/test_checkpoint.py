"""Sharded checkpoints in one process: round trips, the manifest as commit point, refusals,
and the explicit reshard (stored shards assembled into the shard a process needs).
Two processes writing one checkpoint: test_multiprocess.py."""
import json
import os

import numpy as np
import pytest

pytest.importorskip("jax", reason="tlaloc.distributed runs on jaxlib's distributed runtime")

import tlaloc as tl  # noqa: E402
from tlaloc import _pytree, nn, optim  # noqa: E402
from tlaloc import distributed as dist  # noqa: E402
from tlaloc.distributed import checkpoint as ckpt  # noqa: E402

P = tl.sharding.PartitionSpec


def _trained(seed=0):
    """A small model and an AdamW state with nonzero moments (not just the initial zeros)."""
    model = nn.MLP((8, 6, 4), key=seed)
    opt = optim.AdamW(lr=1e-2)
    state = opt.init(model)
    grads = _pytree.tree_map(lambda w: np.full_like(w, 0.5 + seed), model)
    model, state = opt.update(model, grads, state)
    return _pytree.tree_map(np.asarray, model), _pytree.tree_map(np.asarray, state)


def _equal(a, b) -> bool:
    la, lb = _pytree.leaves(a), _pytree.leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) and np.asarray(x).dtype ==
                                      np.asarray(y).dtype for x, y in zip(la, lb))


def _shard_files(path):
    return sorted(f for f in os.listdir(path) if f.startswith("shard-"))


def test_round_trip_is_exact(tmp_path):
    model, state = _trained()
    dist.save_sharded(tmp_path / "c", model, state, step=7, metadata={"run": "a"})
    m2, s2, step = dist.load_sharded(tmp_path / "c", (model, state))
    assert step == 7 and _equal(m2, model) and _equal(s2, state)
    manifest = ckpt.read_manifest(tmp_path / "c")
    assert manifest["num_processes"] == 1 and manifest["metadata"] == {"run": "a"}
    assert list(manifest["files"]) == _shard_files(tmp_path / "c")
    only_model, none, _ = dist.load_sharded(tmp_path / "c", model)
    assert none is None and _equal(only_model, model)


def test_restore_onto_a_mesh_gives_global_arrays(tmp_path):
    model, state = _trained()
    dist.save_sharded(tmp_path / "c", model, state, step=1)
    mesh = tl.sharding.Mesh({"data": 1})
    specs = (dist.fsdp_shardings(model, mesh), dist.fsdp_shardings(state, mesh))
    m2, s2, _ = dist.load_sharded(tmp_path / "c", (model, state), mesh=mesh, shardings=specs)
    assert all(hasattr(x, "sharding") for x in _pytree.leaves((m2, s2)))
    assert _equal(m2, model) and _equal(s2, state)


def test_a_second_save_replaces_the_first_and_removes_its_files(tmp_path):
    (m1, s1), (m2, s2) = _trained(0), _trained(1)
    dist.save_sharded(tmp_path / "c", m1, s1, step=1)
    first = _shard_files(tmp_path / "c")
    dist.save_sharded(tmp_path / "c", m2, s2, step=2)
    assert len(_shard_files(tmp_path / "c")) == 1 and _shard_files(tmp_path / "c") != first
    m, s, step = dist.load_sharded(tmp_path / "c", (m1, s1))
    assert step == 2 and _equal(m, m2) and _equal(s, s2)


def test_a_save_that_dies_before_its_manifest_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    """The manifest is the commit point: shards written without it change nothing."""
    (m1, s1), (m2, s2) = _trained(0), _trained(1)
    dist.save_sharded(tmp_path / "c", m1, s1, step=1)
    write = ckpt._atomic_write

    def dies_at_the_manifest(path, data):
        if path.endswith(ckpt.MANIFEST):
            raise OSError("disk full (simulated)")
        write(path, data)
    monkeypatch.setattr(ckpt, "_atomic_write", dies_at_the_manifest)
    with pytest.raises(OSError, match="simulated"):
        dist.save_sharded(tmp_path / "c", m2, s2, step=2)
    assert len(_shard_files(tmp_path / "c")) == 2             # the new shards are there, unreferenced
    m, s, step = dist.load_sharded(tmp_path / "c", (m1, s1))
    assert step == 1 and _equal(m, m1) and _equal(s, s1)
    monkeypatch.setattr(ckpt, "_atomic_write", write)
    dist.save_sharded(tmp_path / "c", m2, s2, step=3)
    assert len(_shard_files(tmp_path / "c")) == 1             # the next save clears them


def test_a_damaged_file_is_refused_by_name(tmp_path):
    model, state = _trained()
    dist.save_sharded(tmp_path / "c", model, state)
    name = _shard_files(tmp_path / "c")[0]
    data = bytearray((tmp_path / "c" / name).read_bytes())
    data[-1] ^= 1
    (tmp_path / "c" / name).write_bytes(bytes(data))
    with pytest.raises(tl.ArgumentError, match=f"{name}' does not match the sha256 in manifest.json"):
        dist.load_sharded(tmp_path / "c", (model, state))


def test_another_structure_shape_or_dtype_is_refused_listing_each(tmp_path):
    model, state = _trained()
    dist.save_sharded(tmp_path / "c", model, state)
    with pytest.raises(tl.ArgumentError, match="model: the structure differs from `like`"):
        dist.load_sharded(tmp_path / "c", nn.MLP((8, 5, 4), key=0))
    with pytest.raises(tl.ArgumentError, match=r"model.layers.0.weight: checkpoint has float32\[6, 8\], like has "
                                               r"float64\[6, 8\]"):
        dist.load_sharded(tmp_path / "c", nn.astype(model, np.float64))
    with pytest.raises(tl.ArgumentError, match="has no manifest.json; it is not a sharded checkpoint"):
        dist.load_sharded(tmp_path, model)
    with pytest.raises(tl.ArgumentError, match="shardings name mesh axes; pass the mesh too"):
        dist.load_sharded(tmp_path / "c", model, shardings=P("data"))


def _two_shard_checkpoint(tmp_path):
    """A (4, 3) array stored as rows 0:2 and 2:4 in two files, as two processes write it."""
    from safetensors.numpy import save
    import hashlib
    a = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    entry = {"shape": [4, 3], "dtype": "float32", "shards": []}
    files = {}
    for k, (lo, hi) in enumerate([(0, 2), (2, 4)]):
        name, key = f"shard-x-{k:05d}-of-00002.safetensors", f"w[{lo}:{hi},0:3]"
        data = save({key: a[lo:hi]})
        (tmp_path / name).write_bytes(data)
        files[name] = hashlib.sha256(data).hexdigest()
        entry["shards"].append({"file": name, "key": key, "box": [[lo, hi], [0, 3]]})
    return a, entry, ckpt._Reader(str(tmp_path), {"files": files})


def test_reshard_assembles_a_shard_from_the_stored_ones_only_when_asked(tmp_path):
    a, entry, reader = _two_shard_checkpoint(tmp_path)
    assert np.array_equal(reader.block("w", entry, ((2, 4), (0, 3)), reshard=False), a[2:4])     # a stored shard
    with pytest.raises(tl.ArgumentError, match=r"`w` is stored in shards \['\[0:2,0:3\]', '\[2:4,0:3\]'\] but this "
                                               r"process needs \[1:3,0:2\]; that reshards it: pass reshard=True"):
        reader.block("w", entry, ((1, 3), (0, 2)), reshard=False)
    assert np.array_equal(reader.block("w", entry, ((1, 3), (0, 2)), reshard=True), a[1:3, 0:2])
    assert np.array_equal(reader.block("w", entry, ((0, 4), (0, 3)), reshard=True), a)
    entry["shards"].pop()
    with pytest.raises(tl.ArgumentError, match="cover 6 of the 12 elements of \\[0:4,0:3\\]; the checkpoint is "
                                               "incomplete"):
        reader.block("w", entry, ((0, 4), (0, 3)), reshard=True)


def test_a_checkpoint_of_more_processes_is_refused_without_reshard(tmp_path):
    model, state = _trained()
    dist.save_sharded(tmp_path / "c", model, state)
    manifest_path = tmp_path / "c" / ckpt.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["num_processes"] = 4
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(tl.ArgumentError, match="written by 4 processes, restoring into 1; .* pass reshard=True"):
        dist.load_sharded(tmp_path / "c", (model, state))
    m, s, _ = dist.load_sharded(tmp_path / "c", (model, state), reshard=True)
    assert _equal(m, model) and _equal(s, state)
