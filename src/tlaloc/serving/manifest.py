"""The artifact manifest: its schema, canonical bytes, file hashes, and verification on load.

An artifact is a directory::

    manifest.json              this schema (sorted keys, no timestamps: exports are byte-identical)
    programs/<mode>_b<B>_c<C>.mlir   one StableHLO module per (prefill|decode|score|embed, batch, context) bucket
    weights.safetensors        the weights, by slot name (f32, bf16, or int8 + per-channel scales)
    tokenizer.json             the tokenizer (``tokenizers``), when the model has one

``manifest["files"]`` maps every other file to its sha256 and size; :func:`read_manifest`
refuses an unknown ``schema_version`` and any file whose hash differs, by name.
Only the standard library is imported here: the runtime and the export share it.
"""
from __future__ import annotations

import hashlib
import json
import os

from .errors import ArtifactError

SCHEMA = "tlaloc.serving.artifact"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"

#: Roles of program inputs and outputs.
REQUEST_ROLES = ("token_ids", "positions", "block_tables", "seq_lens", "slot_mapping",
                 "temperature", "top_k", "top_p", "uniforms", "attention_mask", "want_logprobs")
ROLES = REQUEST_ROLES + ("kv_pool", "weight", "weight_scale", "next_token_ids", "embeddings", "token_logprobs",
                         "greedy_ids", "token_logprob", "top_logprobs", "top_ids")


def dumps(manifest: dict) -> bytes:
    """The canonical bytes of a manifest: sorted keys, fixed indentation, a final newline."""
    return (json.dumps(manifest, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(artifact_dir: str, *, verify: bool = True) -> dict:
    """The manifest of ``artifact_dir``, after checking its schema and (``verify``) every file's sha256.

    Raises ArtifactError naming the file or field that is wrong. (A reader that hashes
    the bytes it uses instead passes ``verify=False`` and calls :func:`check_bytes`.)
    """
    path = os.path.join(artifact_dir, MANIFEST)
    if not os.path.isfile(path):
        raise ArtifactError(f"{artifact_dir} is not a tlaloc artifact: it has no {MANIFEST} "
                            f"(create one with `tlaloc export MODEL {artifact_dir}`)")
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{path} is not valid JSON ({e}); re-export the artifact") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise ArtifactError(f"{path}: schema={manifest.get('schema') if isinstance(manifest, dict) else None!r} "
                            f"is not {SCHEMA!r}; this is not a tlaloc serving artifact")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ArtifactError(f"{path}: unknown schema_version={version!r}; this tlaloc reads schema_version="
                            f"{SCHEMA_VERSION}. Re-export the model with this tlaloc (`tlaloc export`), or "
                            f"serve it with the tlaloc that wrote it")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise ArtifactError(f"{path}: the manifest lists no files; re-export the artifact")
    for rel in list(files) + _referenced(manifest):
        resolve(artifact_dir, rel)                     # refused by name, before anything is opened
    for rel in _referenced(manifest):
        if rel not in files:
            raise ArtifactError(f"{path}: {rel} is used but has no sha256 in manifest['files']; re-export the artifact")
    _check_weight_group(path, manifest.get("weights"))
    if verify:
        for rel, entry in sorted(files.items()):
            verify_file(artifact_dir, rel, entry)
    return manifest


def _check_weight_group(path: str, weights) -> None:
    """``weights.group`` (rows per scale of the 4-bit matrices: 32 or 64, or absent) must be the
    group every 4-bit slot's shapes give: a (in / 2, out) uint8 matrix with a (in / group, out) scale."""
    if not isinstance(weights, dict) or weights.get("group") is None:
        return
    group = weights["group"]
    if group not in (32, 64):
        raise ArtifactError(f"{path}: weights.group={group!r}; a tlaloc artifact's 4-bit group is 32 or 64. "
                            f"Re-export the artifact")
    slots = {s.get("name"): s for s in weights.get("slots", ()) if isinstance(s, dict)}
    for name, slot in slots.items():
        scale = slots.get(f"{name}.scale")
        if f"{name}.offset" not in slots or scale is None or slot.get("dtype") != "uint8":
            continue
        if [2 * slot["shape"][0] // group, slot["shape"][1]] != list(scale["shape"]):
            raise ArtifactError(f"{path}: weight {name} {slot['shape']} has scale {scale['shape']}, which is not "
                                f"weights.group={group} rows per scale; re-export the artifact")


def check_bytes(manifest: dict, rel: str, data: bytes) -> None:
    """Refuse ``data`` (the contents of artifact file ``rel``) unless its sha256 is the manifest's."""
    want = manifest["files"][rel]["sha256"]
    got = sha256_bytes(data)
    if got != want:
        raise ArtifactError(f"artifact file {rel}: sha256 mismatch (manifest says {want}, the file has {got}); the "
                            f"artifact was modified or corrupted. Re-export it")


def resolve(artifact_dir: str, rel) -> str:
    """The path of artifact file ``rel``; refuses (ArtifactError) a name that is not a relative path
    inside ``artifact_dir`` (absolute, ``..``, or a symlink out), so a tampered manifest cannot make
    the runtime open ``/etc/hostname``."""
    if not isinstance(rel, str) or not rel or os.path.isabs(rel) or "\\" in rel or ".." in rel.split("/"):
        raise ArtifactError(f"artifact file {rel!r}: only relative paths inside the artifact directory are "
                            f"allowed; re-export the artifact")
    root = os.path.realpath(artifact_dir)
    full = os.path.realpath(os.path.join(root, rel))
    if os.path.commonpath([root, full]) != root:
        raise ArtifactError(f"artifact file {rel!r} leads outside the artifact directory ({full}); refused")
    return full


def verify_file(artifact_dir: str, rel: str, entry: dict) -> None:
    """Refuse ``rel`` if it is missing, outside the artifact, or its sha256 differs from ``entry``."""
    full = resolve(artifact_dir, rel)
    if not os.path.isfile(full):
        raise ArtifactError(f"artifact file {rel} is missing from {artifact_dir}; re-export the artifact")
    got = sha256_file(full)
    if got != entry.get("sha256"):
        raise ArtifactError(f"artifact file {rel}: sha256 mismatch (manifest says {entry.get('sha256')}, the file "
                            f"has {got}); the artifact was modified or corrupted. Re-export it")


def _referenced(manifest: dict) -> list:
    refs = [p["file"] for p in manifest.get("programs", [])]
    refs += [p["cpu_kernels"]["file"] for p in manifest.get("programs", []) if p.get("cpu_kernels")]
    if manifest.get("weights"):
        refs.append(manifest["weights"]["file"])
    if manifest.get("tokenizer"):
        refs.append(manifest["tokenizer"]["file"])
    return refs


__all__ = ["SCHEMA", "SCHEMA_VERSION", "MANIFEST", "ROLES", "REQUEST_ROLES", "dumps", "sha256_bytes",
           "sha256_file", "read_manifest", "verify_file", "check_bytes", "resolve"]
