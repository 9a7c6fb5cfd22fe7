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
:mod:`tlaloc.serving.triton.model` for the tensors.

Text tensors are ``TYPE_STRING`` by default (Triton's usual ``text_input``/``text_output``).
Triton's Python-backend stubs older than 24.11 (built with pybind11 < 2.12, e.g. the
``tritonserver`` bundled in nvidia-pytriton 0.7.0) misread NumPy 2 arrays and cannot pass
``TYPE_STRING`` at all; ``text_tensors="utf8"`` declares the text tensors ``TYPE_UINT8``
``[-1]`` instead (the UTF-8 bytes of one text per row), which every stub passes, since
numeric tensors cross through DLPack. Start ``tritonserver`` with ``PYTHONPATH`` set to
the exporting environment's site-packages so that the stub imports that environment's
NumPy, and with ``LD_LIBRARY_PATH`` naming that Python's ``lib/`` (the stub links
``libpython``).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sysconfig
from pathlib import Path

_MODEL_PY = Path(__file__).with_name("model.py")
_TEXT_TENSORS = ("string", "utf8")


def _text(name: str, text_tensors: str, *, batched: bool, optional: str = "") -> str:
    """One text tensor: TYPE_STRING [1], or TYPE_UINT8 [-1] of UTF-8 bytes (ragged when batched)."""
    if text_tensors == "string":
        return f'{{ name: "{name}" data_type: TYPE_STRING dims: [ 1 ]{optional} }}'
    ragged = " allow_ragged_batch: true" if batched and name == "text_input" else ""
    return f'{{ name: "{name}" data_type: TYPE_UINT8 dims: [ -1 ]{ragged}{optional} }}'


def _io(kind: str, text_tensors: str, batched: bool) -> str:
    """The ``input [...]`` and ``output [...]`` blocks of a decoder or encoder model."""
    inputs = [_text("text_input", text_tensors, batched=batched)]
    if kind == "encoder":
        outputs = ['{ name: "embedding" data_type: TYPE_FP32 dims: [ -1 ] }']
    else:
        inputs += [f'{{ name: "{n}" data_type: TYPE_{t} dims: [ 1 ] optional: true }}'
                   for n, t in (("max_tokens", "INT32"), ("temperature", "FP32"), ("top_k", "INT32"),
                                ("top_p", "FP32"), ("seed", "INT64"))]
        outputs = [_text("text_output", text_tensors, batched=batched),
                   '{ name: "token_ids" data_type: TYPE_INT32 dims: [ -1 ] }',
                   _text("finish_reason", text_tensors, batched=batched)]
    return "".join(f"{block} [\n" + ",\n".join(f"  {t}" for t in tensors) + "\n]\n"
                   for block, tensors in (("input", inputs), ("output", outputs)))


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
                 python_site_dirs: list[str] | None = None, text_tensors: str = "string") -> str:
    """The text of ``config.pbtxt`` for a tlaloc model."""
    if text_tensors not in _TEXT_TENSORS:
        raise ValueError(f"text_tensors must be one of {_TEXT_TENSORS}, got {text_tensors!r}")
    if streaming and kind == "encoder":
        raise ValueError("streaming (a decoupled model) is for decoder artifacts; encoders answer at once")
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
    lines = [f'name: "{name}"', 'backend: "python"']
    if streaming:
        lines += ["max_batch_size: 0", "model_transaction_policy { decoupled: true }"]
    else:
        lines += [f"max_batch_size: {max_batch_size}", "dynamic_batching { max_queue_delay_microseconds: 2000 }"]
    text = "\n".join(lines) + "\n" + _io(kind, text_tensors, batched=not streaming)
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
                     engine_factory: str | None = None, python_site_dirs: list[str] | None = None,
                     text_tensors: str = "string") -> str:
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
        text_tensors: ``"string"`` (TYPE_STRING ``[1]``, Triton's usual LLM interface) or
            ``"utf8"`` (TYPE_UINT8 ``[-1]`` of UTF-8 bytes; for stubs built against NumPy 1.x,
            such as nvidia-pytriton 0.7.0's, which cannot pass TYPE_STRING under NumPy 2).
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
                     engine_factory=engine_factory, python_site_dirs=python_site_dirs,
                     text_tensors=text_tensors), encoding="utf-8")
    shutil.copyfile(_MODEL_PY, version_dir / "model.py")
    return str(model_dir)
