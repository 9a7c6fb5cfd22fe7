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
  Roofline: the memory read bandwidth measured here (the best of a NumPy and
  a torch sum over 512 MiB, on the chosen clock) divided by the weight bytes
  read per step (all parameters, the tied embedding counted once as the LM
  head; the KV cache is small at this context and ignored), times the batch.
* 6. prefill: a 512-token prompt (64 with --quick), batch 1, float32.

tlaloc: the same checkpoint saved with ``save_pretrained``, exported with
``tlaloc.serving.export`` (f32 or bf16 storage; batch buckets 1 and 8, context
64; for prefill a batch-1 bucket of 528 tokens with a 512-token chunk) and run by
``tlaloc.serving.Engine`` (submit, then step until done; decode time is from the
first generated token to the last). Greedy tokens of sequence 0 are compared
with transformers'. Without ``tlaloc.serving.Engine`` the tlaloc column says why.

``--quick``: 2 of the 30 layers, batch 1, float32, 4 new tokens, a 64-token
prefill from a single artifact (a smoke run, not a measurement).

Goals (issue 9): decode ≥ 2× transformers and ≥ 60% of the roofline; prefill ≥ 2× transformers.
"""
from __future__ import annotations

import os
import sys
import tempfile

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


def decode_tokens_per_s(torch, model, prompts, new_tokens: int, repeats: int) -> tuple:
    """(Timing of seconds per generated token over the batch, greedy token ids of sequence 0)."""
    ids = torch.tensor(prompts)
    batch = len(prompts)
    samples, tokens = [], []
    with torch.inference_mode():
        for _ in range(repeats + 1):                                   # the first run warms up
            out = model(ids, use_cache=True)
            cache, nxt = out.cache, out.logits[:, -1].argmax(-1, keepdim=True)
            tokens = [int(nxt[0, 0])]
            t0 = common.now()
            for _ in range(new_tokens):
                out = model(nxt, cache=cache, use_cache=True)
                cache, nxt = out.cache, out.logits[:, -1].argmax(-1, keepdim=True)
                tokens.append(int(nxt[0, 0]))
            samples.append((common.now() - t0) / (new_tokens * batch))
    return common.Timing(samples[1:]), tokens


def prefill_time(torch, model, prompt, repeats: int) -> common.Timing:
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        return common.time_calls(lambda: model(ids, use_cache=True), repeats=repeats, warmup=1)


def _tok_s(t) -> str:
    return f"{1 / t.median:.1f} tok/s" if isinstance(t, common.Timing) else "—"


def _roof(t, roof) -> str:
    return f"{100 / t.median / roof:.0f}%" if isinstance(t, common.Timing) else "—"


def _try(what, fn):
    """``fn()``, or the reason it failed (a string), so that the peer's numbers still print."""
    try:
        return fn()
    except Exception as e:
        return f"{what}: {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"


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
    import llm_tlaloc as T
    common.torch_threads(torch)
    repeats = repeats or (2 if quick else 5)
    bw, how = read_bandwidth(torch)
    print(f"measured read bandwidth: {bw / 1e9:.1f} GB/s ({how})")
    layers = 2 if quick else 30
    batches = (1,) if quick else (1, 8)
    dtypes = ("float32",) if quick else ("float32", "bfloat16")
    new_tokens = 4 if quick else 32
    prefill_tokens = 64 if quick else 512
    shape = "" if layers == 30 else f", {layers} of 30 layers"
    vocab = SMOLLM2_135M["vocab_size"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tlaloc-bench-") as tmp:
        model, n_params = build_model(torch, transformers, torch.float32, layers)
        ckpt = None if why_tl else _try("checkpoint", lambda: T.save_checkpoint(model, os.path.join(tmp, "hf")))
        for dtype_name in dtypes:
            if dtype_name == "bfloat16":
                model = model.to(torch.bfloat16)
            weight_bytes = n_params * (4 if dtype_name == "float32" else 2)
            engine, note_tl = why_tl or ckpt, ""
            if isinstance(ckpt, str) and not why_tl and os.path.isdir(ckpt):
                context = (128,) if quick else (64,)
                art = _try("export", lambda: T.export_artifact(
                    ckpt, os.path.join(tmp, f"art-{dtype_name}"), dtype="f32" if dtype_name == "float32" else "bf16",
                    batch=batches, context=context, prefill_chunk=prefill_tokens if quick else None))
                engine = art if isinstance(art, str) else _try("load", lambda: T.load_engine(art[0]))
                if not isinstance(engine, str):
                    engine, load_s = engine
                    note_tl = f"; export {art[1]:.0f} s, load {load_s:.1f} s"
            for b in batches:
                prompts = T._prompts(b, 16, vocab)
                t_hf, hf_tokens = decode_tokens_per_s(torch, model, prompts, new_tokens, repeats)
                t_tl, agree = engine, ""
                if not isinstance(engine, str):
                    got = _try("decode", lambda: T.decode_timing(engine, b, new_tokens, repeats, vocab))
                    t_tl = got if isinstance(got, str) else got[0]
                    if not isinstance(got, str):
                        k = min(8, len(got[1]), len(hf_tokens))
                        agree = f"; greedy tokens {'agree' if got[1][:k] == hf_tokens[:k] else 'DIFFER'} ({k})"
                roof = b * bw / weight_bytes                          # tokens/s
                goal = ""
                if isinstance(t_tl, common.Timing):
                    ok = t_tl.median <= t_hf.median / 2 and 1 / t_tl.median >= 0.6 * roof
                    goal = f"goal {'met' if ok else 'missed'}; "
                rows.append(common.Row(
                    f"decode {dtype_name} batch {b} ({new_tokens} tokens{shape})",
                    {"tlaloc": t_tl, "transformers": t_hf},
                    note=f"{goal}tok/s: tlaloc {_tok_s(t_tl)}, transformers {_tok_s(t_hf)}; roofline "
                         f"{roof:.1f} tok/s ({weight_bytes / 1e6:.0f} MB/step): tlaloc {_roof(t_tl, roof)}, "
                         f"transformers {_roof(t_hf, roof)}{agree}{note_tl}"))
            if dtype_name == "float32":
                prompt = T._prompts(1, prefill_tokens, vocab)[0]
                t_hf = prefill_time(torch, model, prompt, repeats)
                t_tl = engine
                if not quick and not isinstance(engine, str):           # a bucket that holds the long prompt
                    art = _try("export", lambda: T.export_artifact(
                        ckpt, os.path.join(tmp, "art-prefill"), dtype="f32", batch=(1,),
                        context=(prefill_tokens + 16,), prefill_chunk=prefill_tokens))
                    t_tl = art if isinstance(art, str) else _try("load", lambda: T.load_engine(art[0]))
                    if not isinstance(t_tl, str):
                        t_tl = _try("prefill", lambda e=t_tl[0]: T.prefill_timing(e, prefill_tokens, repeats, vocab))
                elif not isinstance(engine, str):
                    t_tl = _try("prefill", lambda: T.prefill_timing(engine, prefill_tokens, repeats, vocab))
                per = {k: (common.Timing([x / prefill_tokens for x in v.samples]) if isinstance(v, common.Timing)
                           else v) for k, v in (("tlaloc", t_tl), ("transformers", t_hf))}
                goal = ""
                if isinstance(per["tlaloc"], common.Timing):
                    goal = f"goal {'met' if per['tlaloc'].median <= per['transformers'].median / 2 else 'missed'}; "
                rows.append(common.Row(
                    f"prefill float32 batch 1, {prefill_tokens} tokens{shape} (time per token)", per,
                    note=f"{goal}tok/s: tlaloc {_tok_s(per['tlaloc'])}, transformers {_tok_s(per['transformers'])}; "
                         f"tlaloc: submit to first token, transformers: one forward"))
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
