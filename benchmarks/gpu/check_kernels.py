#!/usr/bin/env python3
"""GPU check of tlaloc.kernels: every library kernel launched on the GPU against its
reference, through the CUDA driver and as an XLA FFI target inside ``jax.jit``; and
paged attention timed against XLA's own lowering at a small and a Llama-3-8B-like
decode shape.

    PYTHONPATH=src python3 benchmarks/gpu/check_kernels.py [--json out.json] [--markdown out.md]
    PYTHONPATH=src python3 benchmarks/gpu/check_kernels.py --dry-run     # no GPU: build PTX, run ptxas

Needs a CUDA device, cuda-python (``cuda-bindings``) and jax with its CUDA plugin.
Runs in about a minute on one H100/H200 (well under the 8-minute budget). Exit code
0: every check passed; 1: a check failed; 2: no GPU.

Timings: ``kernel`` is CUDA-event time per launch of the raw kernel (no XLA);
``ffi`` and ``xla`` are wall time per call of a jitted function over 50 async
calls (dispatch included; our FFI handler is a Python callback, about tens of us).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")     # leave memory for cuMemAlloc
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))

import numpy as np  # noqa: E402

from tlaloc.kernels import library as L  # noqa: E402
from tlaloc.kernels.library import reference as R  # noqa: E402

ARCH = "sm_90"
F32, I32 = np.float32, np.int32


def f64(xs):
    return [x.astype(np.float64) if x.dtype.kind == "f" else x for x in xs]


def randn(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


# -- the checks: (name, template, shape, inputs(rng), reference(inputs) -> outputs) --------------

#: the shapes of the correctness checks (kernel -> dims)
SIZES = {"rms": (64, 4096), "rope": (64, 32, 128, 4096), "xent": (16, 32000), "attn": (2, 8, 256, 64),
         "paged": (3, 8, 2, 128, 16, 100)}


def _rms(rng, rows, dim):
    return [randn(rng, rows, dim), randn(rng, dim)]


def _rope_in(rng, tokens, heads, dim, max_pos):
    ang = np.arange(max_pos)[:, None] * 5e5 ** (-np.arange(dim // 2) / (dim // 2))
    return [randn(rng, tokens, heads, dim), np.cos(ang).astype(F32), np.sin(ang).astype(F32),
            rng.integers(0, max_pos, tokens).astype(I32)]


def _xent(rng, rows, vocab):
    z = randn(rng, rows, vocab) * 3
    y = rng.integers(0, vocab, rows).astype(I32)
    y[3] = -100
    return [z, y]


def _attn(rng, b, h, s, d):
    return [randn(rng, b, h, s, d) for _ in range(3)]


def paged_inputs(rng, batch, q_heads, kv_heads, head_dim, block_size, max_len, ragged=True):
    max_blocks = -(-max_len // block_size)
    num_blocks = batch * max_blocks + 1                       # page 0 is the scratch page
    lens = (rng.integers(max(1, max_len * 3 // 4), max_len + 1, batch) if ragged
            else np.full(batch, max_len)).astype(I32)
    tables = (1 + rng.permutation(batch * max_blocks)).reshape(batch, max_blocks).astype(I32)
    for b, n in enumerate(lens):
        tables[b, -(-n // block_size):] = 0
    cache = (num_blocks, block_size, kv_heads, head_dim)
    shape = dict(batch=batch, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim, num_blocks=num_blocks,
                 block_size=block_size, max_blocks=max_blocks)
    xs = [randn(rng, batch, q_heads, head_dim), randn(rng, *cache), randn(rng, *cache), tables, lens]
    return shape, xs


PAGED_SHAPES = {  # name: (batch, q_heads, kv_heads, head_dim, block_size, max_len)
    "small (TinyLlama-like)": (4, 32, 4, 64, 16, 256),
    "Llama-3-8B-like": (16, 32, 8, 128, 16, 2048),
}


def checks(rng):
    rows, dim = SIZES["rms"]
    tokens, heads, hd, max_pos = SIZES["rope"]
    xrows, vocab = SIZES["xent"]
    ab, ah, aseq, ad = SIZES["attn"]
    rms_x, rms_w = _rms(rng, rows, dim)
    y, rstd = (o.astype(F32) for o in R.rmsnorm_fwd(*f64([rms_x, rms_w]), eps=float(np.float32(1e-6))))
    g = randn(rng, rows, dim)
    z, labels = _xent(rng, xrows, vocab)
    lse = R.cross_entropy_fwd(*f64([z]), labels)[1].astype(F32)
    gl = randn(rng, xrows)
    rms = dict(rows=rows, dim=dim)
    xent = dict(rows=xrows, vocab=vocab)
    attn = dict(batch=ab, heads=ah, seq=aseq, head_dim=ad)
    out = [
        ("rmsnorm_fwd", L.rmsnorm_fwd, rms, [rms_x, rms_w],
         lambda xs: R.rmsnorm_fwd(*f64(xs), eps=float(np.float32(1e-6)))),
        ("rmsnorm_bwd_dx", L.rmsnorm_bwd_dx, rms, [rms_x, rms_w, rstd, g], lambda xs: R.rmsnorm_bwd_dx(*f64(xs))),
        ("rmsnorm_bwd_dw", L.rmsnorm_bwd_dw, rms, [rms_x, rstd, g], lambda xs: R.rmsnorm_bwd_dw(*f64(xs))),
        ("rope", L.rope, dict(tokens=tokens, heads=heads, dim=hd, max_pos=max_pos),
         _rope_in(rng, tokens, heads, hd, max_pos), lambda xs: R.rope(*f64(xs[:3]), xs[3])),
        ("cross_entropy_fwd", L.cross_entropy_fwd, xent, [z, labels],
         lambda xs: R.cross_entropy_fwd(*f64(xs[:1]), xs[1])),
        ("cross_entropy_bwd", L.cross_entropy_bwd, xent, [z, labels, lse, gl],
         lambda xs: R.cross_entropy_bwd(*f64(xs[:1]), xs[1], *f64(xs[2:]))),
        ("attention", L.attention, attn, _attn(rng, ab, ah, aseq, ad), lambda xs: R.attention(*f64(xs))),
        ("attention causal", L.attention, dict(attn, causal=True), _attn(rng, ab, ah, aseq, ad),
         lambda xs: R.attention(*f64(xs), causal=True)),
    ]
    shape, xs = paged_inputs(rng, *SIZES["paged"])
    out.append(("paged_attention GQA ragged", L.paged_attention, shape, xs,
                lambda xs: R.paged_attention(*f64(xs[:3]), *xs[3:])))
    return out


# -- dry run: PTX and ptxas only -------------------------------------------------------------

def dry_run(rng) -> int:
    from tlaloc.kernels.ptx.ptxas import ptxas_path, resource_usage
    have = ptxas_path() is not None
    rows = []
    specs = [(n, t.specialize(arch=ARCH, **s)) for n, t, s, _, _ in checks(rng)]
    for name, dims in PAGED_SHAPES.items():
        b, hq, hkv, d, bs, n = dims
        shape = dict(batch=b, q_heads=hq, kv_heads=hkv, head_dim=d, num_blocks=b * -(-n // bs) + 1,
                     block_size=bs, max_blocks=-(-n // bs))
        for nw in (4, 8):
            specs.append((f"paged_attention {name} nwarps={nw}", L.paged_attention.specialize(
                arch=ARCH, nwarps=nw, **shape)))
    for name, spec in specs:
        info = resource_usage(spec.ptx, ARCH) if have else {}
        rows.append((name, len(spec.ptx.splitlines()), info.get("registers"), info.get("shared"), info.get("spill")))
        print(f"{name:45s} {rows[-1][1]:6d} lines  regs={info.get('registers')} smem={info.get('shared')} "
              f"spill={info.get('spill')}")
    print("dry run: every kernel built" + (" and assembled by ptxas" if have else " (ptxas not found)"))
    return 0


# -- on the GPU ------------------------------------------------------------------------------

def rel_err(got, want):
    want = np.asarray(want, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - want).max() / max(np.abs(want).max(), 1e-30))


def time_jax(jax, f, args, iters=50):
    jax.block_until_ready(f(*args))
    for _ in range(3):
        jax.block_until_ready(f(*args))
    t0 = time.perf_counter()
    for _ in range(iters):
        out = f(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / iters


def xla_paged_attention(jax, jnp):
    def f(q, k_cache, v_cache, block_tables, seq_lens):
        B, Hq, D = q.shape
        _, BS, Hkv, _ = k_cache.shape
        G, T = Hq // Hkv, block_tables.shape[1] * BS
        k = k_cache[block_tables].reshape(B, T, Hkv, D)                # gather the pages
        v = v_cache[block_tables].reshape(B, T, Hkv, D)
        s = jnp.einsum("bhgd,bthd->bhgt", q.reshape(B, Hkv, G, D), k,
                       precision=jax.lax.Precision.HIGHEST) / np.sqrt(D)
        live = jnp.arange(T)[None, :] < seq_lens[:, None]
        s = jnp.where(live[:, None, None, :], s, -jnp.inf)
        p = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bhgt,bthd->bhgd", p, v, precision=jax.lax.Precision.HIGHEST)
        return o.reshape(B, Hq, D)
    return jax.jit(f)


def on_gpu(rng, results) -> bool:
    import jax
    import jax.numpy as jnp
    from tlaloc.kernels import gpu
    from tlaloc.kernels.gpu import driver
    ok_all = True
    dev = jax.devices("gpu")[0]
    print(f"device: {dev.device_kind}; jax {jax.__version__}")
    for name, template, shape, xs, ref in checks(rng):
        row = {"kernel": name, "shape": shape}
        try:
            spec = template.specialize(arch=ARCH, **shape)
            want = ref(xs)
            got = driver.run(spec, *xs)
            row["rel_err"] = max(rel_err(g, w) for g, w in zip(got, want))
            row["kernel_us"] = driver.time_kernel(spec, *xs, iters=20) * 1e6
            target = gpu.register_kernel(spec)
            call = jax.jit(gpu.ffi_call(spec, target))
            dx = [jax.device_put(x, dev) for x in xs]
            via_ffi = [np.asarray(o) for o in call(*dx)]
            row["ffi_matches_driver"] = all(np.array_equal(a, b) for a, b in zip(via_ffi, got))
            row["ffi_us"] = time_jax(jax, call, dx, iters=20) * 1e6
            row["ok"] = row["rel_err"] < 2e-5 and row["ffi_matches_driver"]
        except Exception as e:                                       # record, keep going
            row.update(ok=False, error=f"{type(e).__name__}: {e}", trace=traceback.format_exc(limit=3))
        ok_all &= row["ok"]
        results["checks"].append(row)
        print(f"  {'ok ' if row['ok'] else 'BAD'} {name:30s} rel_err={row.get('rel_err', float('nan')):.2e} "
              f"kernel={row.get('kernel_us', float('nan')):9.1f}us ffi={row.get('ffi_us', float('nan')):9.1f}us "
              f"{row.get('error', '')}")
    xla = xla_paged_attention(jax, jnp)
    for label, (b, hq, hkv, d, bs, n) in PAGED_SHAPES.items():
        row = {"shape": label, "dims": dict(batch=b, q_heads=hq, kv_heads=hkv, head_dim=d, block_size=bs,
                                            max_len=n)}
        try:
            shape, xs = paged_inputs(rng, b, hq, hkv, d, bs, n)
            want = R.paged_attention(*f64(xs[:3]), *xs[3:])[0]
            dx = [jax.device_put(x, dev) for x in xs]
            row["xla_rel_err"] = rel_err(np.asarray(xla(*dx)), want)
            row["xla_us"] = time_jax(jax, xla, dx) * 1e6
            best = None
            for nw in (4, 8):
                spec = L.paged_attention.specialize(arch=ARCH, nwarps=nw, **shape)
                err = rel_err(driver.run(spec, *xs)[0], want)
                t = driver.time_kernel(spec, *xs, iters=50) * 1e6
                row[f"kernel_us_nwarps{nw}"], row[f"rel_err_nwarps{nw}"] = t, err
                if best is None or t < best[0]:
                    best = (t, nw, spec)
            call = jax.jit(gpu.ffi_call(best[2], gpu.register_kernel(best[2])))
            row["ffi_us"] = time_jax(jax, call, dx) * 1e6
            row["best_nwarps"] = best[1]
            row["speedup_kernel_vs_xla"] = row["xla_us"] / best[0]
            row["speedup_ffi_vs_xla"] = row["xla_us"] / row["ffi_us"]
            row["ok"] = max(row["rel_err_nwarps4"], row["rel_err_nwarps8"]) < 2e-5
        except Exception as e:
            row.update(ok=False, error=f"{type(e).__name__}: {e}", trace=traceback.format_exc(limit=3))
        ok_all &= row["ok"]
        results["paged_timing"].append(row)
        print(f"  paged attention {label}: " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                                          for k, v in row.items() if k not in ("trace", "dims")))
    return ok_all


def markdown(results) -> str:
    lines = ["| kernel | shape | rel. error vs f64 reference | kernel µs | via XLA FFI µs | FFI = driver |",
             "|---|---|---|---|---|---|"]
    for r in results["checks"]:
        lines.append(f"| {r['kernel']} | {r['shape']} | {r.get('rel_err', float('nan')):.1e} | "
                     f"{r.get('kernel_us', float('nan')):.1f} | {r.get('ffi_us', float('nan')):.1f} | "
                     f"{r.get('ffi_matches_driver', r.get('error'))} |")
    lines += ["", "| paged attention | XLA lowering µs | kernel µs (nwarps 4 / 8) | via FFI µs | kernel vs XLA |",
              "|---|---|---|---|---|"]
    for r in results["paged_timing"]:
        lines.append(f"| {r['shape']} {r['dims']} | {r.get('xla_us', float('nan')):.1f} | "
                     f"{r.get('kernel_us_nwarps4', float('nan')):.1f} / {r.get('kernel_us_nwarps8', float('nan')):.1f}"
                     f" | {r.get('ffi_us', float('nan')):.1f} | {r.get('speedup_kernel_vs_xla', float('nan')):.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="build the PTX and run ptxas only (no GPU)")
    ap.add_argument("--json", help="write the results as JSON here")
    ap.add_argument("--markdown", help="write the result tables as Markdown here")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    if args.dry_run:
        return dry_run(rng)
    from tlaloc.kernels import gpu
    have, why = gpu.available()
    if not have:
        print(f"no GPU: {why}")
        return 2
    t0 = time.perf_counter()
    results = {"checks": [], "paged_timing": []}
    ok = on_gpu(rng, results)
    results["seconds"] = time.perf_counter() - t0
    text = markdown(results)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    print(f"{'all checks passed' if ok else 'SOME CHECKS FAILED'} in {results['seconds']:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
