"""What a step pays per donated KV pool array: one pool per layer against one stacked pool.

    python benchmarks/donated_pools.py [--layers 30] [--weights 190] [--repeats 5]

A serving step donates its KV pools to the program and stores the pools it returns in their
place, so each pool array is created and destroyed once a step. This measures that cost alone
with a small jitted program shaped like SmolLM2-135M's decode step on the host side:
``--weights`` small read-only arguments and 2 × ``--layers`` donated pools (K and V per layer,
3 × 64 × 16 × 64 float32 each), against 2 donated pools holding the same bytes (layers
stacked). Each step calls ``execute_sharded``, takes the outputs apart, puts the new pools in
place of the old ones (which frees them) and reads the one small output on the host, as
``Executor.run`` does. Prints microseconds per step, best of ``--repeats`` runs of 100 steps.
The exported programs stack float32 pools this way (``tlaloc.serving.export.programs``;
``decode_step.py``'s ``-perlayer`` variants measure the whole step both ways).
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

POOL = 3 * 64 * 16 * 64          # float32 elements of one layer's K (or V) pool in the test artifacts


def step_time(n_pools: int, pool_elems: int, n_weights: int, repeats: int) -> float:
    """Seconds per step (best of ``repeats`` runs of 100) with ``n_pools`` donated pools."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def program(token, *args):
        pools, weights = args[:n_pools], args[n_pools:]
        s = token
        for w in weights:                                  # every argument used (jit drops unused ones)
            s = s + w[:1]
        return (s,) + tuple(p.at[0].set(s[0]) for p in pools)

    pools = [jnp.zeros((pool_elems,), jnp.float32) for _ in range(n_pools)]
    weights = [jnp.ones((64,), jnp.float32) for _ in range(n_weights)]
    token = jnp.ones((1,), jnp.float32)
    exe = jax.jit(program, donate_argnums=tuple(range(1, n_pools + 1))).lower(token, *pools, *weights) \
        .compile()._executable.xla_executable
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(100):
            results = exe.execute_sharded([token, *pools, *weights])
            outs = [r[0] for r in results.disassemble_into_single_device_arrays()]
            pools = outs[1:]                               # the donated arrays are released here
            np.asarray(outs[0])
        best = min(best, (time.perf_counter() - t0) / 100)
    return best


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv, extra=lambda p: (
        p.add_argument("--layers", type=int, default=30),
        p.add_argument("--weights", type=int, default=190)))
    if args.threads is None:
        common.limit_threads(2)
    repeats = args.repeats or (2 if args.quick else 5)
    common.print_header("donated KV pool arrays per decode step")
    per_layer = step_time(2 * args.layers, POOL, args.weights, repeats)
    stacked = step_time(2, args.layers * POOL, args.weights, repeats)
    print(f"\n| pools | µs per step |\n|---|---|\n| {2 * args.layers} (one K and one V per layer) | "
          f"{per_layer * 1e6:.0f} |\n| 2 (layers stacked) | {stacked * 1e6:.0f} |")
    print(f"\nper-layer pools cost {(per_layer - stacked) * 1e6:.0f} µs more per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
