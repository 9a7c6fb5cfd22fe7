"""Compiled gradients: ``tl.jit(tl.grad(f))`` vs ``jax.jit(jax.grad(f))`` on XLA CPU.

    python benchmarks/jit_grad.py [--quick] [--repeats N] [--clock cpu] [--threads N]

Same functions as the eager benchmark (float64, so JAX runs with x64 enabled),
small, medium and large sizes. Arguments are NumPy arrays, as a user passes
them; every call ends with ``block_until_ready`` on the outputs (both return
device arrays). The first call (trace + compile) is timed once and shown in
the note column.

Goal (issue 9): tlaloc ≤ 1.05× JAX.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import workloads as W  # noqa: E402

PEERS = ["jax"]


def cases(quick: bool):
    sizes = ["small"] if quick else ["small", "medium", "large"]
    out = []
    for s in sizes:
        n, d, h, k = W.MLP_SIZES[s]
        out.append((f"MLP {s} (N={n}, D={d}, H={h})", W.mlp_loss, W.MLP_ARGNUMS, W.mlp_inputs(s)))
    for s in sizes:
        out.append((f"integrator 38 steps, n={W.PROJECTILE_SIZES[s]}", W.projectile_loss, W.PROJECTILE_ARGNUMS,
                    W.projectile_inputs(s)))
    return out


def _first_call(fn, args, block):
    t0 = time.perf_counter()
    out = fn(*args)
    block(out)
    return time.perf_counter() - t0, out


def run(quick: bool = False, repeats=None):
    import tlaloc as tl
    common.print_header("2. compiled gradient on XLA CPU (float64)")
    if not hasattr(tl, "jit"):
        common.print_skipped("compiled gradient", "tl.jit not available")
        return None
    jax = common.jax_x64()
    bench = common.Bench(quick=quick, repeats=repeats)
    if jax is None:
        block = lambda out: out  # noqa: E731
    else:
        block = jax.block_until_ready
    for name, fn, argnums, args in cases(quick):
        want = None
        impls = {}
        try:
            g_tl = tl.jit(tl.grad(fn, argnums=argnums))
            c_tl, got = _first_call(g_tl, args, block)
            want = got
            impls["tlaloc"] = lambda g=g_tl, a=args: block(g(*a))
        except Exception as e:                                  # a failing workload still lets the others run
            impls["tlaloc"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
            c_tl = None
        if jax is None:
            impls["jax"] = "jax not installed"
            c_jax = None
        else:
            g_jax = jax.jit(jax.grad(W.rebind(fn, jax.numpy), argnums))
            c_jax, got_jax = _first_call(g_jax, args, block)
            if want is not None:
                common.assert_close(f"{name}: tl.jit vs jax.jit", want, got_jax, rtol=1e-9, atol=1e-9)
            impls["jax"] = lambda g=g_jax, a=args: block(g(*a))
        note = "first call (compile): " + ", ".join(
            f"{k} {common.fmt_time(v)}" for k, v in (("tlaloc", c_tl), ("jax", c_jax)) if v is not None)
        row = bench.compare(name, impls, note=note)
        t, j = row.timings.get("tlaloc"), row.timings.get("jax")
        if isinstance(t, common.Timing) and isinstance(j, common.Timing):
            row.note = f"goal {'met' if t.median <= 1.05 * j.median else 'missed'}; " + row.note
    bench.print_table(PEERS)
    return bench


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv)
    run(args.quick, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
