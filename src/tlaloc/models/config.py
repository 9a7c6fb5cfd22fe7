"""Model configs: frozen dataclasses read from a Hugging Face ``config.json`` (or GGUF metadata).

Both spellings of rotary settings are accepted: transformers 4's ``rope_theta`` plus
``rope_scaling``, and transformers 5's ``rope_parameters: {rope_theta, rope_type, ...}``;
and both ``torch_dtype`` and ``dtype``.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from .errors import CheckpointError, UnsupportedModelError

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


def check_number(value, name: str, *, above_zero: bool = True) -> float:
    """``value`` as a float when it is a finite number > 0 (``above_zero``) or >= 0.

    CheckpointError otherwise, naming ``name`` (the config key), the value and the range:
    a NaN rope theta or a negative epsilon would load and then compute garbage.
    """
    expected = "a finite number " + ("> 0" if above_zero else ">= 0")
    try:
        x = None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        x = None
    if x is None or not math.isfinite(x) or x < 0 or (above_zero and x == 0):
        raise CheckpointError(f"{name}={value!r} is out of range: expected {expected}; "
                              "fix the value in the checkpoint's config (GGUF metadata or config.json)")
    return x


def check_count(value, name: str) -> int:
    """``value`` as an int when it is a positive integer (a count or size); CheckpointError naming ``name`` otherwise."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CheckpointError(f"{name}={value!r} is not supported: expected a positive integer; "
                              "fix the value in the checkpoint's config (GGUF metadata or config.json)")
    return value


def _required(cfg: Mapping[str, Any], key: str):
    if cfg.get(key) is None:
        raise CheckpointError(f"config.json lacks {key!r}; a {cfg.get('model_type')} config needs it "
                              "(add it, as transformers writes it)")
    return cfg[key]


def _count(cfg: Mapping[str, Any], key: str, default=None) -> int:
    value = cfg.get(key)
    if value is None and default is not None:
        return default
    return check_count(_required(cfg, key), f"config.json {key}")


def _dtype_name(cfg: Mapping[str, Any]) -> str:
    name = cfg.get("dtype") or cfg.get("torch_dtype") or "float32"
    return str(name).replace("torch.", "")


_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def _mapping(cfg: Mapping[str, Any], key: str) -> dict:
    value = cfg.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CheckpointError(f"config.json {key} must be an object like {{\"rope_type\": \"linear\", "
                              f"\"factor\": 2.0}} or null; got {type(value).__name__} {value!r}")
    return dict(value)


def rope_from_hf(cfg: Mapping[str, Any]) -> RopeConfig:
    """The rotary settings of a config.json, in either transformers 4 or 5 spelling.

    Raises CheckpointError for a theta or factor that is not a finite positive number,
    a scaling entry that is not an object, or a ``linear`` / ``llama3`` entry lacking
    keys transformers requires (it refuses those configs too).
    """
    params = _mapping(cfg, "rope_parameters")
    scaling = _mapping(cfg, "rope_scaling")
    where = "rope_parameters" if params else "rope_scaling"
    if "full_attention" in params and isinstance(params["full_attention"], Mapping):
        params = dict(params["full_attention"])  # per-layer-type form; our models use one type
    merged = {**scaling, **params}
    theta = merged.get("rope_theta", cfg.get("rope_theta", 10000.0))
    theta = check_number(theta, f"config.json {where + '.rope_theta' if 'rope_theta' in merged else 'rope_theta'}")
    rope_type = merged.get("rope_type", merged.get("type", "default")) or "default"
    if rope_type not in ROPE_TYPES:
        raise UnsupportedModelError(
            f"rope_type={rope_type!r} is not supported; supported rope types: {', '.join(ROPE_TYPES)}")
    if merged.get("partial_rotary_factor", 1.0) != 1.0:
        raise UnsupportedModelError(
            f"partial_rotary_factor={merged['partial_rotary_factor']!r} is not supported; only 1.0 is")
    if rope_type == "default":
        return RopeConfig(theta=theta)
    needed = ("factor",) if rope_type == "linear" else _LLAMA3_KEYS
    missing = [k for k in needed if merged.get(k) is None]
    if missing:
        raise CheckpointError(f"config.json {where} (rope_type {rope_type!r}) lacks {', '.join(missing)}; "
                              f"rope_type {rope_type!r} needs {', '.join(needed)} (transformers refuses it too: "
                              "missing required keys in rope_parameters)")
    factor = check_number(merged["factor"], f"config.json {where}.factor")
    if rope_type == "linear":
        return RopeConfig(theta=theta, rope_type=rope_type, factor=factor)
    low = check_number(merged["low_freq_factor"], f"config.json {where}.low_freq_factor")
    high = check_number(merged["high_freq_factor"], f"config.json {where}.high_freq_factor")
    if high <= low:
        raise CheckpointError(f"config.json {where}: high_freq_factor={high} must be greater than "
                              f"low_freq_factor={low} (the llama3 ramp divides by their difference)")
    return RopeConfig(
        theta=theta, rope_type=rope_type, factor=factor, low_freq_factor=low, high_freq_factor=high,
        original_max_position_embeddings=check_count(
            merged["original_max_position_embeddings"], f"config.json {where}.original_max_position_embeddings"))


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
    if not isinstance(cfg, Mapping):
        raise CheckpointError(f"config.json must hold a JSON object (model_type, hidden_size, ...); "
                              f"got {type(cfg).__name__}")
    model_type = cfg.get("model_type")
    if model_type in ENCODER_TYPES:
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise UnsupportedModelError(
                f"position_embedding_type={cfg['position_embedding_type']!r} is not supported; only 'absolute' is")
        if cfg.get("hidden_act", "gelu") not in _ENCODER_ACTS:
            raise UnsupportedModelError(f"hidden_act={cfg['hidden_act']!r} is not supported for {model_type}; "
                                        f"supported: {', '.join(_ENCODER_ACTS)}")
        hidden, heads = _count(cfg, "hidden_size"), _count(cfg, "num_attention_heads")
        _divides(hidden, heads, "config.json hidden_size", "num_attention_heads")
        return EncoderConfig(
            model_type=model_type, vocab_size=_count(cfg, "vocab_size"), hidden_size=hidden,
            intermediate_size=_count(cfg, "intermediate_size"), num_layers=_count(cfg, "num_hidden_layers"),
            num_heads=heads,
            layer_norm_eps=check_number(cfg.get("layer_norm_eps", 1e-12), "config.json layer_norm_eps",
                                        above_zero=False),
            max_position_embeddings=_count(cfg, "max_position_embeddings"),
            type_vocab_size=_count(cfg, "type_vocab_size", 2), hidden_act=cfg.get("hidden_act", "gelu"),
            dtype=_dtype_name(cfg))
    if model_type not in DECODER_TYPES:
        raise UnsupportedModelError(
            f"config.json model_type={model_type!r} is not supported; supported: "
            f"{', '.join(DECODER_TYPES + ENCODER_TYPES)}")
    if cfg.get("hidden_act", "silu") != "silu":
        raise UnsupportedModelError(f"hidden_act={cfg['hidden_act']!r} is not supported for {model_type}; "
                                    "only 'silu' is")
    hidden, heads = _count(cfg, "hidden_size"), _count(cfg, "num_attention_heads")
    layers = _count(cfg, "num_hidden_layers")
    if cfg.get("head_dim") is None:
        _divides(hidden, heads, "config.json hidden_size", "num_attention_heads")
    attention_bias = bool(cfg.get("attention_bias", False))
    return DecoderConfig(
        model_type=model_type, vocab_size=_count(cfg, "vocab_size"), hidden_size=hidden,
        intermediate_size=_count(cfg, "intermediate_size"), num_layers=layers, num_heads=heads,
        num_kv_heads=_count(cfg, "num_key_value_heads", heads),
        head_dim=_count(cfg, "head_dim", hidden // heads),
        rms_norm_eps=check_number(cfg.get("rms_norm_eps", 1e-6), "config.json rms_norm_eps", above_zero=False),
        rope=rope_from_hf(cfg),
        max_position_embeddings=_count(cfg, "max_position_embeddings", 2048),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=True if model_type == "qwen2" else attention_bias,
        o_bias=False if model_type == "qwen2" else attention_bias,
        mlp_bias=bool(cfg.get("mlp_bias", False)),
        qk_norm=model_type == "qwen3",
        sliding_windows=_sliding_windows(cfg, model_type, layers),
        bos_token_id=cfg.get("bos_token_id"), eos_token_ids=_eos_ids(cfg.get("eos_token_id")),
        dtype=_dtype_name(cfg))


def _divides(hidden: int, heads: int, hidden_name: str, heads_name: str) -> None:
    """CheckpointError unless ``heads`` divides ``hidden`` (the head size is their quotient)."""
    if hidden % heads:
        raise CheckpointError(f"{hidden_name}={hidden} is not divisible by {heads_name}={heads}: the head size "
                              "would not be whole; fix the head count (or give the head size explicitly)")
