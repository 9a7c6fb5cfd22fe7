"""Eager reference generation: greedy and seeded sampling over a :class:`tlaloc.models.Model`.

This is the oracle for the compiled serving runtime, not the runtime: it runs the model
in NumPy with a contiguous :class:`~tlaloc.models.KVCache`, one prompt at a time.

Sampling, per step and per prompt: logits / temperature, keep the ``top_k`` largest,
keep the smallest set whose probability reaches ``top_p`` (always at least one token),
renormalize, then draw with ``numpy.random.default_rng([seed, prompt_index])``.
``temperature == 0`` is greedy (argmax; the lowest id wins a tie).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from ...models import KVCache, Model, decoder_forward


@dataclasses.dataclass(frozen=True)
class GenerationResult:
    """New token ids (prompt excluded), their text, and why generation stopped ("stop" or "length")."""
    token_ids: list[int]
    text: str
    finish_reason: str


def sample_next(logits: np.ndarray, rng, temperature: float = 0.0, top_k: int | None = None,
                top_p: float | None = None) -> int:
    """One token id from logits (V,)."""
    if temperature == 0.0:
        return int(np.argmax(logits))
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    scaled = logits.astype(np.float64) / temperature                       # (V,)
    order = np.argsort(-scaled, kind="stable")                             # (V,) best first
    kept = order[:top_k] if top_k else order                               # (k,)
    probs = np.exp(scaled[kept] - scaled[kept[0]])
    probs /= probs.sum()                                                   # (k,)
    if top_p is not None and top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(probs), top_p) + 1)           # smallest set reaching top_p
        kept, probs = kept[:keep], probs[:keep] / probs[:keep].sum()
    u = rng.random()
    index = min(int(np.searchsorted(np.cumsum(probs), u, side="right")), len(kept) - 1)
    return int(kept[index])


def _prompt_ids(model: Model, prompt) -> list[int]:
    if isinstance(prompt, str):
        if model.tokenizer is None:
            raise ValueError(f"{model.source} has no tokenizer; pass token ids instead of text")
        return model.tokenizer.encode(prompt)
    return [int(t) for t in prompt]


def generate(model: Model, prompts: Sequence, max_new_tokens: int = 32, temperature: float = 0.0,
             top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
             stop: Sequence[int | str] | None = None) -> list[GenerationResult]:
    """Generate up to ``max_new_tokens`` for each prompt (a string or a list of token ids).

    ``stop`` holds token ids and strings; ``None`` means the model's EOS ids, ``[]``
    means never stop early. A stop token is kept in ``token_ids``; a stop string ends
    the text before it.
    """
    if model.is_encoder:
        raise ValueError(f"{model.source} is an encoder; use Model.embed, not generate")
    cfg = model.config
    stop = list(cfg.eos_token_ids) if stop is None else list(stop)
    stop_ids = {s for s in stop if isinstance(s, int)}
    stop_texts = [s for s in stop if isinstance(s, str)]
    results = []
    for index, prompt in enumerate(prompts):
        ids = _prompt_ids(model, prompt)
        if not ids:
            raise ValueError(f"prompt {index} is empty")
        rng = np.random.default_rng([0 if seed is None else seed, index])
        cache = KVCache.for_config(cfg, batch=1, max_len=len(ids) + max_new_tokens)
        tokens = np.asarray([ids])                                         # (1, T)
        positions = np.arange(len(ids))[None]                              # (1, T)
        new, reason = [], "length"
        for _ in range(max_new_tokens):
            logits = decoder_forward(cfg, model.weights, tokens, positions, cache, last_only=True)  # (1, V)
            token = sample_next(logits[0], rng, temperature, top_k, top_p)
            new.append(token)
            if token in stop_ids:
                reason = "stop"
                break
            if stop_texts and model.tokenizer is not None:
                text = model.tokenizer.decode(new)
                if any(s in text for s in stop_texts):
                    reason = "stop"
                    break
            positions = positions[:, -1:] + 1                              # (1, 1)
            tokens = np.asarray([[token]])                                 # (1, 1)
        text = model.tokenizer.decode(new) if model.tokenizer is not None else ""
        for s in stop_texts:
            if s in text:
                text = text[:text.index(s)]
        results.append(GenerationResult(new, text, reason))
    return results
