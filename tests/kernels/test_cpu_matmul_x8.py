"""The int8-activation CPU kernels of ``tlaloc/kernels/cpu/matmul_x8.cc`` (Engine's ``activations="int8"``).

Oracle: x quantised per row and block of 32 in NumPy (float32 d = max|x| / 127, q = round half
to even of x * (1 / d)), the integer sums in int64, each block's scale times d rounded to float32
as the kernel does, the rest in float64 (written here from llama.cpp's definition of Q8
activations, independently of the kernel). Negative controls: the exact float64 product x @ W
is far outside the tolerance (so the test tells int8 activations from float32 ones), and one
changed weight nibble is caught.
"""
import numpy as np
import pytest

from tlaloc._runtime import cpu_kernels

jax = pytest.importorskip("jax")
jnp = jax.numpy

TOL = 2e-6          # relative to the largest |output|: float32 rounding of a few dozen terms


@pytest.fixture(autouse=True)
def _kernels():
    if not cpu_kernels.load():
        pytest.skip(f"the CPU kernels cannot be built here: {cpu_kernels.reason()}")


def quantize(x):
    """(q (M, K) int64, d (M, K/32) float32, s = d * sum(q) (M, K/32) float32) of llama.cpp's Q8_1 blocks."""
    M, K = x.shape
    xb = x.reshape(M, K // 32, 32)
    d = (np.abs(xb).max(-1) / np.float32(127)).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    q = np.rint(xb * inv[..., None]).astype(np.int64)            # float32 product, then to nearest even
    return q.reshape(M, K), d, d * q.sum(-1).astype(np.float32)


def make(rng, fmt, K, N, group=32, side=np.float16):
    """(stored arrays as the kernel reads them, unpacked: (integers (K, N), per-row-scale (K, N) or None, ...))."""
    nb = K // group
    if fmt == "q4_1":
        q = rng.integers(0, 256, (K // 2, N), dtype=np.uint8)
        s = (rng.random((nb, N)) * 0.02 + 0.001).astype(side)
        o = (rng.random((nb, N)) * -0.1).astype(side)
        return (q, s, o)
    q = rng.integers(-128, 128, (K, N), dtype=np.int8)
    if fmt == "q8_0":
        return (q, (rng.random((nb, N)) * 0.02 + 0.001).astype(side))
    return (q, (rng.random(N) * 0.02 + 0.001).astype(np.float32))


def nibbles(q):
    """GGUF Q4_1's values (K, N) of the bytes (K/2, N): byte 16b + j holds row 32b + j (low nibble), 32b + j + 16 (high)."""
    K2, N = q.shape
    lo, hi = (q & 15).reshape(K2 // 16, 16, N), (q >> 4).reshape(K2 // 16, 16, N)
    return np.concatenate([lo, hi], axis=1).reshape(2 * K2, N).astype(np.int64)


def want(fmt, x, parts):
    """The kernel's y (M, N) in float64, from the definition above."""
    q, d, xsum = quantize(x)
    M, K = x.shape
    if fmt == "q4_1":
        w, scale, offset = nibbles(parts[0]), parts[1].astype(np.float32), parts[2].astype(np.float64)
    else:
        w, scale = parts[0].astype(np.int64), parts[1].astype(np.float32)
    y = np.zeros((M, w.shape[1]))
    for b in range(K // 32):
        rows = slice(32 * b, 32 * b + 32)
        if fmt == "i8ch":
            y += d[:, b, None].astype(np.float64) * (q[:, rows] @ w[rows])
            continue
        G = K // scale.shape[0]
        for g0 in range(32 * b, 32 * b + 32, min(G, 32)):         # q8_0 with G = 16: two groups a block
            gr = slice(g0, g0 + min(G, 32))
            sd = (scale[g0 // G][None, :] * d[:, b, None]).astype(np.float64)   # rounded to float32, as the kernel
            y += sd * (q[:, gr] @ w[gr])
        if fmt == "q4_1":
            y += xsum[:, b, None].astype(np.float64) * offset[(32 * b) // G][None, :]
    return y * parts[1].astype(np.float64)[None, :] if fmt == "i8ch" else y


def dense(fmt, parts):
    """W (K, N) float64 as the stored arrays define it (the float32-activation kernels' matrix)."""
    if fmt == "q4_1":
        w = nibbles(parts[0]).astype(np.float64)
        G = w.shape[0] // parts[1].shape[0]
        return w * np.repeat(parts[1].astype(np.float64), G, 0) + np.repeat(parts[2].astype(np.float64), G, 0)
    if fmt == "q8_0":
        G = parts[0].shape[0] // parts[1].shape[0]
        return parts[0].astype(np.float64) * np.repeat(parts[1].astype(np.float64), G, 0)
    return parts[0].astype(np.float64) * parts[1].astype(np.float64)[None, :]


def run(fmt, x, parts):
    stored = [cpu_kernels.pack_k4(a) if a.dtype in (np.int8, np.uint8) else cpu_kernels.pack_panels(a) for a in parts]
    call = jax.ffi.ffi_call(f"tlaloc_cpu_matmul_{fmt}_x8", jax.ShapeDtypeStruct((x.shape[0], parts[0].shape[1]), jnp.float32))
    return np.asarray(jax.jit(call)(x, *stored))


CASES = [("q4_1", 32, np.float16), ("q4_1", 64, np.float32), ("q8_0", 32, np.float16), ("q8_0", 16, np.float32),
         ("i8ch", 32, np.float32)]


@pytest.mark.parametrize("fmt,group,side", CASES, ids=[f"{c[0]}-g{c[1]}-{np.dtype(c[2]).name}" for c in CASES])
@pytest.mark.parametrize("M", [1, 6])
def test_int8_activation_kernels_equal_the_q8_definition(fmt, group, side, M):
    rng = np.random.default_rng(7)
    K, N = 192, 192
    parts = make(rng, fmt, K, N, group, side)
    x = (rng.standard_normal((M, K)) * rng.choice([0.01, 1, 30], (M, 1))).astype(np.float32)
    x[0, 64:96] = 0                                    # an all-zero block: d = 0
    got = run(fmt, x, parts)
    ref = want(fmt, x, parts)
    scale = np.abs(ref).max()
    assert np.abs(got - ref).max() <= TOL * scale
    # negative control: float32 activations give a different product, far outside the tolerance
    assert np.abs(got - x.astype(np.float64) @ dense(fmt, parts)).max() > 100 * TOL * scale
    # a row's result does not depend on the batch it is in, bit for bit
    for m in range(M):
        assert np.array_equal(run(fmt, x[m:m + 1], parts)[0], got[m])


def test_one_changed_nibble_is_caught():
    rng = np.random.default_rng(3)
    parts = make(rng, "q4_1", 128, 128)
    x = rng.standard_normal((1, 128)).astype(np.float32)
    bad = parts[0].copy()
    bad[5, 9] ^= 1
    ref = want("q4_1", x, parts)
    assert np.abs(run("q4_1", x, (bad, *parts[1:])) - ref).max() > 10 * TOL * np.abs(ref).max()


def test_a_non_finite_input_makes_its_row_nan_and_leaves_the_others():
    rng = np.random.default_rng(5)
    parts = make(rng, "q4_1", 64, 64)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    x[1, 40] = np.inf
    x[2, 3] = np.nan
    got = run("q4_1", x, parts)
    assert np.isnan(got[1]).all() and np.isnan(got[2]).all()     # never a finite number standing for inf/nan
    assert np.array_equal(got[0], run("q4_1", x[:1], parts)[0])


@pytest.mark.parametrize("shape,dtype", [((30, 64), np.int8), ((32, 100), np.int8), ((32, 64), np.float32)])
def test_pack_k4_refuses_what_no_kernel_reads(shape, dtype):
    with pytest.raises(ValueError, match="pack_k4"):
        cpu_kernels.pack_k4(np.zeros(shape, dtype))


def test_pack_k4_puts_each_columns_four_rows_together():
    a = np.arange(8 * 128, dtype=np.int64).reshape(8, 128).astype(np.int8)
    packed = cpu_kernels.pack_k4(a).reshape(-1)
    # panel 1 (columns 64..127), rows 4..7, column 64 + 3: bytes at ((1 * 2 + 1) * 64 + 3) * 4
    start = ((1 * 2 + 1) * 64 + 3) * 4
    assert list(packed[start:start + 4]) == [a[r, 67] for r in range(4, 8)]


def test_the_avx2_code_and_the_plain_loops_give_the_same_bits(tmp_path):
    """matmul_x8.cc built with AVX2 (intrinsics) and without (plain loops, other CPUs) computes the same
    integer sums and the same float32 operations in the same order: every output equal bit for bit
    (tests/kernels/x8_isa_check.cc). The first line of each run names the code compiled, so the test
    cannot pass by building the same code twice."""
    import os
    import shlex
    import shutil
    import subprocess
    words = shlex.split(os.environ.get("CXX") or "g++")
    if "avx2" not in cpu_kernels._cpu_signature().split():
        pytest.skip("this CPU has no AVX2: only the plain loops build here")
    here = os.path.dirname(os.path.abspath(__file__))
    builds = {}
    for name, flags in (("avx2", ["-march=native"]), ("plain", ["-march=native", "-mno-avx2", "-mno-fma"])):
        exe = str(tmp_path / name)
        builds[name] = subprocess.Popen([*words, "-O2", "-std=c++17", "-w", *flags, f"-I{cpu_kernels._DIR}",
                                         f"-I{cpu_kernels._include_dir()}", os.path.join(here, "x8_isa_check.cc"),
                                         "-o", exe], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs = {}
    for name, proc in builds.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        done = subprocess.run([str(tmp_path / name)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        first, *rows = done.stdout.splitlines()
        assert first == name
        outputs[name] = rows
    assert len(outputs["avx2"]) == 5 and all(len(r.split()) == 1 + 5 * 128 for r in outputs["avx2"])
    assert len({r.split(maxsplit=1)[1] for r in outputs["avx2"]}) == 5         # five different products
    for row in outputs["avx2"]:                 # x's row 4 holds an infinity: its outputs are NaN, the others finite
        y = np.array([int(b, 16) for b in row.split()[1:]], dtype=np.uint32).view(np.float32).reshape(5, 128)
        assert np.isnan(y[4]).all() and np.isfinite(y[:4]).all()
    assert outputs["avx2"] == outputs["plain"]


@pytest.mark.parametrize("name", ["tlaloc_cpu_matmul_i8ch_x8", "tlaloc_cpu_matmul_i8ch_p64", "tlaloc_cpu_matmul_q4_1_x8"])
def test_a_result_of_other_rows_than_x_or_a_wrong_scale_is_refused_not_run(name):
    """Regression: y's leading dimensions were never compared with x's rows (8 rows into a (1, N)
    result wrote past it: SIGSEGV), and i8ch's per-column scale was read whatever its shape."""
    rng = np.random.default_rng(1)
    fmt = "q4_1" if "_q4_1_" in name else "i8ch"
    parts = make(rng, "q4_1" if fmt == "q4_1" else "i8ch", 64, 128)
    stored = [cpu_kernels.pack_k4(a) if a.dtype in (np.int8, np.uint8) else cpu_kernels.pack_panels(a) for a in parts]
    x = rng.standard_normal((8, 64)).astype(np.float32)
    for rows in (1, 9):
        call = jax.ffi.ffi_call(name, jax.ShapeDtypeStruct((rows, 128), jnp.float32))
        with pytest.raises(Exception, match="leading dimensions must hold x's rows"):
            np.asarray(jax.jit(call)(x, *stored))
    if fmt == "i8ch":
        call = jax.ffi.ffi_call(name, jax.ShapeDtypeStruct((8, 128), jnp.float32))
        for scale in (np.ones(1, np.float32), np.ones((2, 128), np.float32)):
            with pytest.raises(Exception, match="scale must be"):
                np.asarray(jax.jit(call)(x, stored[0], scale))
