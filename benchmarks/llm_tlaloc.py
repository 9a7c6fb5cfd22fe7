"""tlaloc's side of the LLM benchmarks: a checkpoint folder, its serving artifact, and timings
of ``tlaloc.serving.Engine`` (used by llm_inference.py and serving.py).

The checkpoint is the seeded random ``LlamaForCausalLM`` that transformers builds for
the peer, saved with ``save_pretrained``; ``eos_token_id`` is set to the last id so
that greedy decoding of random weights does not stop early, and a word-level
tokenizer covers the vocabulary (the server detokenizes what it returns). Artifacts are exported
with ``tlaloc.serving.export.export`` into a temporary folder per run.
"""
from __future__ import annotations

import json
import os

import common


def save_checkpoint(model, folder: str) -> str:
    """``model`` (a transformers model) as a Hugging Face folder with an EOS id nothing emits
    and a word-level tokenizer over the model's whole vocabulary (token ``i`` is ``<i>``)."""
    model.save_pretrained(folder)
    path = os.path.join(folder, "config.json")
    with open(path) as fh:
        cfg = json.load(fh)
    cfg["eos_token_id"] = cfg["vocab_size"] - 1
    with open(path, "w") as fh:
        json.dump(cfg, fh)
    write_tokenizer(folder, cfg["vocab_size"])
    return folder


def write_tokenizer(folder: str, vocab_size: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel(vocab={f"<{i}>": i for i in range(vocab_size)}, unk_token="<0>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(os.path.join(folder, "tokenizer.json"))


def export_artifact(folder: str, out: str, *, dtype: str, batch, context, prefill_chunk=None, weights=None) -> tuple:
    """(artifact dir, seconds) for ``export(folder, out, ...)``; dtype "f32" or "bf16"; weights None,
    "int8", "q8_0" or "q4_1"."""
    from tlaloc.serving.export import export
    t0 = common.now()
    export(folder, out, batch=tuple(batch), context=tuple(context), block_size=16, dtype=dtype,
           prefill_chunk=prefill_chunk, weights=weights, progress=False)
    return out, common.now() - t0


def load_engine(artifact: str):
    from tlaloc.serving import Engine
    t0 = common.now()
    engine = Engine(artifact)
    return engine, common.now() - t0


def _prompts(batch: int, length: int, vocab: int) -> list:
    return [[(7 + 31 * b + 13 * i) % (vocab - 1) for i in range(length)] for b in range(batch)]


def run_requests(engine, prompts, new_tokens: int) -> tuple:
    """Submit ``prompts`` together and step until all finish.

    Returns (seconds to the first step that yields tokens, seconds per token after it
    counting the tokens of all sequences, token ids of request 0)."""
    ids = [engine.submit(p, max_new_tokens=new_tokens, stop_ids=()) for p in prompts]
    t0 = common.now()
    first, last, after_first, out0 = None, None, 0, []
    while engine.has_work():
        events = engine.step()
        now = common.now()
        got = sum(len(e.token_ids) for e in events)
        out0 += [t for e in events if e.request_id == ids[0] for t in e.token_ids]
        if got:
            if first is None:
                first = now
            else:
                after_first += got
            last = now
    per_token = (last - first) / after_first if after_first else float("nan")
    return first - t0, per_token, out0


def decode_timing(engine, batch: int, new_tokens: int, repeats: int, vocab: int) -> tuple:
    """(Timing of seconds per generated token over the batch, token ids of sequence 0).

    A 16-token prompt per sequence; the prefill step and the first token are not timed."""
    prompts = _prompts(batch, 16, vocab)
    run_requests(engine, prompts, new_tokens + 1)                # warm-up: compiles the buckets
    samples, tokens = [], None
    for _ in range(repeats):
        _, per_token, tokens = run_requests(engine, prompts, new_tokens + 1)
        samples.append(per_token)                                # already over all sequences' tokens
    return common.Timing(samples), tokens


def prefill_timing(engine, tokens: int, repeats: int, vocab: int) -> common.Timing:
    """Seconds from submitting one ``tokens``-token prompt to its first generated token."""
    prompt = _prompts(1, tokens, vocab)
    run_requests(engine, prompt, 1)
    return common.Timing([run_requests(engine, prompt, 1)[0] for _ in range(repeats)])
