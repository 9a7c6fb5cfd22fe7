"""Eager gradients: tlaloc's generated source vs HIPS autograd vs a hand-written NumPy gradient.

    python benchmarks/eager_grad.py [--quick] [--repeats N]

Workloads (float64): the gradient of a two-hidden-layer tanh MLP's MSE loss
(small and medium) and of a 38-step Euler integrator of projectiles with
quadratic drag (a Python ``for`` loop over time steps; 16 and 1024 particles).
Each call is what a user writes: ``dloss(*args)`` with the derivative built
once beforehand. All implementations are checked to agree before timing.

Goal (issue 9): tlaloc ≥ 3× faster than autograd (ratio ≤ 0.33) and ≤ 1.3× the
hand-written NumPy gradient.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import workloads as W  # noqa: E402

PEERS = ["autograd", "numpy"]


def _goal(row) -> str:
    t, a, n = (row.timings.get(k) for k in ("tlaloc", "autograd", "numpy"))
    if not isinstance(t, common.Timing):
        return ""
    parts = []
    if isinstance(a, common.Timing):
        parts.append(f"vs autograd {'met' if t.median <= a.median / 3 else 'missed'}")
    if isinstance(n, common.Timing):
        parts.append(f"vs numpy {'met' if t.median <= 1.3 * n.median else 'missed'}")
    return "goal " + ", ".join(parts) if parts else ""


def run(quick: bool = False, repeats=None) -> common.Bench:
    import tlaloc as tl
    common.print_header("1. eager gradient (float64)")
    autograd = common.optional_import("autograd")
    anp = common.optional_import("autograd.numpy")
    bench = common.Bench(quick=quick, repeats=repeats)
    cases = [
        ("MLP small", W.mlp_loss, W.MLP_ARGNUMS, W.mlp_inputs("small"), W.mlp_loss_grad_numpy),
        ("MLP medium", W.mlp_loss, W.MLP_ARGNUMS, W.mlp_inputs("medium"), W.mlp_loss_grad_numpy),
        ("integrator 38 steps, n=16", W.projectile_loss, W.PROJECTILE_ARGNUMS, W.projectile_inputs("small"),
         W.projectile_loss_grad_numpy),
        ("integrator 38 steps, n=1024", W.projectile_loss, W.PROJECTILE_ARGNUMS, W.projectile_inputs("medium"),
         W.projectile_loss_grad_numpy),
    ]
    for name, fn, argnums, args, by_hand in cases:
        g_tl = tl.grad(fn, argnums=argnums)
        impls = {"tlaloc": lambda g=g_tl, a=args: g(*a), "numpy": lambda h=by_hand, a=args: h(*a)}
        want = by_hand(*args)
        common.assert_close(f"{name}: tlaloc", g_tl(*args), want)
        if autograd is None:
            impls["autograd"] = "autograd not installed"
        else:
            g_ag = autograd.grad(W.rebind(fn, anp), argnums)
            common.assert_close(f"{name}: autograd", g_ag(*args), want)
            impls["autograd"] = lambda g=g_ag, a=args: g(*a)
        row = bench.compare(name, impls)
        row.note = _goal(row)
    bench.print_table(PEERS)
    return bench


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv)
    run(args.quick, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
