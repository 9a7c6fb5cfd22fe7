"""How XLA CPU's f32 dot time grows with the number of rows (the decode batch).

    python benchmarks/xla_dot_scaling.py [--threads N]

Forty (4608, 576) float32 weights (424 MB, about the SmolLM2-135M decoder's
matrices) multiplied by an (M, 576) activation for M = 1, 4, 8, 16, with the
weight stored (out, in) (Hugging Face's layout, contracted on its second axis)
and (in, out). Prints the median time of 7 calls, the weight bytes read per
second and GFLOP/s. A decode step at batch M cannot be cheaper than this, so
``16 * t(1) / t(16)`` bounds the aggregate tokens/s speed-up of 16 concurrent
streams over one (issue 9, goal 6): the last column. JAX only: this measures
XLA, not tlaloc.
"""
from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=None, help="limit XLA CPU to N threads")
    args = p.parse_args()
    if args.threads:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                                   f"intra_op_parallelism_threads={args.threads}").strip()
    import jax
    import numpy as np
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((4608, 576)).astype(np.float32) for _ in range(40)]
    layouts = {"W(out,in)": ([jax.device_put(w) for w in weights], 1),
               "W(in,out)": ([jax.device_put(np.ascontiguousarray(w.T)) for w in weights], 0)}
    nbytes = sum(w.nbytes for w in weights)

    def program(axis):
        def run(x, *ws):
            acc = 0.0
            for w in ws:
                y = jax.lax.dot_general(x, w, (((1,), (axis,)), ((), ())))
                acc = acc + y[:, :8].sum()
            return acc
        return jax.jit(run)

    print(f"{len(weights)} weights, {nbytes / 1e6:.0f} MB; threads: {args.threads or 'all'}")
    print("| M | layout | ms | GB/s of weights | GFLOP/s | M·t(1)/t(M) |\n|---|---|---|---|---|---|")
    base = {}
    for m in (1, 4, 8, 16):
        x = jax.device_put(rng.standard_normal((m, 576)).astype(np.float32))
        for name, (ws, axis) in layouts.items():
            f = program(axis)
            f(x, *ws).block_until_ready()
            times = []
            for _ in range(7):
                t0 = time.perf_counter()
                f(x, *ws).block_until_ready()
                times.append(time.perf_counter() - t0)
            t = sorted(times)[3]
            base.setdefault(name, t)
            flops = 2 * m * sum(w.size for w in weights)
            print(f"| {m} | {name} | {t * 1e3:.1f} | {nbytes / t / 1e9:.1f} | {flops / t / 1e9:.1f} | "
                  f"{m * base[name] / t:.2f}× |")


if __name__ == "__main__":
    main()
