"""A manifest cannot point the runtime outside its artifact, and killed exports leave no temp dirs behind."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tlaloc.serving import Engine
from tlaloc.serving.errors import ArtifactError
from tlaloc.serving.export.artifact import _OWNER, _write_atomically
from tlaloc.serving.manifest import MANIFEST, read_manifest


def _with_weights_at(artifact_dir, tmp_path, name):
    art = tmp_path / "art"
    shutil.copytree(artifact_dir, art)
    m = json.loads((art / MANIFEST).read_text())
    old = m["weights"]["file"]
    m["weights"]["file"] = name
    m["files"][name] = m["files"].pop(old)
    (art / MANIFEST).write_text(json.dumps(m))
    return art


@pytest.mark.parametrize("name", ["/etc/hostname", "../outside.safetensors", "programs/../../x", "a\\b"])
def test_a_weights_path_outside_the_artifact_is_refused_by_name(artifact, tmp_path, name):
    art = _with_weights_at(artifact("llama"), tmp_path, name)
    with pytest.raises(ArtifactError, match="only relative paths inside the artifact"):
        read_manifest(str(art), verify=False)
    with pytest.raises(ArtifactError, match="only relative paths inside the artifact"):
        Engine(art, verify=False)


def test_a_symlink_out_of_the_artifact_is_refused(artifact, tmp_path):
    art = _with_weights_at(artifact("llama"), tmp_path, "link.safetensors")
    outside = tmp_path / "outside.safetensors"
    shutil.copy(art / "weights.safetensors", outside)
    os.symlink(outside, art / "link.safetensors")
    with pytest.raises(ArtifactError, match="leads outside the artifact directory"):
        Engine(art, verify=False)


def test_stale_export_temp_dirs_of_dead_exports_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / ".out.tmp-killed"
    stale.mkdir()
    (stale / _OWNER).write_text(str(dead_pid))
    unowned = tmp_path / ".out.tmp-early"                 # killed before it wrote its pid
    unowned.mkdir()
    live = tmp_path / ".out.tmp-running"                  # another export, still running (this process)
    live.mkdir()
    (live / _OWNER).write_text(str(os.getpid()))
    other = tmp_path / ".other.tmp-killed"                # another target's: not ours to touch
    other.mkdir()
    _write_atomically(str(tmp_path / "out"), {"weights.safetensors": b"w"}, b"{}", overwrite=False)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [".other.tmp-killed", ".out.tmp-running", "out"], left
    assert sorted(os.listdir(tmp_path / "out")) == [MANIFEST, "programs", "weights.safetensors"]


def _model_and_artifact(tmp_path):
    """A stand-in model file and folder (never loaded: the checks come first) and an earlier artifact."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF-bytes-the-user-keeps")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    art = tmp_path / "art"
    art.mkdir()
    (art / MANIFEST).write_text("{}")
    return gguf, hf, art


@pytest.mark.parametrize("case", ["model file", "model folder", "folder holding the model", "plain folder",
                                  "regular file", "empty", "unwritable"])
def test_export_refuses_an_out_dir_it_must_not_replace_before_any_work(tmp_path, case):
    """Regression: ``tlaloc export m.gguf m.gguf --overwrite`` loaded the model, then replaced the
    model file by the artifact (and a model folder likewise); any directory was replaced by
    ``overwrite``; an out_dir that could not be written failed only after the whole export."""
    from tlaloc.errors import ArgumentError
    from tlaloc.serving.export import export
    gguf, hf, art = _model_and_artifact(tmp_path)
    other = tmp_path / "notes.txt"
    other.write_text("mine")
    model, out, match = {
        "model file": (gguf, gguf, "would delete the model"),
        "model folder": (hf, hf, "would delete the model"),
        "folder holding the model": (gguf, tmp_path, "would delete the model"),
        "plain folder": (gguf, hf, "is not a tlaloc artifact"),
        "regular file": (gguf, other, "is a file, not a directory"),
        "empty": (gguf, "", "out_dir is empty"),
        "unwritable": (gguf, "/proc/tlaloc-art", "not a writable directory"),
    }[case]
    with pytest.raises(ArgumentError, match=match):
        export(model, out, overwrite=True)
    assert gguf.read_bytes() == b"GGUF-bytes-the-user-keeps" and (hf / "config.json").read_text() == "{}"
    assert other.read_text() == "mine"


def test_export_out_dir_checks_accept_an_earlier_artifact_and_a_new_nested_path(tmp_path):
    """The control: the paths overwrite is for pass the same checks."""
    from tlaloc.serving.export.artifact import _check_out_dir
    gguf, hf, art = _model_and_artifact(tmp_path)
    _check_out_dir(str(gguf), str(art), True)                   # an earlier artifact
    _check_out_dir(str(gguf), str(tmp_path / "empty"), True)    # does not exist
    (tmp_path / "empty").mkdir()
    _check_out_dir(str(gguf), str(tmp_path / "empty"), True)    # exists, empty
    _check_out_dir(str(hf), str(hf / "art"), False)             # inside the model folder: deletes nothing
    _check_out_dir(str(gguf), str(tmp_path / "a" / "b" / "c"), False)
