"""Speed and accuracy of the CPU matmul kernels (src/tlaloc/kernels/cpu/matmul.cc) against XLA's dot.

    g++ -O3 -march=native -std=c++17 -shared -fPIC -w -I.venv/lib/python3.11/site-packages/jaxlib/include \
        src/tlaloc/kernels/cpu/matmul.cc src/tlaloc/kernels/cpu/matmul_x8.cc -o /tmp/tlk.so
    PYTHONPATH=src python benchmarks/cpu_kernels.py /tmp/tlk.so [M] [--repeats 15] [--layers 12] [--n 3072] [--k 576]

Each workload is a *dependency chain* of ``--layers`` calls y_i = x_i @ W_i with x_{i+1}
depending on y_i (as in a decoder: independent calls would run concurrently in XLA's thread
pool and mislead), on ``--layers`` different matrices (K, N) so that the weights are read
from memory, not from a warm cache. Per format it prints the best of ``--repeats`` (and the
median), weight bytes read per second, multiply-adds per second, the ratio to XLA's own
float32 dot in the same run, and the relative error of the summed outputs against float64
with the same dequantized weights; for M > 1 it checks that row 0 computed alone equals row 0
of the batch bit for bit. A negative control runs the q4_1 kernel on weights with
one perturbed nibble and checks that the error check flags it. The int8-activation targets
(``*_x8``, matmul_x8.cc, where the library has them) are timed the same way; their error
against float64 includes the activations' rounding (``X8_TOLERANCE``; their exact definition
is held by tests/kernels/test_cpu_matmul_x8.py). Exits 1 if a check fails.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

import ml_dtypes
import numpy as np

import jax
import jax.numpy as jnp

jax.config.update("jax_platforms", "cpu")

from tlaloc._runtime.cpu_kernels import pack_k4, pack_panels, q4_1_bf16_dots  # noqa: E402  (the kernels' layouts)

FORMATS = ["f32", "bf16", "i8ch", "q8_0", "q4_1"]
#: the int8-activation twins (matmul_x8.cc, ``activations="int8"``): integer arrays in k4 order
X8_FORMATS = ["i8ch_x8", "q8_0_x8", "q4_1_x8"]
TOLERANCE = 1e-5            # relative error vs float64 above which a kernel is wrong
#: the same for int8 activations, whose rounding (|x - dq| <= max|x| / 254 per block of 32) the
#: float64 reference does not share: about 1e-2 of the largest output on these random matrices
X8_TOLERANCE = 3e-2


def target(fmt: str) -> str:
    return f"tlaloc_cpu_matmul_{fmt}" if fmt.endswith("_x8") else f"tlaloc_cpu_matmul_{fmt}_p64"


def register(so_path: str) -> None:
    lib = ctypes.CDLL(os.path.abspath(so_path))
    for fmt in FORMATS + X8_FORMATS:
        if hasattr(lib, target(fmt)):          # a library built from matmul.cc alone has no _x8 targets
            jax.ffi.register_ffi_target(target(fmt), jax.ffi.pycapsule(getattr(lib, target(fmt))), platform="cpu")


def make_weights(rng, fmt: str, K: int, N: int):
    """(stored arrays, the float64 matrix they stand for) for one (K, N) weight in format fmt."""
    nb = K // 32
    if fmt in ("f32", "bf16"):
        w = rng.standard_normal((K, N)).astype(np.float32)
        if fmt == "bf16":
            w = w.astype(ml_dtypes.bfloat16)
        return (w,), w.astype(np.float64)
    if fmt == "i8ch":
        q = rng.integers(-127, 128, (K, N), dtype=np.int8)
        s = (rng.random(N) * 0.01).astype(np.float32)
        return (q, s), q.astype(np.float64) * s.astype(np.float64)
    if fmt == "q8_0":
        q = rng.integers(-127, 128, (K, N), dtype=np.int8)
        s = (rng.random((nb, N)) * 0.01).astype(np.float16)
        return (q, s), (q.astype(np.float64).reshape(nb, 32, N) * s.astype(np.float64)[:, None]).reshape(K, N)
    if fmt == "q4_1":
        q = rng.integers(0, 256, (K // 2, N), dtype=np.uint8)
        s = (rng.random((nb, N)) * 0.01).astype(np.float16)
        o = (rng.random((nb, N)) * -0.05).astype(np.float16)
        return (q, s, o), dequant_q4_1(q, s, o)
    raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")


def dequant_q4_1(q, s, o):
    """GGUF Q4_1: byte 16b + j holds row 32b + j (low nibble) and row 32b + j + 16 (high nibble)."""
    K2, N = q.shape
    nb = K2 // 16
    lo = (q & 15).astype(np.float64).reshape(nb, 16, N)
    hi = (q >> 4).astype(np.float64).reshape(nb, 16, N)
    nib = np.concatenate([lo, hi], axis=1)
    return (nib * s.astype(np.float64)[:, None] + o.astype(np.float64)[:, None]).reshape(2 * K2, N)


def chain(dot, x, weights, K):
    """Sum of dot(x_i, W_i) over the layers, x_{i+1} = x + 0 * y_i[:, :1] (a true dependency)."""
    total, y = 0.0, None
    for w in weights:
        xi = x if y is None else x + 0.0 * y[:, :1]
        y = dot(xi, w)
        total = total + y
    return total


def kernel_dot(fmt, M, N):
    call = jax.ffi.ffi_call(target(fmt), jax.ShapeDtypeStruct((M, N), jnp.float32))
    return lambda x, w: call(x, *w)


def best_of(fn, args, repeats):
    args = jax.device_put(args)         # numpy arguments would be copied in at every call
    fn(*args).block_until_ready()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(*args).block_until_ready()
        times.append(time.perf_counter() - t)
    return min(times), float(np.median(times))


def rel_err(out, x, dense, offsets=None):
    """Largest error of ``out`` over the largest |value| of float64 x @ W summed over the layers.
    ``offsets`` (q4_1 with bfloat16 dot products, ``cpu_kernels.q4_1_bf16_dots``): each layer's
    (K/32, N) offsets; the reference then takes x as the kernel does, hi + lo bfloat16 parts in
    the nibble sums and x itself in the offsets' (matmul.cc's header), so that the tolerance
    measures the float32 sums alone."""
    x64 = x.astype(np.float64)
    if offsets is None:
        ref = sum(x64 @ d for d in dense)
    else:
        hi = x.astype(ml_dtypes.bfloat16).astype(np.float32)
        split = hi.astype(np.float64) + (x - hi).astype(ml_dtypes.bfloat16).astype(np.float64)
        ref = sum(split @ d + (x64 - split) @ np.repeat(o.astype(np.float64), 32, axis=0)
                  for d, o in zip(dense, offsets))
    return float(np.abs(np.asarray(out, np.float64) - ref).max() / np.abs(ref).max())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("so", help="path of the compiled kernels (.so)")
    ap.add_argument("M", nargs="?", type=int, default=1, help="rows of x (batch)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--k", type=int, default=576)
    ap.add_argument("--n", type=int, default=3072)
    args = ap.parse_args()
    register(args.so)
    M, K, N, L = args.M, args.k, args.n, args.layers
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K)).astype(np.float32)
    print(f"M={M} K={K} N={N} layers={L} load={os.getloadavg()[0]:.2f} jax={jax.__version__}")

    macs = M * K * N * L
    dense32 = [rng.standard_normal((K, N)).astype(np.float32) for _ in range(L)]
    xla = jax.jit(lambda x, ws: chain(lambda a, w: a @ w, x, ws, K))
    t_xla, med = best_of(xla, (x, dense32), args.repeats)
    err = rel_err(xla(x, dense32), x, [d.astype(np.float64) for d in dense32])
    print(f"{'format':8s} {'best ms':>8s} {'med ms':>8s} {'GB/s':>7s} {'GMAC/s':>7s} {'/xla':>6s} {'relerr':>8s}")
    print(f"{'xla f32':8s} {t_xla * 1e3:8.3f} {med * 1e3:8.3f} {4 * K * N * L / t_xla / 1e9:7.2f} "
          f"{macs / t_xla / 1e9:7.2f} {1.0:6.2f} {err:8.1e}")
    failed = False
    lib = ctypes.CDLL(os.path.abspath(args.so))
    for fmt in FORMATS + [f for f in X8_FORMATS if hasattr(lib, target(f))]:
        x8 = fmt.endswith("_x8")
        if K % 32 and (x8 or fmt in ("q8_0", "q4_1")):
            continue                        # blocked formats and int8 activations need K a multiple of 32
        made = [make_weights(rng, fmt.removesuffix("_x8"), K, N) for _ in range(L)]
        stored = [tuple(pack_k4(a) if x8 and a.dtype in (np.int8, np.uint8) else pack_panels(a) for a in m[0])
                  for m in made]
        dense = [m[1] for m in made]
        nbytes = sum(a.nbytes for a in stored[0]) * L
        fn = jax.jit(lambda x, ws, fmt=fmt: chain(kernel_dot(fmt, M, N), x, ws, K))
        best, med = best_of(fn, (x, stored), args.repeats)
        offsets = [m[0][2] for m in made] if fmt == "q4_1" and q4_1_bf16_dots() else None
        err = rel_err(fn(x, stored), x, dense, offsets)
        flag = "" if err < (X8_TOLERANCE if x8 else TOLERANCE) else "  FAIL"
        failed |= bool(flag)
        print(f"{fmt:8s} {best * 1e3:8.3f} {med * 1e3:8.3f} {nbytes / best / 1e9:7.2f} {macs / best / 1e9:7.2f} "
              f"{best / t_xla:6.2f} {err:8.1e}{flag}")
        if M > 1:                          # a row's result must not depend on the batch it is in
            one = jax.jit(kernel_dot(fmt, 1, N))(x[:1], stored[0])
            same = bool(np.array_equal(np.asarray(one)[0], np.asarray(jax.jit(kernel_dot(fmt, M, N))(x, stored[0]))[0]))
            failed |= not same
            print(f"{'':8s} row 0 alone == row 0 of the batch (bitwise): {same}")
        if fmt == "q4_1":                  # negative control: one nibble of one matrix off by one
            q, s, o = stored[0]
            bad = q.copy()
            bad[3, 5] ^= 1
            err_bad = rel_err(fn(x, [(bad, s, o)] + stored[1:]), x, dense, offsets)
            caught = err_bad >= TOLERANCE
            failed |= not caught
            print(f"negative control (q4_1, one nibble changed): relerr {err_bad:.1e} "
                  f"{'caught' if caught else 'NOT CAUGHT'}")
    print(f"load={os.getloadavg()[0]:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
