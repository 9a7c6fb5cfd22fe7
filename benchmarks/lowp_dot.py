"""XLA CPU's low-precision dots by row count: why ``tlaloc.models.lowp`` stacks two activation terms.

    python benchmarks/lowp_dot.py [--threads 1] [--rows 1,2,16] [--repeats 5]

Twelve (576, 3072) weights (a SmolLM2-135M layer's gate/up, enough not to fit in cache)
multiplied by an (M, 576) activation, three ways: float32 x float32, bfloat16 x bfloat16
-> float32 and int8 x int8 -> int32 (``preferred_element_type``, the weight never
converted). Prints the best of ``--repeats`` calls in ms per 12 products and the ratio to
float32 at the same M. On this machine the narrow dots take a slow path at M = 1 and the
fast one (oneDNN/YNNPACK, AMX where present) from M = 2. JAX only: this measures XLA.
"""
from __future__ import annotations

import argparse
import os
import time


def _best(fn, args, repeats):
    fn(*args)[0].block_until_ready()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(*args)[0].block_until_ready()
        times.append(time.perf_counter() - t)
    return 1e3 * min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="XLA CPU threads (default 1)")
    p.add_argument("--rows", default="1,2,16")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                               f"intra_op_parallelism_threads={args.threads}").strip()
    import jax
    import jax.numpy as jnp
    import numpy as np
    rng = np.random.default_rng(0)
    n_w, d, n = 12, 576, 3072
    w32 = [jnp.asarray(rng.standard_normal((d, n)).astype(np.float32)) for _ in range(n_w)]
    w16 = [w.astype(jnp.bfloat16) for w in w32]
    w8 = [jnp.asarray(rng.integers(-127, 128, (d, n)).astype(np.int8)) for _ in range(n_w)]
    f32 = jax.jit(lambda x, ws: [x @ w for w in ws])
    bf16 = jax.jit(lambda x, ws: [jax.lax.dot(x, w, preferred_element_type=jnp.float32) for w in ws])
    int8 = jax.jit(lambda x, ws: [jax.lax.dot(x, w, preferred_element_type=jnp.int32) for w in ws])
    print(f"threads {args.threads}; {n_w} weights ({d}, {n}); ms per {n_w} products, best of {args.repeats}")
    print("| M | f32 | bf16 x bf16 -> f32 | int8 x int8 -> i32 | bf16 vs f32 | int8 vs f32 |")
    print("|---|---|---|---|---|---|")
    for m in (int(r) for r in args.rows.split(",")):
        x = jnp.asarray(rng.standard_normal((m, d)).astype(np.float32))
        xi = jnp.asarray(rng.integers(-127, 128, (m, d)).astype(np.int8))
        t32 = _best(f32, (x, w32), args.repeats)
        t16 = _best(bf16, (x.astype(jnp.bfloat16), w16), args.repeats)
        t8 = _best(int8, (xi, w8), args.repeats)
        print(f"| {m} | {t32:.1f} | {t16:.1f} | {t8:.1f} | {t16 / t32:.2f}× | {t8 / t32:.2f}× |")


if __name__ == "__main__":
    main()
