"""``load(path)``: a Hugging Face folder or a ``.gguf`` file -> :class:`Model`.

Order of work: read the config, read the tensor headers, check key set and shapes
(:func:`~tlaloc.models.weights.check_keys`), and only then read and convert weights.
"""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from .config import DecoderConfig, EncoderConfig, config_from_hf
from .decoder import decoder_forward
from .encoder import encode
from .errors import CheckpointError, naming
from .safetensors_io import load_tensor, read_checkpoint_headers
from .tokenizer import Tokenizer, tokenizer_from_folder, tokenizer_from_gguf_fields
from .weights import build_weights, check_finite, check_keys

_DTYPES = {"float32": np.float32, "f32": np.float32}  # eager reference path: float32 only


@dataclasses.dataclass(frozen=True)
class Model:
    """A loaded model: its config, its weights pytree, its tokenizer (or None) and where it came from."""
    config: DecoderConfig | EncoderConfig
    weights: dict
    tokenizer: Tokenizer | None
    source: str

    @property
    def is_encoder(self) -> bool:
        return isinstance(self.config, EncoderConfig)

    def logits(self, token_ids, positions=None, backend=None, *, last_only: bool = False):
        """Decoder logits for token_ids (B, T): (B, T, V), or (B, V) with ``last_only``."""
        token_ids = np.asarray(token_ids)
        if positions is None:
            positions = np.broadcast_to(np.arange(token_ids.shape[1]), token_ids.shape)
        return decoder_forward(self.config, self.weights, token_ids, np.asarray(positions), backend,
                               last_only=last_only)

    def embed(self, texts) -> np.ndarray:
        """Sentence embeddings (n, D) of strings (tokenized, padded) or of lists of ids."""
        if self.tokenizer is None and any(isinstance(t, str) for t in texts):
            raise CheckpointError(f"{self.source} has no tokenizer.json; pass token ids instead of text")
        ids = [self.tokenizer.encode(t) if isinstance(t, str) else list(t) for t in texts]
        T = max(len(i) for i in ids)
        if T > self.config.max_position_embeddings:
            raise ValueError(f"embed: an input of {T} tokens is longer than the model's "
                             f"max_position_embeddings={self.config.max_position_embeddings}; shorten it")
        token_ids = np.zeros((len(ids), T), np.int64)                     # (n, T)
        mask = np.zeros((len(ids), T), np.int64)                          # (n, T)
        for r, row in enumerate(ids):
            token_ids[r, :len(row)], mask[r, :len(row)] = row, 1
        return encode(self.config, self.weights, token_ids, mask)         # (n, D)


def _np_dtype(dtype: str):
    if dtype not in _DTYPES:
        raise ValueError(f"load: dtype={dtype!r} is not supported; use one of {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def load_hf(folder: str, dtype: str = "float32") -> Model:
    """Load a Hugging Face folder: config.json, (sharded) safetensors and tokenizer.json if present."""
    config_path = os.path.join(folder, "config.json")
    with open(config_path) as f, naming(config_path):
        try:
            raw = json.load(f)
        except ValueError as e:
            raise CheckpointError(f"not valid JSON ({e}); fix or re-download it") from None
        cfg = config_from_hf(raw)
    entries = read_checkpoint_headers(folder)
    if isinstance(cfg, EncoderConfig) and any(k.startswith("bert.") for k in entries):
        entries = {(k[5:] if k.startswith("bert.") else k): e for k, e in entries.items()}
    ignored = (r"cls\..*",) if isinstance(cfg, EncoderConfig) else ()
    check_keys(cfg, {k: e.shape for k, e in entries.items()}, folder, ignored=ignored)
    target = _np_dtype(dtype)
    weights = build_weights(cfg, lambda key: check_finite(load_tensor(entries[key], target), key,
                                                          entries[key].path))
    return Model(cfg, weights, tokenizer_from_folder(folder), folder)


def load_gguf(path: str, dtype: str = "float32") -> Model:
    """Load a GGUF file: config and tokenizer from its metadata, weights dequantized."""
    from .gguf_file import read_gguf
    cfg, get, shapes, meta, _ = read_gguf(path)
    check_keys(cfg, shapes, path)
    target = _np_dtype(dtype)
    weights = build_weights(cfg, lambda key: get(key).astype(target))
    with naming(path):
        tokenizer = tokenizer_from_gguf_fields(meta) if "tokenizer.ggml.tokens" in meta else None
    return Model(cfg, weights, tokenizer, path)


def load(path: str, dtype: str = "float32") -> Model:
    """Load a model from a Hugging Face folder or a ``.gguf`` file.

    Raises CheckpointError (naming missing, unexpected and mis-shaped keys) before any
    weight is read, and UnsupportedModelError for an architecture or format tlaloc does
    not read.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        return load_hf(path, dtype)
    if path.endswith(".gguf"):
        return load_gguf(path, dtype)
    raise CheckpointError(f"load: {path!r} is neither a folder holding config.json nor a .gguf file")
