"""Checkpoint key sets: what a config expects, the check before loading, and the pytree built after.

As nanoGPT's ``from_pretrained`` does, the key set and every shape are checked before a
single weight is read, and a mismatch is reported by name (:class:`CheckpointError`).
Names follow Hugging Face's; the GGUF reader maps its own names onto them first.
"""
from __future__ import annotations

import re
from typing import Callable, Mapping

import numpy as np

from .config import DecoderConfig, EncoderConfig
from .errors import CheckpointError

# keys a checkpoint may carry that the model does not use (buffers, heads we do not run)
_IGNORED = {
    "decoder": (r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq",),
    "encoder": (r"embeddings\.position_ids", r"pooler\.dense\.(weight|bias)"),
}
_LIST_LIMIT = 20


def decoder_shapes(cfg: DecoderConfig) -> dict[str, tuple[int, ...]]:
    """Every Hugging Face key a decoder checkpoint must hold, with its shape."""
    V, D, F = cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size
    H, K, E = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (V, D)
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (D,)
        shapes[p + "post_attention_layernorm.weight"] = (D,)
        for name, out in (("q", H * E), ("k", K * E), ("v", K * E)):
            shapes[p + f"self_attn.{name}_proj.weight"] = (out, D)
            if cfg.qkv_bias:
                shapes[p + f"self_attn.{name}_proj.bias"] = (out,)
        shapes[p + "self_attn.o_proj.weight"] = (D, H * E)
        if cfg.o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (D,)
        if cfg.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (E,)
            shapes[p + "self_attn.k_norm.weight"] = (E,)
        for name, shape in (("gate", (F, D)), ("up", (F, D)), ("down", (D, F))):
            shapes[p + f"mlp.{name}_proj.weight"] = shape
            if cfg.mlp_bias:
                shapes[p + f"mlp.{name}_proj.bias"] = (shape[0],)
    return shapes


def encoder_shapes(cfg: EncoderConfig) -> dict[str, tuple[int, ...]]:
    """Every Hugging Face key a BERT checkpoint must hold (without the ``bert.`` prefix)."""
    V, D, F = cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size
    shapes = {"embeddings.word_embeddings.weight": (V, D),
              "embeddings.position_embeddings.weight": (cfg.max_position_embeddings, D),
              "embeddings.token_type_embeddings.weight": (cfg.type_vocab_size, D),
              "embeddings.LayerNorm.weight": (D,), "embeddings.LayerNorm.bias": (D,)}
    for i in range(cfg.num_layers):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            shapes[p + f"attention.self.{name}.weight"] = (D, D)
            shapes[p + f"attention.self.{name}.bias"] = (D,)
        shapes[p + "attention.output.dense.weight"] = (D, D)
        shapes[p + "attention.output.dense.bias"] = (D,)
        shapes[p + "attention.output.LayerNorm.weight"] = (D,)
        shapes[p + "attention.output.LayerNorm.bias"] = (D,)
        shapes[p + "intermediate.dense.weight"] = (F, D)
        shapes[p + "intermediate.dense.bias"] = (F,)
        shapes[p + "output.dense.weight"] = (D, F)
        shapes[p + "output.dense.bias"] = (D,)
        shapes[p + "output.LayerNorm.weight"] = (D,)
        shapes[p + "output.LayerNorm.bias"] = (D,)
    return shapes


def expected_shapes(cfg) -> dict[str, tuple[int, ...]]:
    return encoder_shapes(cfg) if isinstance(cfg, EncoderConfig) else decoder_shapes(cfg)


def _names(keys) -> str:
    keys = sorted(keys, key=_natural)
    shown = ", ".join(keys[:_LIST_LIMIT])
    return shown + (f", ... ({len(keys) - _LIST_LIMIT} more)" if len(keys) > _LIST_LIMIT else "")


def _natural(key: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key)]


def check_keys(cfg, found: Mapping[str, tuple[int, ...]], source: str, *, ignored=()) -> None:
    """Refuse a checkpoint whose key set or shapes differ from what ``cfg`` expects.

    found: key -> shape, read from the file headers (no weight loaded yet). Raises
    CheckpointError listing missing keys, unexpected keys and shape mismatches by name.
    """
    expected = expected_shapes(cfg)
    kind = "encoder" if isinstance(cfg, EncoderConfig) else "decoder"
    patterns = [re.compile(p) for p in _IGNORED[kind] + tuple(ignored)]
    if isinstance(cfg, DecoderConfig) and cfg.tie_word_embeddings:
        patterns.append(re.compile(r"lm_head\.weight"))  # some tied checkpoints still carry a copy
    missing = [k for k in expected if k not in found]
    extra = [k for k in found if k not in expected and not any(p.fullmatch(k) for p in patterns)]
    wrong = [f"{k}: expected {expected[k]}, got {tuple(found[k])}"
             for k in expected if k in found and tuple(found[k]) != expected[k]]
    if not (missing or extra or wrong):
        return
    lines = [f"checkpoint {source} does not fit {cfg.architecture} ({cfg.num_layers} layers):"]
    if missing:
        lines.append(f"  missing keys ({len(missing)}): {_names(missing)}")
    if extra:
        lines.append(f"  unexpected keys ({len(extra)}): {_names(extra)}")
    if wrong:
        lines.append(f"  shape mismatch ({len(wrong)}): " + "; ".join(sorted(wrong, key=_natural)[:_LIST_LIMIT]))
    raise CheckpointError("\n".join(lines))


def check_finite(array: np.ndarray, name: str, source: str) -> np.ndarray:
    """``array`` unchanged when every value is finite; CheckpointError naming the tensor otherwise.

    One vectorised pass per float tensor (integer tensors pass as they are). A NaN or
    infinite weight does not fail later: the model loads and every logit becomes NaN, so
    the argmax is token 0 forever. It is refused here instead, with the count of bad values.
    """
    if array.dtype.kind != "f" and array.dtype.name != "bfloat16":
        return array
    finite = np.isfinite(array)
    if finite.all():
        return array
    bad = array.size - int(np.count_nonzero(finite))
    raise CheckpointError(f"{source}: tensor {name} holds {bad} non-finite value(s) (NaN or infinity) of "
                          f"{array.size}; a checkpoint's weights must be finite: re-convert or re-download "
                          "the checkpoint")


def _t(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.T)


def build_decoder_weights(cfg: DecoderConfig, get: Callable[[str], np.ndarray]) -> dict:
    """The decoder pytree from a getter of Hugging Face tensors (already checked)."""
    layers = []
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        layer = {"attn_norm": get(p + "input_layernorm.weight"),
                 "mlp_norm": get(p + "post_attention_layernorm.weight"),
                 "wq": _t(get(p + "self_attn.q_proj.weight")), "wk": _t(get(p + "self_attn.k_proj.weight")),
                 "wv": _t(get(p + "self_attn.v_proj.weight")), "wo": _t(get(p + "self_attn.o_proj.weight")),
                 "w_gate": _t(get(p + "mlp.gate_proj.weight")), "w_up": _t(get(p + "mlp.up_proj.weight")),
                 "w_down": _t(get(p + "mlp.down_proj.weight"))}
        if cfg.qkv_bias:
            for n in "qkv":
                layer["b" + n] = get(p + f"self_attn.{n}_proj.bias")
        if cfg.o_bias:
            layer["bo"] = get(p + "self_attn.o_proj.bias")
        if cfg.qk_norm:
            layer["q_norm"] = get(p + "self_attn.q_norm.weight")
            layer["k_norm"] = get(p + "self_attn.k_norm.weight")
        if cfg.mlp_bias:
            for n in ("gate", "up", "down"):
                layer["b_" + n] = get(p + f"mlp.{n}_proj.bias")
        layers.append(layer)
    weights = {"embed": get("model.embed_tokens.weight"), "norm": get("model.norm.weight"),
               "layers": tuple(layers)}
    if not cfg.tie_word_embeddings:
        weights["lm_head"] = _t(get("lm_head.weight"))
    return weights


def build_encoder_weights(cfg: EncoderConfig, get: Callable[[str], np.ndarray]) -> dict:
    """The encoder pytree from a getter of Hugging Face tensors (already checked)."""
    layers = []
    for i in range(cfg.num_layers):
        p = f"encoder.layer.{i}."
        a = p + "attention."
        layers.append({
            "wq": _t(get(a + "self.query.weight")), "bq": get(a + "self.query.bias"),
            "wk": _t(get(a + "self.key.weight")), "bk": get(a + "self.key.bias"),
            "wv": _t(get(a + "self.value.weight")), "bv": get(a + "self.value.bias"),
            "wo": _t(get(a + "output.dense.weight")), "bo": get(a + "output.dense.bias"),
            "attn_ln_w": get(a + "output.LayerNorm.weight"), "attn_ln_b": get(a + "output.LayerNorm.bias"),
            "w_in": _t(get(p + "intermediate.dense.weight")), "b_in": get(p + "intermediate.dense.bias"),
            "w_out": _t(get(p + "output.dense.weight")), "b_out": get(p + "output.dense.bias"),
            "out_ln_w": get(p + "output.LayerNorm.weight"), "out_ln_b": get(p + "output.LayerNorm.bias")})
    e = "embeddings."
    return {"word": get(e + "word_embeddings.weight"), "position": get(e + "position_embeddings.weight"),
            "token_type": get(e + "token_type_embeddings.weight"),
            "emb_ln_w": get(e + "LayerNorm.weight"), "emb_ln_b": get(e + "LayerNorm.bias"),
            "layers": tuple(layers)}


def build_weights(cfg, get: Callable[[str], np.ndarray]) -> dict:
    if isinstance(cfg, EncoderConfig):
        return build_encoder_weights(cfg, get)
    return build_decoder_weights(cfg, get)
