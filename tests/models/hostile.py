"""Small checkpoints written from NumPy (no torch), clean or with one thing broken, for the refusal tests.

``write_hf`` writes a Hugging Face folder (config.json + model.safetensors) of a one-layer
Llama; ``write_gguf`` the same model as a llama-architecture GGUF with a byte-level BPE
tokenizer. Both take overrides so a test breaks exactly one key, value or tensor.
"""
import json
import os
import struct

import numpy as np

from .gguf_writer import ALPHABET_MERGES, tiny_vocab

HF_CONFIG = dict(model_type="llama", vocab_size=263, hidden_size=64, intermediate_size=128,
                 num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True)


def hf_tensors(config: dict, seed=0) -> dict:
    """Seeded float32 tensors of every key the config's decoder expects."""
    from tlaloc.models import config_from_hf
    from tlaloc.models.weights import decoder_shapes
    rng = np.random.default_rng(seed)
    return {k: rng.normal(0, 0.2, s).astype(np.float32)
            for k, s in decoder_shapes(config_from_hf(config)).items()}


def write_hf(folder, config=None, tensors=None, **overrides) -> str:
    """A one-layer Llama folder; ``overrides`` replace config keys (None removes the key)."""
    from safetensors.numpy import save_file
    os.makedirs(folder, exist_ok=True)
    cfg = {**HF_CONFIG, **(config or {})}
    tensors = hf_tensors(cfg) if tensors is None else tensors
    for k, v in overrides.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    return str(folder)


def edit_safetensors_header(path, edit) -> None:
    """Rewrite a safetensors file's JSON header with ``edit(header)`` (in place), keeping its data."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    edit(header)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


_GGUF_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
               "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
               "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
               "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
               "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
               "mlp.down_proj.weight": "ffn_down.weight"}


def gguf_name(hf_key: str) -> str:
    if hf_key in _GGUF_NAMES:
        return _GGUF_NAMES[hf_key]
    _, _, i, rest = hf_key.split(".", 3)
    return f"blk.{i}.{_GGUF_NAMES[rest]}"


def gguf_metadata() -> dict:
    """key -> value of the tiny GGUF (GGUF value types picked by :func:`write_gguf` from the Python type)."""
    c = HF_CONFIG
    tokens, types = tiny_vocab()
    return {"llama.block_count": c["num_hidden_layers"], "llama.context_length": c["max_position_embeddings"],
            "llama.embedding_length": c["hidden_size"], "llama.feed_forward_length": c["intermediate_size"],
            "llama.attention.head_count": c["num_attention_heads"],
            "llama.attention.head_count_kv": c["num_key_value_heads"],
            "llama.rope.freq_base": c["rope_theta"], "llama.attention.layer_norm_rms_epsilon": c["rms_norm_eps"],
            "llama.rope.dimension_count": c["hidden_size"] // c["num_attention_heads"],
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": list(ALPHABET_MERGES)}


def write_gguf(path, meta=None, q4_1=None, **tensor_edits) -> str:
    """The tiny Llama as GGUF: float32 tensors, ``q4_1`` (a GGUF name) stored as Q4_1 blocks.

    ``meta`` replaces metadata values (None removes the key); ``tensor_edits`` maps a GGUF
    name with dots as ``__`` to a function of its stored array (float32, or Q4_1 bytes).
    """
    import gguf
    values = gguf_metadata()
    for k, v in (meta or {}).items():
        if v is None:
            values.pop(k, None)
        else:
            values[k] = v
    w = gguf.GGUFWriter(str(path), "llama")
    for key, v in values.items():
        if isinstance(v, str):
            w.add_string(key, v)
        elif isinstance(v, list):
            w.add_array(key, v)
        elif isinstance(v, float):
            w.add_float32(key, v)
        else:
            w.add_uint32(key, v)
    for key, a in hf_tensors(HF_CONFIG).items():
        name = gguf_name(key)
        raw_dtype = None
        if name == q4_1:
            a, raw_dtype = gguf.quantize(a, gguf.GGMLQuantizationType.Q4_1), gguf.GGMLQuantizationType.Q4_1
        edit = tensor_edits.get(name.replace(".", "__"))
        if edit is not None:
            a = edit(a.copy())
        w.add_tensor(name, a, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)
