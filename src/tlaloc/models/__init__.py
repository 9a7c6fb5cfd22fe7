"""``tlaloc.models``: decoders (Llama, Qwen2, Qwen3, Mistral) and a BERT encoder, and their loaders.

Models are pure functions over a weights pytree and a frozen config; they are written
with ``tlaloc.numpy`` and run eagerly on NumPy arrays::

    import tlaloc.models as tm
    model = tm.load("path/to/hf_folder_or_file.gguf")
    logits = model.logits([[1, 2, 3]])                     # (1, 3, V)
    cache = tm.KVCache.for_config(model.config, batch=1, max_len=64)
    logits = tm.decoder_forward(model.config, model.weights, ids, positions, cache)
"""
from .config import DecoderConfig, EncoderConfig, RopeConfig, config_from_hf
from .decoder import decoder_forward, decoder_hidden, lm_head
from .encoder import encode, encoder_forward, mean_pool
from .errors import CheckpointError, UnsupportedModelError
from .kv_cache import KVCache, NoCache
from .loading import Model, load, load_gguf, load_hf
from .tokenizer import Tokenizer
from .weights import check_keys, expected_shapes

__all__ = [
    "DecoderConfig", "EncoderConfig", "RopeConfig", "config_from_hf",
    "decoder_forward", "decoder_hidden", "lm_head", "encode", "encoder_forward", "mean_pool",
    "CheckpointError", "UnsupportedModelError", "KVCache", "NoCache",
    "Model", "load", "load_gguf", "load_hf", "Tokenizer", "check_keys", "expected_shapes",
]
