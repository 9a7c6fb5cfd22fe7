"""Tiny seeded checkpoints (from tests/models/tiny.py) with a byte-level tokenizer, their exports, and oracles.

Buckets are kept tiny so the suite compiles few programs: batch (1, 4), context (16, 64),
8-token pages, 16-token prefill chunks. The prompts of ``tests.models.tiny.PROMPTS``
(1, 9 and 24 tokens, 32 new tokens each) then run through contexts 16 and 64 and
batches 1 and 4, and the 24-token prompt is prefilled in two chunks.
"""
import json
import os

import numpy as np

from models.tiny import CASES, NEW_TOKENS, PROMPTS, hf_greedy, make_tiny

__all__ = ["CASES", "NEW_TOKENS", "PROMPTS", "hf_greedy", "make_tiny", "LADDER", "CHAT_TEMPLATE",
           "write_byte_tokenizer", "perturb"]

LADDER = dict(batch=(1, 4), context=(16, 64), block_size=8, prefill_chunk=16)
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</s>{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def write_byte_tokenizer(folder) -> None:
    """A byte-level BPE over exactly 256 tokens (ids 0..255, the tiny models' vocabulary), no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": CHAT_TEMPLATE, "eos_token": alphabet[2]}, f)


def perturb(folder, out, key="model.layers.1.mlp.down_proj.weight", seed=0) -> str:
    """A copy of a checkpoint folder with noise added to one weight (the negative control)."""
    import shutil
    from safetensors.numpy import load_file, save_file
    shutil.copytree(folder, out)
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    noise = np.random.default_rng(seed).normal(0, 0.5, tensors[key].shape).astype(np.float32)
    tensors[key] = tensors[key] + noise
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    return str(out)
