"""Definition-time cost: building a derivative with ``tl.grad(f)`` vs JAX trace + lower.

    python benchmarks/definition_time.py [--quick] [--repeats N] [--clock cpu]

tlaloc builds the derivative when the transform is applied: it reads ``f``'s
source, lowers it to DXIR, runs the reverse transform, renders Python and
``exec``s it. JAX's comparable step is tracing the gradient at concrete
shapes and lowering it to StableHLO: ``jax.jit(jax.grad(f)).lower(*args)``.
Neither includes XLA compilation. The extra row ``tl.jit lower`` is
``tl.jit(tl.grad(f)).lower(*args)`` (the derivative built, specialised at the
shapes and emitted as StableHLO), the like-for-like of JAX's column.

Each repeat starts from a fresh function object (same code), so no cache
keyed on the function can answer.

Workloads: the 38-step integrator (n=16) and a 12-layer tanh MLP with stacked
weights (H=64, N=32).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import common  # noqa: E402
import workloads as W  # noqa: E402

PEERS = ["jax"]


def run(quick: bool = False, repeats=None):
    import tlaloc as tl
    common.print_header("3. definition-time cost (build the derivative; no XLA compile)")
    jax = common.jax_x64()
    bench = common.Bench(quick=quick, repeats=repeats or (3 if quick else 15), warmup=1, target_s=0.0)
    cases = [("integrator 38 steps, n=16", W.projectile_loss, W.PROJECTILE_ARGNUMS, W.projectile_inputs("small")),
             ("12-layer MLP (H=64, N=32)", W.deep_mlp_loss, W.DEEP_MLP_ARGNUMS, W.deep_mlp_inputs())]
    for name, fn, argnums, args in cases:
        impls = {"tlaloc": lambda f=fn, a=argnums: tl.grad(W.rebind(f, np), argnums=a)}
        if jax is None:
            impls["jax"] = "jax not installed"
        else:
            impls["jax"] = lambda f=fn, a=argnums, x=args: jax.jit(jax.grad(W.rebind(f, jax.numpy), a)).lower(*x)
        bench.compare(f"{name}: tl.grad", impls, number=1, note="tl.grad needs no shapes")
        if hasattr(tl, "jit"):
            jit_impls = dict(impls)
            jit_impls["tlaloc"] = lambda f=fn, a=argnums, x=args: tl.jit(tl.grad(W.rebind(f, np), argnums=a)).lower(*x)
            bench.compare(f"{name}: tl.jit lower", jit_impls, number=1, note="derivative + specialise + StableHLO")
    bench.print_table(PEERS)
    return bench


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv)
    run(args.quick, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
