"""Exporting a function with bounded axes: one StableHLO program per bucket and a manifest.

    tl.jit(f).export("out/", x, w)

writes ``out/<name>.<axis><size>[...].mlir`` for every combination of buckets
and ``out/manifest.json``::

    {"format": "tlaloc.bounded", "version": 1, "function": "f",
     "axes": {"seq": {"bound": 512, "buckets": [16, 32, 64, 128, 256, 512]}},
     "programs": [{"buckets": {"seq": 16}, "file": "f.seq16.mlir", "sha256": "...",
                   "inputs": [{"name": "x", "dtype": "float32", "shape": [16, 8], "bounded": {"0": "seq"}},
                              ..., {"name": "len_seq", "dtype": "int32", "shape": [], "valid_length": "seq"}],
                   "outputs": [{"dtype": "float32", "shape": [16], "bounded": {"0": "seq"}}],
                   "min_length": {}}, ...]}

A runtime pads each argument's bounded axes with zeros to the smallest bucket
that holds them, passes the valid lengths as the trailing ``int32`` inputs and
slices every output's ``bounded`` axes back to them (``tlaloc.serving.bucketed``
does this without the compiler). Exports of the same function are byte-identical.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import tempfile

import numpy as np

from ..errors import ArgumentError
from . import bounded

FORMAT, VERSION = "tlaloc.bounded", 1


def _bucket_args(plan, args, sizes) -> tuple:
    """Zeros shaped like ``args`` with every bounded axis at its bucket size."""
    out = list(args)
    for index, axes in plan.params.items():
        if index >= len(args):
            raise ArgumentError(f"export: pass every argument (argument {index} has a bounded axis)")
        a = np.asarray(args[index])
        shape = list(a.shape)
        for axis, name in axes:
            shape[axis] = sizes[name]
        out[index] = np.zeros(shape, a.dtype)
    return tuple(out)


def lower_for(jitted, args, sizes=None):
    """``(Lowered, BucketMeta, sizes)`` of the bucket holding ``args`` (or of ``sizes``)."""
    plan = jitted._plan
    if sizes is None:
        lengths = bounded.lengths_of(plan, jitted.fun, args)
        sizes = {n: bounded.bucket_of(plan, n, lengths[n]) for n in plan.names}
    src, key, trees, flat, leaves, avals = jitted._prepare(_bucket_args(plan, args, sizes))
    lowered, meta = bounded.lower_bucket(jitted, plan, src, key, trees, avals, len(flat), sizes)
    return lowered, meta, sizes


def _io(avals, hints, tags_list) -> list:
    out = []
    for a, hint, tags in zip(avals, hints, tags_list):
        entry = {"name": hint, "dtype": np.dtype(a.dtype).name, "shape": list(a.shape)}
        if tags is not None:
            entry["bounded"] = {str(i): t for i, t in enumerate(tags) if t is not None}
        out.append(entry)
    return out


def export(jitted, directory, args) -> dict:
    """Write every bucket's program and ``manifest.json`` into ``directory``; returns the manifest."""
    plan = jitted._plan
    bounded.lengths_of(plan, jitted.fun, args)            # the examples against the annotations (dtype, rank, bound)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ArgumentError(f"export: directory {os.fspath(directory)!r} is an existing file, not a directory; "
                            f"pass a new or existing directory path")
    os.makedirs(directory, exist_ok=True)
    programs = []
    for combo in itertools.product(*(plan.ladders[n] for n in plan.names)):
        sizes = dict(zip(plan.names, combo))
        lowered, meta, _ = lower_for(jitted, args, sizes)
        text = lowered.as_text()
        fname = f"{jitted.__name__}." + ".".join(f"{n}{s}" for n, s in sizes.items()) + ".mlir"
        _write(os.path.join(directory, fname), text.encode())
        ins = list(lowered.graph.inputs)
        n_len = len(meta.names)
        in_tags = [None] * len(ins)
        for k, tags in bounded.leaf_tags(plan, _trees(jitted, args), [v.aval for v in ins]).items():
            in_tags[k] = tags
        inputs = _io([v.aval for v in ins[:len(ins) - n_len]], [v.hint or f"arg{k}" for k, v in enumerate(ins)],
                     in_tags)
        inputs += [{"name": f"len_{n}", "dtype": "int32", "shape": [], "valid_length": n} for n in meta.names]
        outputs = _io([o.aval for o in lowered.graph.outputs], [None] * len(meta.out_tags), meta.out_tags)
        for o in outputs:
            o.pop("name")
        programs.append({"buckets": sizes, "file": fname, "sha256": hashlib.sha256(text.encode()).hexdigest(),
                         "inputs": inputs, "outputs": outputs, "min_length": meta.min_length})
    manifest = {"format": FORMAT, "version": VERSION, "function": jitted.__name__,
                "axes": {n: {"bound": plan.bounds[n], "buckets": list(plan.ladders[n])} for n in plan.names},
                "programs": programs}
    _write(os.path.join(directory, "manifest.json"), (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return manifest


def _trees(jitted, args):
    _, trees, _ = jitted._split(args)
    return trees


def _write(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".tlaloc-", suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
