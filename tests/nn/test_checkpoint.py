"""Checkpoints: one safetensors file, bit-exact round trip, bit-identical
resume, atomic writes, and structure checks on load."""
from __future__ import annotations

import os

import numpy as np
import pytest
from safetensors.numpy import load_file

import tlaloc as tl
from tlaloc import nn, optim
from tlaloc import random as tr
from tlaloc.errors import ArgumentError

from .models import TinyLM


def _mlp(key=0):
    k1, k2 = tr.split(tr.key(key))
    return nn.Sequential(nn.Linear(6, 16, key=k1), nn.gelu, nn.Dropout(0.25), nn.Linear(16, 3, key=k2))


def _loss(model, batch):
    x, y, key = batch
    return nn.cross_entropy(model(x, key=key), y)


def _batch(step):
    rng = np.random.default_rng(1000 + step)               # the data of step k depends on k only
    x = rng.standard_normal((8, 6)).astype(np.float32)
    return x, rng.integers(0, 3, 8), tr.fold_in(tr.key(7), step)


def _train(model, opt, state, start, stop, step_fn):
    losses = []
    for k in range(start, stop):
        loss, grads = step_fn.run(model, _batch(k))
        grads, _ = optim.clip_by_global_norm(grads, 1.0)
        model, state = opt.update(model, grads, state)
        losses.append(np.asarray(loss).tobytes())
    return model, state, losses


def _bits(tree):
    return [(np.asarray(x).dtype.str, np.asarray(x).shape, np.asarray(x).tobytes()) for x in tl._pytree.leaves(tree)]


def test_round_trip_is_bit_exact(tmp_path):
    model = TinyLM(key=3, norm="rmsnorm", mlp="swiglu")
    opt = optim.AdamW(lr=1e-3)
    state = opt.init(model)
    state = state.__class__(np.asarray(5, np.int32), tl._pytree.tree_map(lambda a: a + 0.5, state.mu), state.nu)
    path = tmp_path / "ck.safetensors"
    tl.save_checkpoint(path, model, state, step=123)
    m2, s2, step = tl.load_checkpoint(path, like=(TinyLM(key=99, norm="rmsnorm", mlp="swiglu"), opt.init(model)))
    assert step == 123
    assert type(m2) is TinyLM and type(s2) is type(state)
    assert _bits(m2) == _bits(model) and _bits(s2) == _bits(state)
    # the file is plain safetensors with readable keys; no pickle anywhere
    tensors = load_file(str(path))
    assert "model.blocks.0.attn.q_proj.weight" in tensors and "opt_state.mu.head.weight" in tensors
    assert "opt_state.count" in tensors and tensors["opt_state.count"].shape == ()
    np.testing.assert_array_equal(tensors["model.head.weight"], model.head.weight)
    import tlaloc.checkpoint_io as ck
    src = open(ck.__file__).read()
    assert "import pickle" not in src and "allow_pickle" not in src


def test_resumed_run_continues_bit_identically(tmp_path):
    opt = optim.AdamW(lr=optim.cosine_with_warmup(1e-2, 3, 10), weight_decay=0.05)
    model = _mlp()
    step_fn = tl.capture(model, _batch(0), _loss)
    full, full_state, full_losses = _train(model, opt, opt.init(model), 0, 10, step_fn)

    half, half_state, first = _train(model, opt, opt.init(model), 0, 4, step_fn)
    path = tmp_path / "run.safetensors"
    tl.save_checkpoint(path, half, half_state, step=4)
    fresh = _mlp(key=42)                                   # different weights: everything comes from the file
    m, s, step = tl.load_checkpoint(path, like=(fresh, opt.init(fresh)))
    assert step == 4
    resumed, resumed_state, rest = _train(m, opt, s, step, 10, step_fn)
    assert first + rest == full_losses
    assert _bits(resumed) == _bits(full)
    assert _bits(resumed_state) == _bits(full_state)


def test_control_resume_without_optimizer_state_differs(tmp_path):
    """Restarting Adam's moments (only the model saved) does not continue the run: the
    bit-identity above really depends on the optimizer state round trip."""
    opt = optim.Adam(lr=1e-2)
    model = _mlp()
    step_fn = tl.capture(model, _batch(0), _loss)
    full, _, _ = _train(model, opt, opt.init(model), 0, 6, step_fn)
    half, _, _ = _train(model, opt, opt.init(model), 0, 3, step_fn)
    again, _, _ = _train(half, opt, opt.init(half), 3, 6, step_fn)
    assert _bits(again) != _bits(full)


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ck.safetensors"
    model = _mlp()
    tl.save_checkpoint(path, model, None, step=1)
    before = path.read_bytes()

    def crash(*a, **k):
        raise OSError("disk full (simulated)")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        tl.save_checkpoint(path, _mlp(key=5), None, step=2)
    monkeypatch.undo()
    assert path.read_bytes() == before                     # the old file is intact
    assert sorted(os.listdir(tmp_path)) == ["ck.safetensors"]   # and no temporary file is left


def test_crash_during_write_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "ck.safetensors"
    tl.save_checkpoint(path, _mlp(), None, step=1)
    before = path.read_bytes()
    real_fsync = os.fsync

    def crash(fd):
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        tl.save_checkpoint(path, _mlp(key=5), None, step=2)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["ck.safetensors"]


def test_structure_mismatch_is_refused(tmp_path):
    path = tmp_path / "ck.safetensors"
    model = nn.MultiHeadAttention(16, 4, 2, key=0)
    opt = optim.Adam()
    tl.save_checkpoint(path, model, opt.init(model), step=3)
    other = nn.MultiHeadAttention(16, 4, 4, key=0)         # same keys, different shapes and static field
    with pytest.raises(ArgumentError, match="out_features=8"):       # the first difference is shown
        tl.load_checkpoint(path, like=(other, opt.init(other)))
    sgd = optim.SGD(momentum=0.9)
    with pytest.raises(ArgumentError, match="opt_state"):
        tl.load_checkpoint(path, like=(model, sgd.init(model)))
    f64 = nn.astype(model, np.float64)
    with pytest.raises(ArgumentError, match="float32"):
        tl.load_checkpoint(path, like=(f64, opt.init(f64)))
    m, s, step = tl.load_checkpoint(path, like=model)      # the model alone
    assert s is None and step == 3 and _bits(m) == _bits(model)


def test_not_a_checkpoint_is_refused(tmp_path):
    from safetensors.numpy import save_file
    path = tmp_path / "plain.safetensors"
    save_file({"w": np.zeros(3, np.float32)}, str(path))
    with pytest.raises(ArgumentError, match="not a tlaloc checkpoint"):
        tl.load_checkpoint(path, like=_mlp())


def test_file_mode_follows_the_umask(tmp_path):
    path = tmp_path / "ck.safetensors"
    old = os.umask(0o022)
    try:
        tl.save_checkpoint(path, _mlp(), None)
    finally:
        os.umask(old)
    assert (path.stat().st_mode & 0o777) == 0o644


def test_colliding_paths_are_refused(tmp_path):
    # regression: {"a.b": x, "a": {"b": y}} once saved one tensor and silently lost the other
    from tlaloc import ArgumentError, save_checkpoint
    with pytest.raises(ArgumentError, match="two leaves have the path"):
        save_checkpoint(tmp_path / "c.safetensors", {"a.b": np.zeros(2), "a": {"b": np.ones(2)}})
    with pytest.raises(ArgumentError, match="two leaves have the path"):
        save_checkpoint(tmp_path / "c.safetensors", {1: np.zeros(2), "1": np.ones(2)})
    with pytest.raises(ArgumentError, match="step must be an int"):
        save_checkpoint(tmp_path / "c.safetensors", {"w": np.zeros(2)}, step=2.7)


def test_bfloat16_round_trip_is_bit_exact(tmp_path):
    """Regression: a model holding bfloat16 arrays saved but did not load (safetensors.numpy has no BF16)."""
    import ml_dtypes
    bf16 = ml_dtypes.bfloat16
    model = nn.astype(nn.MLP((5, 7, 3), key=3), bf16)
    opt = optim.AdamW(lr=1e-3)
    state = opt.init(model)
    extra = {"w": (np.arange(6).reshape(2, 3) * -0.37).astype(bf16), "n": np.arange(3, dtype=np.int32)}
    path = tmp_path / "bf16.safetensors"
    tl.save_checkpoint(path, (model, extra), state, step=4)
    (m2, e2), s2, step = tl.load_checkpoint(path, ((model, extra), state))
    assert step == 4
    from tlaloc._pytree import leaves
    for a, b in zip(leaves((model, extra, state)), leaves((m2, e2, s2))):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    assert m2.layers[0].weight.dtype == bf16


def test_bfloat16_file_against_float32_like_is_refused(tmp_path):
    """Control: the dtype is checked, not converted."""
    import ml_dtypes
    model = nn.Linear(3, 2, key=0)
    path = tmp_path / "bf16.safetensors"
    tl.save_checkpoint(path, nn.astype(model, ml_dtypes.bfloat16))
    with pytest.raises(ArgumentError, match="file has bfloat16.*like has float32"):
        tl.load_checkpoint(path, model)


def test_unloadable_dtypes_are_refused_before_writing(tmp_path):
    import ml_dtypes
    path = tmp_path / "ck.safetensors"
    good = {"w": np.ones(3, np.float32)}
    tl.save_checkpoint(path, good, step=1)
    for bad in (np.ones(2, np.complex64), np.ones(2, ml_dtypes.float8_e4m3fn), np.array(["a"]), "text"):
        with pytest.raises(ArgumentError, match="tlaloc checkpoints do not store"):
            tl.save_checkpoint(path, {"w": np.ones(3, np.float32), "x": bad})
    assert tl.load_checkpoint(path, like=good)[2] == 1                   # the good file is untouched
    be = {"w": np.arange(3, dtype=">f4")}                                # non-native byte order still saves
    tl.save_checkpoint(path, be)
    np.testing.assert_array_equal(load_file(path)["model.w"], np.arange(3, dtype=np.float32))


def test_overwrite_keeps_permissions_and_symlinks(tmp_path):
    path = tmp_path / "ck.safetensors"
    tl.save_checkpoint(path, {"w": np.ones(2)})
    os.chmod(path, 0o600)
    tl.save_checkpoint(path, {"w": np.zeros(2)})
    assert os.stat(path).st_mode & 0o777 == 0o600                       # before: widened to the umask's 0o644
    link = tmp_path / "latest.safetensors"
    os.symlink(path, link)
    tl.save_checkpoint(link, {"w": np.full(2, 7.0)})
    assert os.path.islink(link)
    np.testing.assert_array_equal(load_file(path)["model.w"], np.full(2, 7.0))


def test_bad_paths_and_damaged_files_are_named(tmp_path):
    like = {"w": np.ones(4, np.float32)}
    with pytest.raises(ArgumentError, match="does not exist"):
        tl.save_checkpoint(tmp_path / "nope" / "ck.safetensors", like)
    with pytest.raises(ArgumentError, match="is a directory"):
        tl.save_checkpoint(tmp_path, like)
    path = tmp_path / "ck.safetensors"
    tl.save_checkpoint(path, like)
    raw = path.read_bytes()
    (tmp_path / "cut").write_bytes(raw[:-1])
    with pytest.raises(ArgumentError, match="truncated or damaged"):
        tl.load_checkpoint(tmp_path / "cut", like=like)
    (tmp_path / "list").write_bytes((4).to_bytes(8, "little") + b"[1] ")
    with pytest.raises(ArgumentError, match="not a tlaloc checkpoint"):
        tl.load_checkpoint(tmp_path / "list", like=like)


def test_like_a_model_that_is_a_2_tuple_or_a_pair_for_a_model_only_file(tmp_path):
    """A 2-tuple `like` is (model, opt_state); a model that is itself a 2-tuple, saved alone, was
    refused with `opt_state: file None, like Linear(...` and a truncated model excerpt."""
    path = tmp_path / "pair.safetensors"
    pair = (nn.Linear(3, 2, key=0), nn.Linear(2, 1, key=1))
    tl.save_checkpoint(path, pair, step=2)
    m, s, step = tl.load_checkpoint(path, like=pair)             # only one reading fits the file
    assert s is None and step == 2 and _bits(m) == _bits(pair) and type(m) is tuple
    m, s, _ = tl.load_checkpoint(path, like=(pair, None))         # the explicit form
    assert s is None and _bits(m) == _bits(pair)
    # a model-only file read with an optimizer state: says which root, what the file holds, the fix
    lin = pair[0]
    tl.save_checkpoint(path, lin)
    opt = optim.AdamW(lr=1e-3)
    with pytest.raises(ArgumentError, match=r"`like` is a 2-tuple, read as \(model, opt_state\).*\n"
                                            r"  opt_state: the file holds no optimizer state, like has "
                                            r"AdamState\(count, mu, nu\); pass like=model \(or like=\(model, None\)\)"):
        tl.load_checkpoint(path, like=(lin, opt.init(lin)))
    # (model, None) reads the model alone from a file that also holds an optimizer state
    tl.save_checkpoint(path, lin, opt.init(lin), step=5)
    m, s, step = tl.load_checkpoint(path, like=(lin, None))
    assert s is None and step == 5 and _bits(m) == _bits(lin)
    with pytest.raises(ArgumentError, match=r"it looks swapped: pass like=\(model, opt_state\), the model first"):
        tl.load_checkpoint(path, like=(opt.init(lin), lin))


def test_structure_mismatch_names_the_path_and_both_values(tmp_path):
    path = tmp_path / "seq.safetensors"
    model = nn.Sequential(nn.Linear(2, 3, key=0), nn.relu, nn.Linear(3, 4, key=1))
    tl.save_checkpoint(path, model)
    cases = [
        (nn.Sequential(nn.Linear(2, 3, key=0), nn.relu, nn.Linear(3, 5, key=1)),
         r"\n  model\.layers\.2: file has out_features=4, like has out_features=5$"),
        (nn.Sequential(nn.Linear(2, 3, key=0), nn.relu), r"\n  model\.layers: file has 3 items, like has 2$"),
        (nn.Sequential(nn.Linear(2, 3, key=0), nn.gelu, nn.Linear(3, 4, key=1)),
         r"\n  model\.layers\.1: file has fn=relu, like has fn=gelu$"),
        (nn.MLP((2, 3, 4), key=0), r"\n  model: file has Sequential\(layers\), like has MLP\(layers, activation=relu\)$"),
    ]
    for like, pattern in cases:
        with pytest.raises(ArgumentError, match=pattern):
            tl.load_checkpoint(path, like=like)
    tl.save_checkpoint(path, {"w": np.ones(3), "b": {"x": np.ones(2)}})
    with pytest.raises(ArgumentError, match=r"\n  model: file has keys \['b', 'w'\], like has \['c', 'w'\]$"):
        tl.load_checkpoint(path, like={"w": np.ones(3), "c": {"x": np.ones(2)}})
