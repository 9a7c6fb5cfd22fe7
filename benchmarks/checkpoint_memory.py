"""Peak residual memory of a 1,000-step loop's gradient, with and without ``tl.checkpoint``.

    .venv/bin/python benchmarks/checkpoint_memory.py [--steps 1000] [--batch 32] [--width 128] [--every 32]

The loop is ``x = tanh(x @ W) + 0.5 x`` on a ``(batch, width)`` float64 array. The
gradient is built once (warm-up), then called under ``tracemalloc``; the printed
figure is tracemalloc's peak of Python-allocated bytes during that call (NumPy
arrays included) minus the bytes held before it: what the backward pass keeps
alive, residual stacks first. Run in the NumPy interpreter path (the generated
Python), where each stacked residual is one array per iteration. The gradients
of the three variants are compared too (max |difference| relative to max |gradient|).
"""
from __future__ import annotations

import argparse
import tracemalloc

import numpy as np

import tlaloc as tl

STEPS = 1000


def step(x, W):
    return np.tanh(x @ W) + 0.5 * x


def loss(x, W):
    for i in range(STEPS):
        x = step(x, W)
    return (x * x).sum()


def peak_bytes(fn, *args):
    fn(*args)                                  # build and warm up outside the measurement
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    out = fn(*args)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak - base, out


def main(argv=None):
    global STEPS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--every", type=int, default=32)
    a = ap.parse_args(argv)
    STEPS = a.steps
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.batch, a.width))
    W = rng.standard_normal((a.width, a.width)) * (0.4 / np.sqrt(a.width))
    variants = [("no checkpoint", tl.grad(loss, argnums=(0, 1))),
                (f"tl.checkpoint(loss, every={a.every})", tl.grad(tl.checkpoint(loss, every=a.every), argnums=(0, 1))),
                ("tl.checkpoint(loss, every=(100, 10))", tl.grad(tl.checkpoint(loss, every=(100, 10)), argnums=(0, 1))),
                ("tl.checkpoint(step) in the loop", None)]
    ck_step = tl.checkpoint(step)

    def loss_step(x, W):
        for i in range(STEPS):
            x = ck_step(x, W)
        return (x * x).sum()
    variants[3] = (variants[3][0], tl.grad(loss_step, argnums=(0, 1)))
    print(f"{STEPS}-step loop on a ({a.batch}, {a.width}) float64 array ({x.nbytes / 2**10:.0f} KiB), "
          f"W {W.nbytes / 2**10:.0f} KiB; peak bytes by tracemalloc during one gradient call")
    ref = None
    for name, fn in variants:
        peak, g = peak_bytes(fn, x, W)
        diff = 0.0 if ref is None else max(float(np.abs(u - v).max() / np.abs(v).max()) for u, v in zip(g, ref))
        ref = g if ref is None else ref
        print(f"  {name:40s} {peak / 2**20:9.2f} MiB   max |grad - grad without| / max |grad| = {diff:.1e}")


if __name__ == "__main__":
    main()
