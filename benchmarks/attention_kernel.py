"""Time the CPU decode-attention kernel (src/tlaloc/kernels/cpu/paged_attention.cc) alone.

    .venv/bin/python benchmarks/attention_kernel.py [--baseline LIBRARY] [--repeats 20] [--layers 30] [--batches 1 16]
        [--seq-lens 32 128 255]

SmolLM2-135M's decode shapes: H=9 query heads, K=3 kv heads, head dim E=64, pages of
BS=16 slots, M=16 pages per row (seq_len up to 256), float32 pools, T=1. For each batch
(1, 16) and seq_len (32, 128, 255) one jitted program chains ``--layers`` kernel calls, each
on its own pools and each taking the previous call's output as its query (so they run one
after another). At batch 16 the pools then come from memory, as in a step; at batch 1, 30
layers' pools fit a 32 MB L3 (``--layers 200`` reads them from memory). It prints the best
and the median of ``--repeats`` runs per call (the program's time divided by the layers).
The kernel is built, as the tests build it, from the sources of the ``tlaloc`` Python
imports (in a git worktree: ``PYTHONPATH=src``); ``--baseline`` times another build of the
same target (e.g. an older source) in the same process, the two programs taking turns, so
that both see the same load:

    mkdir -p /tmp/old
    git show REV:src/tlaloc/kernels/cpu/paged_attention.cc > /tmp/old/paged_attention.cc
    cp src/tlaloc/kernels/cpu/common.h /tmp/old/
    g++ -O3 -march=native -std=c++17 -shared -fPIC -w -I.venv/lib/python3.11/site-packages/jaxlib/include \\
        /tmp/old/paged_attention.cc -o /tmp/old/attention.so
    .venv/bin/python benchmarks/attention_kernel.py --baseline /tmp/old/attention.so
"""
from __future__ import annotations

import argparse
import ctypes
import os
import time

import numpy as np

import jax
import jax.numpy as jnp

jax.config.update("jax_platforms", "cpu")

H, K, E, BS, M = 9, 3, 64, 16, 16
TARGET = "tlaloc_cpu_paged_attention_f32"


BASELINE = "baseline_" + TARGET


def register(baseline: str | None) -> None:
    from tlaloc._runtime import cpu_kernels
    if not cpu_kernels.load():
        raise SystemExit(f"the CPU kernels cannot be built here: {cpu_kernels.reason()}")
    if baseline is not None:
        lib = ctypes.CDLL(os.path.abspath(baseline))
        jax.ffi.register_ffi_target(BASELINE, jax.ffi.pycapsule(getattr(lib, TARGET)), platform="cpu")


def attention(target, q, kc, vc, tables, lens, positions):
    return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(q.shape, jnp.float32))(
        q, kc, vc, tables, lens, positions, scale=np.float32(E ** -0.5), window=np.int64(-1))


def time_case(targets: list[str], B: int, seq_len: int, layers: int, repeats: int) -> list[tuple[float, float]]:
    """(best, median) seconds per call of each target, the targets' programs taking turns."""
    rng = np.random.default_rng(0)
    P = B * M + 1                                               # page 0: scratch, as the serving pools
    pools = [(jnp.asarray(rng.standard_normal((P, BS, K, E), np.float32)),
              jnp.asarray(rng.standard_normal((P, BS, K, E), np.float32))) for _ in range(layers)]
    tables = jnp.asarray((1 + rng.permutation(B * M)).reshape(B, M).astype(np.int32))   # scattered pages
    lens = jnp.full((B,), seq_len, jnp.int32)
    positions = jnp.full((B, 1), seq_len - 1, jnp.int32)
    q = jnp.asarray(rng.standard_normal((B, 1, H, E), np.float32))

    def program(target):
        def step(q, pools):
            for kc, vc in pools:
                q = attention(target, q, kc, vc, tables, lens, positions)
            return q
        return jax.jit(step)

    steps = [program(target) for target in targets]
    for step in steps:
        step(q, pools).block_until_ready()
    times = [[] for _ in targets]
    for _ in range(repeats):
        for step, kept in zip(steps, times):
            start = time.perf_counter()
            step(q, pools).block_until_ready()
            kept.append((time.perf_counter() - start) / layers)
    return [(min(kept), float(np.median(kept))) for kept in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="a built kernel library to time against the current sources")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[32, 128, 255])
    args = parser.parse_args()
    register(args.baseline)
    targets = [TARGET] + ([BASELINE] if args.baseline else [])
    print(f"load average {os.getloadavg()[0]:.2f}; us per call ({args.layers} calls chained), "
          f"best / median of {args.repeats}: " + (" | ".join(["current", "baseline"][:len(targets)])))
    for B in args.batches:
        for seq_len in args.seq_lens:
            figures = time_case(targets, B, seq_len, args.layers, args.repeats)
            print(f"B={B:2d} seq_len={seq_len:3d}: " +
                  " | ".join(f"{best * 1e6:8.1f} {median * 1e6:8.1f}" for best, median in figures))
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
