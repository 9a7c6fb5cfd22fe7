"""Which formulation of a quantized matrix product XLA CPU runs fastest (issue 18), side by side.

    python benchmarks/quant_dot.py [--threads 2] [--batch 1,16] [--layers 30] [--repeats 7]

Written with JAX (the same XLA CPU compiler that runs tlaloc's artifacts). One program
multiplies an activation x (B, D) by ``--layers`` different weight matrices W_l (D, N),
D = 576 and N = 3072 (SmolLM2-135M's fused gate/up), and sums the results, so the weights
(``layers`` x 1.77 M values) do not fit in cache and every call reads them all. Formulations:

  f32            W float32: the reference
  bf16->f32      W bfloat16, converted to float32, then the dot (what bf16 artifacts do)
  i8ch->f32      int8 with one scale per output column, converted, times the scale, dot
                 (what int8 artifacts do)
  i8ch-int       int8 per column, x quantised to int8 per row (scale max|x|/127), an
                 integer dot i8 x i8 -> i32, then times both scales
  q8_0->f32      GGUF Q8_0: int8 in blocks of 32 along D, one scale per block and column;
                 dequantised (convert, times the block scale), then the dot
  q8_0-bdot      Q8_0 as a dot batched over the D/32 blocks: (nb, B, 32) x (nb, 32, N)
                 in float32 after converting q, scaled per block, summed over blocks
  q8_0-int       Q8_0 as llama.cpp computes it: x quantised per block of 32 (one scale per
                 row and block), integer dots batched over blocks (nb, B, N) i32, times
                 both scales, summed over blocks
  q8_0-chunks    Q8_0 dequantised and multiplied CHUNK rows of D at a time (partial dots
                 summed), so only a chunk of float32 weights exists at once

Each formulation's result is checked against float64 NumPy on the same (dequantised)
weights before it is timed. The table gives ms per call (median of ``--repeats``
interleaved runs), the weight GB/s (stored bytes read per call / time) and the ratio to
f32. XLA runs with the serving runtime's flags (its memory-minimising CPU scheduler).
The load average is printed: on a loaded machine only the ratios mean much.
"""
from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

D, N, BLOCK, CHUNK = 576, 3072, 32, 64


def _weights(np, rng, layers):
    w = (rng.standard_normal((layers, D, N)) * 0.05).astype(np.float32)            # (L, D, N)
    nb = D // BLOCK
    blocks = w.reshape(layers, nb, BLOCK, N)
    d = np.max(np.abs(blocks), axis=2) / 127.0                                      # (L, nb, N)
    d = d.astype(np.float16).astype(np.float32)                                     # GGUF keeps the scale in f16
    q8 = np.clip(np.rint(blocks / np.where(d == 0, 1, d)[:, :, None, :]), -127, 127).astype(np.int8)
    sc = np.max(np.abs(w), axis=1) / 127.0                                          # (L, N) per column
    qc = np.clip(np.rint(w / sc[:, None, :]), -127, 127).astype(np.int8)
    return w, q8, d, qc, sc.astype(np.float32)


def build(jax, jnp, np, layers):
    """{name: (jitted fn, args, float64 reference of the product the fn computes, bytes)}."""
    rng = np.random.default_rng(0)
    w, q8, d, qc, sc = _weights(np, rng, layers)
    nb = D // BLOCK
    f32 = jnp.float32

    def per_layer(fn):
        def run(x, *ws):
            return sum(fn(x, *(a[l] for a in ws)) for l in range(layers))
        return jax.jit(run)

    def quant_rows(x):                                                              # (B, D) -> int8, (B, 1)
        s = jnp.max(jnp.abs(x), axis=-1, keepdims=True) / 127.0
        s = jnp.where(s == 0, 1.0, s)
        return jnp.clip(jnp.round(x / s), -127, 127).astype(jnp.int8), s

    def i8ch_int(x, q, s):
        xq, xs = quant_rows(x)
        acc = jax.lax.dot_general(xq, q, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)
        return acc.astype(f32) * xs * s

    def q8_int(x, q, s):
        B = x.shape[0]
        xb = jnp.transpose(x.reshape(B, nb, BLOCK), (1, 0, 2))                      # (nb, B, 32)
        xq, xs = quant_rows(xb)                                                     # (nb, B, 32), (nb, B, 1)
        acc = jax.lax.dot_general(xq, q.reshape(nb, BLOCK, N), (((2,), (1,)), ((0,), (0,))),
                                  preferred_element_type=jnp.int32)                 # (nb, B, N)
        return jnp.sum(acc.astype(f32) * xs * s[:, None, :], axis=0)

    def q8_bdot(x, q, s):
        B = x.shape[0]
        xb = jnp.transpose(x.reshape(B, nb, BLOCK), (1, 0, 2))                      # (nb, B, 32)
        part = jax.lax.dot_general(xb, q.reshape(nb, BLOCK, N).astype(f32), (((2,), (1,)), ((0,), (0,))))
        return jnp.sum(part * s[:, None, :], axis=0)                                # (B, N)

    def q8_chunks(x, q, s):
        out = 0.0
        per = CHUNK // BLOCK
        for a in range(0, D, CHUNK):
            b = a // BLOCK
            wq = q[a:a + CHUNK].reshape(per, BLOCK, N).astype(f32) * s[b:b + per, None, :]
            out = out + x[:, a:a + CHUNK] @ wq.reshape(CHUNK, N)
        return out

    deq8 = (q8.astype(np.float64) * d[:, :, None, :]).reshape(layers, D, N)
    deqc = qc.astype(np.float64) * sc[:, None, :]
    import ml_dtypes
    wb = w.astype(ml_dtypes.bfloat16)
    return {
        "f32": (per_layer(lambda x, a: x @ a), (w,), w.astype(np.float64), w.nbytes),
        "bf16->f32": (per_layer(lambda x, a: x @ a.astype(f32)), (wb,), wb.astype(np.float64), wb.nbytes),
        "i8ch->f32": (per_layer(lambda x, q, s: x @ (q.astype(f32) * s[None, :])), (qc, sc), deqc,
                      qc.nbytes + sc.nbytes),
        "i8ch-int": (per_layer(i8ch_int), (qc, sc), deqc, qc.nbytes + sc.nbytes),
        "q8_0->f32": (per_layer(lambda x, q, s: x @ (q.reshape(nb, BLOCK, N).astype(f32) * s[:, None, :])
                                .reshape(D, N)), (q8.reshape(layers, D, N), d), deq8, q8.nbytes + d.size * 2),
        "q8_0-bdot": (per_layer(q8_bdot), (q8.reshape(layers, D, N), d), deq8, q8.nbytes + d.size * 2),
        "q8_0-int": (per_layer(q8_int), (q8.reshape(layers, D, N), d), deq8, q8.nbytes + d.size * 2),
        "q8_0-chunks": (per_layer(q8_chunks), (q8.reshape(layers, D, N), d), deq8, q8.nbytes + d.size * 2),
    }


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv, extra=lambda p: (
        p.add_argument("--batch", default="1,16"), p.add_argument("--layers", type=int, default=30),
        p.add_argument("--only", default=None, help="comma-separated formulations")))
    if args.threads is None:
        common.limit_threads(2)
    import tlaloc.serving.runtime.device  # noqa: F401  (XLA_FLAGS: the CPU scheduler the serving runtime uses)
    import jax
    import jax.numpy as jnp
    import numpy as np
    common.print_header("quantized matrix product on XLA CPU")
    impls = build(jax, jnp, np, args.layers)
    if args.only:
        impls = {k: v for k, v in impls.items() if k in args.only.split(",")}
    repeats = args.repeats or 7
    rows, loads = [], [_load()]
    rng = np.random.default_rng(1)
    for B in [int(b) for b in args.batch.split(",")]:
        x = rng.standard_normal((B, D)).astype(np.float32)
        for name, (fn, ws, ref, _) in impls.items():
            got = np.asarray(fn(x, *ws), np.float64)
            want = sum(x.astype(np.float64) @ ref[l] for l in range(args.layers))
            err = np.max(np.abs(got - want)) / np.max(np.abs(want))
            tol = 2e-2 if name.endswith("-int") else 1e-4                 # activations quantised to 8 bits
            if not err < tol:
                raise AssertionError(f"{name} B={B}: relative error {err:.2e} against float64 (tolerance {tol})")
        times = {name: [] for name in impls}
        for _ in range(repeats):
            for name, (fn, ws, _, _) in impls.items():
                t0 = common.now()
                fn(x, *ws).block_until_ready()
                times[name].append(common.now() - t0)
        loads.append(_load())
        base = statistics.median(times["f32"]) if "f32" in times else None
        for name, (_, _, _, nbytes) in impls.items():
            t = statistics.median(times[name])
            rows.append(f"| {name} | {B} | {t * 1e3:.1f} | {nbytes / t / 1e9:.1f} | "
                        + (f"{t / base:.2f}× |" if base else "— |"))
    print(f"D={D} N={N} layers={args.layers}; median of {repeats} interleaved runs, {common.CLOCK_NAME} clock; threads "
          f"{os.environ.get('TLALOC_BENCH_THREADS')}; load before and after each batch size: {' | '.join(loads)}")
    print("\n| formulation | B | ms per call | GB/s of stored weights | time vs f32 |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
