"""Reading safetensors files: headers first (names, dtypes, shapes), tensors on demand.

The header is read without touching the data, so key sets and shapes are checked
before loading. Tensors are memory-mapped; BF16 (which NumPy lacks) is widened through
``ml_dtypes``. A sharded checkpoint's ``model.safetensors.index.json`` maps each name
to its shard.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import CheckpointError

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
           "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
           "BOOL": np.bool_}


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lives: file, dtype name, shape and byte range inside the data section."""
    path: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def read_header(path: str) -> dict[str, TensorEntry]:
    """The tensors of one safetensors file, by name, without reading their data.

    The header is checked as the ``safetensors`` library checks it: its size fits the
    file, it is a JSON object of ``{dtype, shape, data_offsets}`` entries, and the tensors'
    byte ranges are in bounds, contiguous, non-overlapping and cover the data section
    exactly. CheckpointError names the file and the tensor otherwise.
    """
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckpointError(f"{path} is not a safetensors file: it is shorter than its 8-byte header size")
        (size,) = struct.unpack("<Q", raw)
        file_size = os.fstat(f.fileno()).st_size
        if size > file_size - 8:
            raise CheckpointError(f"{path} is not a valid safetensors file: its header size field says {size} "
                                  f"bytes but the file holds {file_size - 8} after it; the file is truncated "
                                  "or corrupt (re-download it)")
        try:
            header = json.loads(f.read(size))
        except (UnicodeDecodeError, ValueError) as e:
            raise CheckpointError(f"{path} is not a valid safetensors file: its header is not JSON ({e}); "
                                  "re-download it") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the safetensors header must be a JSON object of tensors; "
                              f"got {type(header).__name__}")
    data_start = 8 + size
    entries = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        entries[name] = _entry(path, name, info, data_start)
    _check_layout(path, entries, data_start, file_size)
    return entries


def _entry(path: str, name: str, info, data_start: int) -> TensorEntry:
    """One header entry as a TensorEntry; CheckpointError naming the tensor when a field is missing or malformed."""
    def bad(what):
        return CheckpointError(f"{path}: safetensors header entry {name!r} {what}; expected "
                               '{"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}')
    if not isinstance(info, dict):
        raise bad(f"is a {type(info).__name__}, not an object")
    for field in ("dtype", "shape", "data_offsets"):
        if field not in info:
            raise bad(f"lacks {field!r}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str):
        raise bad(f"has dtype {dtype!r}, not a string")
    if not isinstance(shape, list) or not all(_natural_int(d) for d in shape):
        raise bad(f"has shape {shape!r}, not a list of non-negative integers")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_natural_int(o) for o in offsets):
        raise bad(f"has data_offsets {offsets!r}, not two non-negative integers")
    return TensorEntry(path, dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1])


def _natural_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _check_layout(path: str, entries: dict[str, TensorEntry], data_start: int, file_size: int) -> None:
    """The safetensors library's rule: sorted by offset, the tensors tile the data section from its start
    with no gap, no overlap and nothing past its end; each spans exactly its shape times its dtype's size."""
    start = position = data_start
    for name, e in sorted(entries.items(), key=lambda kv: (kv[1].begin, kv[1].end)):
        if e.begin != position or e.end < e.begin:
            what = "overlaps the tensor before it" if e.begin < position else (
                "leaves a gap before it" if e.end >= e.begin else "ends before it begins")
            raise CheckpointError(f"{path}: tensor {name} has data_offsets [{e.begin - start}, {e.end - start}], "
                                  f"which {what} (expected to begin at {position - start}); the file is "
                                  "corrupt: re-download or re-save it")
        if e.dtype in _DTYPES:
            needed = int(np.prod(e.shape, dtype=np.int64)) * np.dtype(_DTYPES[e.dtype]).itemsize
            if e.end - e.begin != needed:
                raise CheckpointError(f"{path}: tensor {name} of shape {e.shape} and dtype {e.dtype} needs "
                                      f"{needed} bytes but its data_offsets span {e.end - e.begin}; the file "
                                      "is corrupt: re-download or re-save it")
        position = e.end
    if position != file_size:
        raise CheckpointError(f"{path}: the tensors' data_offsets cover {position - start} bytes but the data "
                              f"section holds {file_size - start}; the file is truncated or corrupt: re-download it")


def read_checkpoint_headers(folder: str) -> dict[str, TensorEntry]:
    """Every tensor of a Hugging Face folder: ``model.safetensors`` or a sharded index."""
    index = os.path.join(folder, "model.safetensors.index.json")
    single = os.path.join(folder, "model.safetensors")
    if os.path.exists(index):
        with open(index) as f:
            try:
                weight_map = json.load(f)
            except ValueError as e:
                raise CheckpointError(f"{index} is not valid JSON ({e}); re-download it") from None
        weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index} lacks a 'weight_map' object (tensor name -> shard file); "
                                  "re-download the index or remove it to load model.safetensors")
        entries = {}
        for shard in sorted(set(weight_map.values())):
            for name, entry in read_header(os.path.join(folder, shard)).items():
                if weight_map.get(name) == shard:
                    entries[name] = entry
        absent = sorted(set(weight_map) - set(entries))
        if absent:
            raise CheckpointError(f"{index} lists tensors its shards do not hold: {', '.join(absent[:20])}")
        return entries
    if os.path.exists(single):
        return read_header(single)
    raise CheckpointError(f"{folder} holds neither model.safetensors nor model.safetensors.index.json")


def load_tensor(entry: TensorEntry, dtype=np.float32) -> np.ndarray:
    """One tensor as a fresh array of ``dtype`` (floats are converted; integers are kept)."""
    if entry.dtype not in _DTYPES:
        raise CheckpointError(f"{entry.path}: dtype {entry.dtype} is not supported; "
                              f"supported: {', '.join(_DTYPES)}")
    stored = np.dtype(_DTYPES[entry.dtype])
    count = int(np.prod(entry.shape, dtype=np.int64))
    if entry.end - entry.begin != count * stored.itemsize:
        raise CheckpointError(f"{entry.path}: a tensor of shape {entry.shape} and dtype {entry.dtype} "
                              f"needs {count * stored.itemsize} bytes but spans {entry.end - entry.begin}")
    raw = np.memmap(entry.path, dtype=stored, mode="r", offset=entry.begin, shape=(count,))
    array = np.asarray(raw).reshape(entry.shape)
    if np.issubdtype(array.dtype, np.floating) or array.dtype == ml_dtypes.bfloat16:
        with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf, refused by the caller
            return array.astype(dtype)
    return array.copy()
