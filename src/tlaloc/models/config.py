"""Model configs: frozen dataclasses read from a Hugging Face ``config.json`` (or GGUF metadata).

Both spellings of rotary settings are accepted: transformers 4's ``rope_theta`` plus
``rope_scaling``, and transformers 5's ``rope_parameters: {rope_theta, rope_type, ...}``;
and both ``torch_dtype`` and ``dtype``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from .errors import UnsupportedModelError

DECODER_TYPES = ("llama", "qwen2", "qwen3", "mistral")
ENCODER_TYPES = ("bert",)
_ENCODER_ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh")   # exact erf GELU, tanh GELU, tanh GELU
ROPE_TYPES = ("default", "linear", "llama3")


@dataclasses.dataclass(frozen=True)
class RopeConfig:
    """Rotary position embedding settings.

    ``rope_type`` is one of ``default``, ``linear`` (positions divided by ``factor``) or
    ``llama3`` (low frequencies divided by ``factor``, a smooth ramp between
    ``low_freq_factor`` and ``high_freq_factor``). ``freq_factors`` (GGUF's
    ``rope_freqs.weight``) divides the inverse frequencies one by one, when given.
    """
    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    freq_factors: tuple[float, ...] | None = None


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """A decoder-only transformer of the Llama family (Llama, SmolLM2, TinyLlama, Qwen2, Qwen3, Mistral).

    ``sliding_windows`` holds one entry per layer: ``None`` for full causal attention, or
    ``W`` when query ``i`` sees keys ``j`` with ``i - W < j <= i``.
    """
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: RopeConfig
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    sliding_windows: tuple[int | None, ...] = ()
    hidden_act: str = "silu"
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    dtype: str = "float32"

    @property
    def architecture(self) -> str:
        names = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM"}
        return names[self.model_type]


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """A BERT encoder (all-MiniLM-L6-v2 style) with mean pooling and optional L2 normalization."""
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    layer_norm_eps: float
    max_position_embeddings: int
    type_vocab_size: int = 2
    hidden_act: str = "gelu"
    normalize: bool = True
    dtype: str = "float32"

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def architecture(self) -> str:
        return "BertModel"


def _dtype_name(cfg: Mapping[str, Any]) -> str:
    name = cfg.get("dtype") or cfg.get("torch_dtype") or "float32"
    return str(name).replace("torch.", "")


def rope_from_hf(cfg: Mapping[str, Any]) -> RopeConfig:
    """The rotary settings of a config.json, in either transformers 4 or 5 spelling."""
    params = dict(cfg.get("rope_parameters") or {})
    scaling = cfg.get("rope_scaling") or {}
    if "full_attention" in params and isinstance(params["full_attention"], Mapping):
        params = dict(params["full_attention"])  # per-layer-type form; our models use one type
    merged = {**scaling, **params}
    theta = merged.get("rope_theta", cfg.get("rope_theta", 10000.0))
    rope_type = merged.get("rope_type", merged.get("type", "default")) or "default"
    if rope_type not in ROPE_TYPES:
        raise UnsupportedModelError(
            f"rope_type={rope_type!r} is not supported; supported rope types: {', '.join(ROPE_TYPES)}")
    if merged.get("partial_rotary_factor", 1.0) != 1.0:
        raise UnsupportedModelError(
            f"partial_rotary_factor={merged['partial_rotary_factor']!r} is not supported; only 1.0 is")
    if rope_type == "default":
        return RopeConfig(theta=float(theta))
    return RopeConfig(
        theta=float(theta), rope_type=rope_type, factor=float(merged["factor"]),
        low_freq_factor=float(merged.get("low_freq_factor", 1.0)),
        high_freq_factor=float(merged.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(merged.get(
            "original_max_position_embeddings", cfg.get("max_position_embeddings", 8192))))


def _sliding_windows(cfg: Mapping[str, Any], model_type: str, num_layers: int) -> tuple[int | None, ...]:
    window = cfg.get("sliding_window")
    if model_type == "mistral":
        return (window,) * num_layers
    if model_type in ("qwen2", "qwen3"):
        layer_types = cfg.get("layer_types")
        if layer_types is None:
            if not cfg.get("use_sliding_window", False) or window is None:
                return (None,) * num_layers
            first = cfg.get("max_window_layers", 28)
            return tuple(window if i >= first else None for i in range(num_layers))
        return tuple(window if t == "sliding_attention" else None for t in layer_types)
    return (None,) * num_layers


def _eos_ids(value) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (int(value),)


def config_from_hf(cfg: Mapping[str, Any]) -> DecoderConfig | EncoderConfig:
    """Build a config from a parsed ``config.json``.

    Raises UnsupportedModelError naming ``model_type`` when it is not one of
    llama, qwen2, qwen3, mistral or bert.
    """
    model_type = cfg.get("model_type")
    if model_type in ENCODER_TYPES:
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise UnsupportedModelError(
                f"position_embedding_type={cfg['position_embedding_type']!r} is not supported; only 'absolute' is")
        if cfg.get("hidden_act", "gelu") not in _ENCODER_ACTS:
            raise UnsupportedModelError(f"hidden_act={cfg['hidden_act']!r} is not supported for {model_type}; "
                                        f"supported: {', '.join(_ENCODER_ACTS)}")
        return EncoderConfig(
            model_type=model_type, vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"], num_layers=cfg["num_hidden_layers"],
            num_heads=cfg["num_attention_heads"], layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
            max_position_embeddings=cfg["max_position_embeddings"],
            type_vocab_size=cfg.get("type_vocab_size", 2), hidden_act=cfg.get("hidden_act", "gelu"),
            dtype=_dtype_name(cfg))
    if model_type not in DECODER_TYPES:
        raise UnsupportedModelError(
            f"config.json model_type={model_type!r} is not supported; supported: "
            f"{', '.join(DECODER_TYPES + ENCODER_TYPES)}")
    if cfg.get("hidden_act", "silu") != "silu":
        raise UnsupportedModelError(f"hidden_act={cfg['hidden_act']!r} is not supported for {model_type}; "
                                    "only 'silu' is")
    heads = cfg["num_attention_heads"]
    layers = cfg["num_hidden_layers"]
    attention_bias = bool(cfg.get("attention_bias", False))
    return DecoderConfig(
        model_type=model_type, vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"], num_layers=layers, num_heads=heads,
        num_kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope=rope_from_hf(cfg),
        max_position_embeddings=cfg.get("max_position_embeddings", 2048),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=True if model_type == "qwen2" else attention_bias,
        o_bias=False if model_type == "qwen2" else attention_bias,
        mlp_bias=bool(cfg.get("mlp_bias", False)),
        qk_norm=model_type == "qwen3",
        sliding_windows=_sliding_windows(cfg, model_type, layers),
        bos_token_id=cfg.get("bos_token_id"), eos_token_ids=_eos_ids(cfg.get("eos_token_id")),
        dtype=_dtype_name(cfg))
