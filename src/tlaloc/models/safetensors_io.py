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
    """The tensors of one safetensors file, by name, without reading their data."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckpointError(f"{path} is not a safetensors file: it is shorter than its 8-byte header size")
        (size,) = struct.unpack("<Q", raw)
        header = json.loads(f.read(size))
    data_start = 8 + size
    entries = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        entries[name] = TensorEntry(path, info["dtype"], tuple(info["shape"]),
                                    data_start + begin, data_start + end)
    return entries


def read_checkpoint_headers(folder: str) -> dict[str, TensorEntry]:
    """Every tensor of a Hugging Face folder: ``model.safetensors`` or a sharded index."""
    index = os.path.join(folder, "model.safetensors.index.json")
    single = os.path.join(folder, "model.safetensors")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
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
        return array.astype(dtype)
    return array.copy()
