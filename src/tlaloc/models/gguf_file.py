"""Reading GGUF checkpoints through the ``gguf`` package.

GGUF names and metadata are mapped onto the Hugging Face names and config fields
first, so the key check and the pytree builder are the ones a Hugging Face folder uses.
Quantized blocks (Q4_0, Q4_1, Q8_0 and the other types ``gguf`` implements) are
dequantized with ``gguf.dequantize``. llama.cpp stores Llama's q and k projections with
rows permuted for its interleaved rotary layout; they are permuted back here.
"""
from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict

import numpy as np

from .config import DecoderConfig, RopeConfig, check_count, check_number
from .errors import CheckpointError, UnsupportedModelError, naming
from .weights import check_finite

_ARCHES = ("llama", "qwen2", "qwen3")
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias", "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"}
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor, or None when it has none."""
    if gguf_name in _TOP_NAMES:
        return _TOP_NAMES[gguf_name]
    m = _BLOCK.fullmatch(gguf_name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    return None


def field_value(field):
    """A GGUF metadata field as a Python value (str, number, bool or list)."""
    import gguf
    types = field.types
    if types and types[0] == gguf.GGUFValueType.ARRAY:
        if len(types) > 1 and types[1] == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    return field.contents()


def read_fields(reader, *, skip_arrays: bool = False) -> dict:
    import gguf
    out = {}
    for name, f in reader.fields.items():
        if skip_arrays and f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            continue
        out[name] = field_value(f)
    return out


def config_from_gguf(meta: dict, tensor_names: set[str], rope_freqs=None) -> DecoderConfig:
    """A DecoderConfig from GGUF metadata (``{arch}.block_count`` and friends)."""
    arch = meta.get("general.architecture")
    if arch not in _ARCHES:
        raise UnsupportedModelError(f"GGUF general.architecture={arch!r} is not supported; "
                                    f"supported: {', '.join(_ARCHES)}")

    def get(key, default=None):
        value = meta.get(f"{arch}.{key}", default)
        if value is None:
            raise CheckpointError(f"GGUF metadata lacks {arch}.{key}")
        return value

    def count(key, default=None):
        value = get(key, default)
        if isinstance(value, list):
            raise CheckpointError(f"GGUF {arch}.{key} is an array ({len(value)} values, one a layer?); "
                                  "per-layer values are not supported: expected one positive integer")
        return check_count(value, f"GGUF {arch}.{key}")

    hidden, heads = count("embedding_length"), count("attention.head_count")
    if meta.get(f"{arch}.attention.key_length") is not None:
        head_dim = count("attention.key_length")
    else:
        if hidden % heads:
            raise CheckpointError(f"GGUF {arch}.embedding_length={hidden} is not divisible by "
                                  f"{arch}.attention.head_count={heads}: the head size would not be whole; "
                                  "fix the head count in the file's metadata")
        head_dim = hidden // heads
    rope_dims = meta.get(f"{arch}.rope.dimension_count")
    if rope_dims is not None and rope_dims != head_dim:
        raise UnsupportedModelError(f"GGUF {arch}.rope.dimension_count={rope_dims!r} differs from the head size "
                                    f"{head_dim}: partial rotary embeddings are not supported; only "
                                    f"{arch}.rope.dimension_count={head_dim} (or none) is")
    vocab = meta.get(f"{arch}.vocab_size") or len(meta.get("tokenizer.ggml.tokens") or ())
    scaling = meta.get(f"{arch}.rope.scaling.type")
    rope = RopeConfig(theta=check_number(get("rope.freq_base", 10000.0), f"GGUF {arch}.rope.freq_base"))
    if scaling == "linear":
        rope = RopeConfig(theta=rope.theta, rope_type="linear",
                          factor=check_number(get("rope.scaling.factor"), f"GGUF {arch}.rope.scaling.factor"))
    elif scaling not in (None, "none"):
        raise UnsupportedModelError(f"GGUF {arch}.rope.scaling.type={scaling!r} is not supported; "
                                    "supported: none, linear (llama3 scaling comes as rope_freqs.weight)")
    if rope_freqs is not None:
        rope = RopeConfig(theta=rope.theta, rope_type=rope.rope_type, factor=rope.factor,
                          freq_factors=tuple(float(x) for x in rope_freqs))
    layers = count("block_count")
    eos = meta.get("tokenizer.ggml.eos_token_id")
    return DecoderConfig(
        model_type=arch, vocab_size=check_count(vocab, f"GGUF {arch}.vocab_size (or the token count)"),
        hidden_size=hidden, intermediate_size=count("feed_forward_length"), num_layers=layers, num_heads=heads,
        num_kv_heads=count("attention.head_count_kv", heads), head_dim=head_dim,
        rms_norm_eps=check_number(get("attention.layer_norm_rms_epsilon"),
                                  f"GGUF {arch}.attention.layer_norm_rms_epsilon", above_zero=False),
        rope=rope, max_position_embeddings=count("context_length", 2048),
        tie_word_embeddings="output.weight" not in tensor_names,
        qkv_bias="blk.0.attn_q.bias" in tensor_names, o_bias="blk.0.attn_output.bias" in tensor_names,
        qk_norm="blk.0.attn_q_norm.weight" in tensor_names, sliding_windows=(None,) * layers,
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_ids=() if eos is None else (int(eos),), dtype="float32")


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation: rows (n_head, 2, E/2) stored as (n_head, E/2, 2)."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def dequantize(tensor) -> np.ndarray:
    """One GGUF tensor as float32 in Hugging Face orientation (rows = output features)."""
    import gguf
    try:
        with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf scales are refused by name afterwards
            out = gguf.dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError as e:
        raise UnsupportedModelError(f"GGUF tensor {tensor.name}: quantization {tensor.tensor_type.name} "
                                    f"is not supported by the installed gguf package: {e}") from None
    shape = tuple(int(d) for d in reversed(tensor.shape))
    return np.asarray(out, np.float32).reshape(shape)


#: Readers of the files opened last, with their metadata, by (path, inode, size, mtime): parsing a
#: file's fields is most of a load (SmolLM2-135M's 49,152-token vocabulary and merges: ~7 s of
#: ``gguf.GGUFReader``'s Python), and an export reads a file more than once.
_READERS: OrderedDict = OrderedDict()
_READERS_KEPT = 2
_READERS_LOCK = threading.Lock()


def open_reader(path: str):
    """``(reader, metadata)`` of GGUF file ``path``: a ``gguf.GGUFReader`` (its tensors are read-only
    views of a memory map of the file) and :func:`read_fields` of it. The last two files' are kept
    and given again while the file's inode, size and modification time are unchanged; the
    metadata is a fresh dict each call. Raises what ``os.stat`` and ``gguf.GGUFReader`` raise."""
    import gguf
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns)
    with _READERS_LOCK:
        hit = _READERS.get(key)
        if hit is not None:
            _READERS.move_to_end(key)
    if hit is None:
        reader = gguf.GGUFReader(path)
        hit = (reader, read_fields(reader))
        with _READERS_LOCK:
            _READERS[key] = hit
            while len(_READERS) > _READERS_KEPT:
                _READERS.popitem(last=False)
    return hit[0], dict(hit[1])


def read_gguf(path: str):
    """``(config, tensors getter, key shapes, metadata, reader)`` of a GGUF file; nothing dequantized yet."""
    reader, meta = open_reader(path)
    tensors = {t.name: t for t in reader.tensors}
    rope_freqs = None
    if "rope_freqs.weight" in tensors:
        rope_freqs = check_finite(dequantize(tensors["rope_freqs.weight"]), "rope_freqs.weight", path)
    with naming(path):
        cfg = config_from_gguf(meta, set(tensors), rope_freqs)
    by_hf, shapes = {}, {}
    for name, t in tensors.items():
        if name == "rope_freqs.weight":
            continue
        key = hf_name(name) or f"<gguf>{name}"  # unmapped names surface as unexpected keys
        by_hf[key] = t
        shapes[key] = tuple(int(d) for d in reversed(t.shape))

    def get(key: str) -> np.ndarray:
        tensor = by_hf[key]
        w = check_finite(dequantize(tensor), f"{tensor.name} ({key})", path)
        if cfg.model_type == "llama":
            if key.endswith("self_attn.q_proj.weight") or key.endswith("self_attn.q_proj.bias"):
                w = _unpermute(w, cfg.num_heads)
            elif key.endswith("self_attn.k_proj.weight") or key.endswith("self_attn.k_proj.bias"):
                w = _unpermute(w, cfg.num_kv_heads)
        return w

    return cfg, get, shapes, meta, reader
