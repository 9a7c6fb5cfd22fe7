"""``tlaloc export-triton ARTIFACT REPO_DIR``: a Triton model repository serving an artifact.

Writes::

    REPO_DIR/<model_name>/config.pbtxt     backend "python", inputs/outputs, batching, parameters
    REPO_DIR/<model_name>/1/model.py       TritonPythonModel over tlaloc.serving.Engine
    REPO_DIR/<model_name>/1/artifact/      a copy of ARTIFACT (unless copy_artifact=False)

Serve it with ``tritonserver --model-repository REPO_DIR``. The stub runs Triton's own
Python (same minor version as the one tlaloc is installed in); the config records the
exporting environment's site-packages so the stub can import tlaloc and its dependencies. Decoder artifacts get a plain
model with Triton's dynamic batcher (requests that arrive together are stepped as one
batch) or, with ``streaming=True``, a decoupled model that streams text as it is made.
Encoder artifacts get a dynamically batched ``embedding`` model. See
:mod:`tlaloc.serving._triton_model` for the tensors.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sysconfig
from pathlib import Path

_MODEL_PY = Path(__file__).with_name("_triton_model.py")
_DECODER_IO = """\
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] optional: true },
  { name: "temperature" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
  { name: "top_k" data_type: TYPE_INT32 dims: [ 1 ] optional: true },
  { name: "top_p" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
  { name: "seed" data_type: TYPE_INT64 dims: [ 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "token_ids" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "finish_reason" data_type: TYPE_STRING dims: [ 1 ] }
]
"""
_ENCODER_IO = """\
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }
]
output [
  { name: "embedding" data_type: TYPE_FP32 dims: [ -1 ] }
]
"""


def read_kind_and_name(artifact_dir: str) -> tuple[str, str]:
    """``(kind, model name)`` from the artifact's manifest (the folder name when it has none)."""
    path = os.path.join(artifact_dir, "manifest.json")
    if not os.path.isfile(path):
        raise ValueError(f"{artifact_dir} is not a tlaloc artifact: it has no manifest.json "
                         f"(create one with `tlaloc export MODEL {artifact_dir}`)")
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    kind = manifest.get("kind", "decoder")
    if kind not in ("decoder", "encoder"):
        raise ValueError(f"{path}: kind is {kind!r}; expected 'decoder' or 'encoder'")
    name = (manifest.get("model") or {}).get("name") or os.path.basename(os.path.abspath(artifact_dir))
    return kind, name


def triton_name(name: str) -> str:
    """A model name Triton accepts as a folder: letters, digits, ``_``, ``-`` and ``.``."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or "model"
    return cleaned


def config_pbtxt(name: str, kind: str, *, streaming: bool = False, max_batch_size: int = 8,
                 artifact_dir: str = "artifact", engine_factory: str | None = None,
                 python_site_dirs: list[str] | None = None) -> str:
    """The text of ``config.pbtxt`` for a tlaloc model."""
    if streaming and kind == "encoder":
        raise ValueError("streaming (a decoupled model) is for decoder artifacts; encoders answer at once")
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
    lines = [f'name: "{name}"', 'backend: "python"']
    if streaming:
        lines += ["max_batch_size: 0", "model_transaction_policy { decoupled: true }"]
    else:
        lines += [f"max_batch_size: {max_batch_size}", "dynamic_batching { max_queue_delay_microseconds: 2000 }"]
    text = "\n".join(lines) + "\n" + (_ENCODER_IO if kind == "encoder" else _DECODER_IO)
    text += "instance_group [ { count: 1 kind: KIND_MODEL } ]\n"
    params = {"artifact_dir": artifact_dir}
    if engine_factory:
        params["engine_factory"] = engine_factory
    if python_site_dirs:
        params["python_site_dirs"] = os.pathsep.join(python_site_dirs)
    for key, value in params.items():
        text += f'parameters {{ key: "{key}" value: {{ string_value: {json.dumps(value)} }} }}\n'
    return text


def write_repository(artifact_dir: str, repo_dir: str, *, model_name: str | None = None,
                     streaming: bool = False, max_batch_size: int = 8, copy_artifact: bool = True,
                     engine_factory: str | None = None, python_site_dirs: list[str] | None = None) -> str:
    """Write (or replace) one model of a Triton repository; return its folder.

    Arguments:
        artifact_dir: a ``tlaloc export`` artifact.
        repo_dir: the model repository (created if missing; other models in it are kept).
        model_name: the Triton model name (default: the manifest's model name).
        streaming: a decoupled decoder model that streams tokens.
        max_batch_size: the dynamic batcher's limit (plain models).
        copy_artifact: copy the artifact into ``<model>/1/artifact`` (a self-contained
            repository); False records ``artifact_dir``'s absolute path instead.
        engine_factory: ``module:function`` that loads the artifact (default
            ``tlaloc.serving.Engine``).
        python_site_dirs: site-packages folders the Triton stub adds before importing
            tlaloc (default: this interpreter's, where tlaloc is installed; pass [] for none).
    """
    if python_site_dirs is None:
        python_site_dirs = [sysconfig.get_paths()["purelib"]]
    kind, manifest_name = read_kind_and_name(artifact_dir)
    name = triton_name(model_name or manifest_name)
    model_dir = Path(repo_dir) / name
    version_dir = model_dir / "1"
    if model_dir.exists():
        shutil.rmtree(model_dir)
    version_dir.mkdir(parents=True)
    if copy_artifact:
        shutil.copytree(artifact_dir, version_dir / "artifact")
        where = "artifact"
    else:
        where = os.path.abspath(artifact_dir)
    (model_dir / "config.pbtxt").write_text(
        config_pbtxt(name, kind, streaming=streaming, max_batch_size=max_batch_size, artifact_dir=where,
                     engine_factory=engine_factory, python_site_dirs=python_site_dirs), encoding="utf-8")
    shutil.copyfile(_MODEL_PY, version_dir / "model.py")
    return str(model_dir)
