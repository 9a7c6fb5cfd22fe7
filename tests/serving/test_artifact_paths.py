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
