"""Decode and prefill throughput of a SmolLM2-135M-shaped model, tlaloc vs transformers.

    python benchmarks/llm_inference.py [--quick] [--repeats N] [--threads N]

The peer is transformers' ``LlamaForCausalLM`` with SmolLM2-135M's configuration
(30 layers, C=576, 9 heads, 3 KV heads, MLP 1536, vocab 49152, tied
embeddings). This machine reaches no model hub, so the weights are a seeded
random initialisation: the arithmetic and the bytes moved per token are those
of the real model; the tokens produced are meaningless.

* 5. decode: greedy, KV cache on, batch 1 and 8, float32 and bfloat16 weights;
  a 16-token prompt is prefilled first (not timed), then ``new_tokens`` single
  token steps are timed. tokens/s = batch × new_tokens / time.
  Roofline: the memory read bandwidth measured here (the best of a NumPy
  and a torch sum over 512 MiB, on the chosen clock) divided by the weight bytes read per step (all
  parameters, the tied embedding counted once as the LM head; the KV cache is
  small at this context and ignored), times the batch.
* 6. prefill: one forward pass over a 512-token prompt (64 with --quick), batch 1, float32.

``--quick`` keeps 2 of the 30 layers, 4 new tokens and batch 1 only (a smoke run, not a measurement).

tlaloc's side needs ``tlaloc.serving.Engine`` (the serving issue); until it
exists the tlaloc column says so and the peer's numbers are still printed.
Goals (issue 9): decode ≥ 2× transformers and ≥ 60% of the roofline; prefill ≥ 2× transformers.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import common  # noqa: E402

SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True, hidden_act="silu",
                    bos_token_id=0, eos_token_id=0)


def tlaloc_engine_missing() -> str | None:
    try:
        from tlaloc.serving import Engine  # noqa: F401
    except Exception:
        return "tlaloc.serving.Engine missing"
    return None


def read_bandwidth(torch=None, mib: int = 512) -> tuple:
    """Best measured read bandwidth in bytes/s, and how it was measured."""
    a = np.ones(mib * 2**20 // 4, np.float32)
    best, how = 0.0, ""
    for _ in range(3):
        t0 = common.now()
        np.add.reduce(a)
        bw = a.nbytes / (common.now() - t0)
        if bw > best:
            best, how = bw, "numpy sum"
    if torch is not None:
        ta = torch.from_numpy(a)
        for _ in range(3):
            t0 = common.now()
            ta.sum()
            bw = a.nbytes / (common.now() - t0)
            if bw > best:
                best, how = bw, f"torch sum, {torch.get_num_threads()} threads"
    return best, how


def build_model(torch, transformers, dtype, layers=None):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**dict(SMOLLM2_135M, num_hidden_layers=layers or 30))
    model = transformers.LlamaForCausalLM(config).to(dtype).eval()
    n_params = sum(p.numel() for p in model.parameters())          # tied embedding counted once
    return model, n_params


def decode_tokens_per_s(torch, model, batch: int, new_tokens: int, repeats: int) -> common.Timing:
    """Seconds per generated token (per sequence step / batch) over ``repeats`` runs."""
    ids = torch.randint(0, SMOLLM2_135M["vocab_size"], (batch, 16), generator=torch.Generator().manual_seed(1))
    samples = []
    with torch.inference_mode():
        for _ in range(repeats + 1):                                   # the first run warms up
            out = model(ids, use_cache=True)
            cache, nxt = out.cache, out.logits[:, -1].argmax(-1, keepdim=True)
            t0 = common.now()
            for _ in range(new_tokens):
                out = model(nxt, cache=cache, use_cache=True)
                cache, nxt = out.cache, out.logits[:, -1].argmax(-1, keepdim=True)
            samples.append((common.now() - t0) / (new_tokens * batch))
    return common.Timing(samples[1:])


def prefill_time(torch, model, tokens: int, repeats: int) -> common.Timing:
    ids = torch.randint(0, SMOLLM2_135M["vocab_size"], (1, tokens), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        return common.time_calls(lambda: model(ids, use_cache=True), repeats=repeats, warmup=1)


def _tok_s(t) -> str:
    return f"{1 / t.median:.1f} tok/s" if isinstance(t, common.Timing) else "—"


def run(quick: bool = False, repeats=None):
    common.print_header("5-6. decode and prefill (SmolLM2-135M shape, random weights)")
    torch = common.optional_import("torch")
    transformers = common.optional_import("transformers")
    why_tl = tlaloc_engine_missing()
    if why_tl:
        print(f"tlaloc: skipped: {why_tl}")
    if torch is None or transformers is None:
        common.print_skipped("decode/prefill", "torch or transformers not installed")
        return None
    common.torch_threads(torch)
    repeats = repeats or (2 if quick else 5)
    bw, how = read_bandwidth(torch)
    print(f"measured read bandwidth: {bw / 1e9:.1f} GB/s ({how})")
    rows = []
    configs = [("float32", 1), ("float32", 8), ("bfloat16", 1), ("bfloat16", 8)]
    if quick:
        configs = [("float32", 1), ("bfloat16", 1)]
    new_tokens = 4 if quick else 32
    layers = 2 if quick else 30
    shape = "" if layers == 30 else f", {layers} of 30 layers"
    for dtype_name in ("float32", "bfloat16"):
        batches = [b for d, b in configs if d == dtype_name]
        if not batches:
            continue
        model, n_params = build_model(torch, transformers, getattr(torch, dtype_name), layers)
        weight_bytes = n_params * (4 if dtype_name == "float32" else 2)
        for b in batches:
            t = decode_tokens_per_s(torch, model, b, new_tokens, repeats)
            roof = b * bw / weight_bytes                             # tokens/s
            rows.append(common.Row(f"decode {dtype_name} batch {b} ({new_tokens} tokens{shape})",
                                   {"tlaloc": why_tl or "not measured", "transformers": t},
                                   note=f"transformers {_tok_s(t)}, {100 * (1 / t.median) / roof:.0f}% of the "
                                        f"roofline {roof:.1f} tok/s ({weight_bytes / 1e6:.0f} MB/step)"))
        if dtype_name == "float32":
            tokens = 64 if quick else 512
            t = prefill_time(torch, model, tokens, repeats)
            per_tok = common.Timing([s / tokens for s in t.samples])
            rows.append(common.Row(f"prefill float32 batch 1, {tokens} tokens{shape} (time per token)",
                                   {"tlaloc": why_tl or "not measured", "transformers": per_tok},
                                   note=f"transformers {_tok_s(per_tok)}"))
        del model
    common.print_table(rows, ["transformers"])
    print(f"\n(seconds per token: median ± half the IQR over {repeats} runs, {common.CLOCK_NAME} clock; "
          f"weights: seeded random init)", flush=True)
    return rows


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv)
    run(args.quick, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
