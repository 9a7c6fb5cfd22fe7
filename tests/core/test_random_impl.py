"""Bit-exactness of tlaloc._prims.threefry_impl against jax.random (jax 0.10.2 defaults).

The main process runs JAX with its defaults (x64 disabled, partitionable
threefry; an autouse fixture keeps x64 off even if another test in the same
worker switched it on).  float64 / uint64 / x64-seed references come from one
subprocess with ``jax_enable_x64=True``.  Floats are compared through their raw bits.
"""

import ctypes
import ctypes.util
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
jax = pytest.importorskip("jax")

from tlaloc._prims import threefry_impl as T  # noqa: E402
from tlaloc._prims import xla_cpu_math  # noqa: E402


@pytest.fixture(autouse=True)
def _jax_defaults():
    """JAX's default (x64 off) for every reference here, even when another test
    in this worker process switched x64 on globally."""
    with jax.enable_x64(False):
        yield

SEEDS = [0, 1, 42, 2**31 - 1]
SHAPES = [(), (0,), (7,), (3, 5), (1000,)]
DTYPES_X32 = [np.float32, np.float16, ml_dtypes.bfloat16]
EXTRA_SEEDS = [-1, -2, 2**32, 2**32 + 5, 2**40 + 7, -(2**40) - 3, 2**63 - 1, -(2**63)]


def raw(x):
    """Flat unsigned-integer view of an array's bits."""
    x = np.asarray(x)
    return x.reshape(-1).view(f"u{x.dtype.itemsize}")


def assert_bits_equal(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(raw(actual), raw(expected))


def kdata(k):
    return np.asarray(jax.random.key_data(k))


# ---------------------------------------------------------------- keys ----
@pytest.mark.parametrize("seed", SEEDS + EXTRA_SEEDS + [np.int64(-5), np.uint32(7), np.int16(-2)])
def test_key_matches_jax(seed):
    assert_bits_equal(T.key(seed), kdata(jax.random.PRNGKey(seed)))


def test_threefry_known_answers():
    # Random123 known-answer vectors for threefry2x32_20.
    u = lambda *v: np.array(v, np.uint32)  # noqa: E731
    cases = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
             ((0xFFFFFFFF,) * 2, (0xFFFFFFFF,) * 2, (0x1CB996FC, 0xBB002BE7)),
             ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]
    for k, (c0, c1), expected in cases:
        y0, y1 = T.threefry2x32(u(*k), u(c0), u(c1))
        assert (int(y0[0]), int(y1[0])) == expected


def test_threefry_broadcasts_and_keeps_shape():
    k = T.key(3)
    y0, y1 = T.threefry2x32(k, np.zeros((3, 1), np.uint32), np.arange(4, dtype=np.uint32))
    assert y0.shape == y1.shape == (3, 4) and y0.dtype == np.uint32
    np.testing.assert_array_equal(y0[0], y0[2])
    z0, _ = T.threefry2x32(k, np.uint32(0), np.uint32(2))
    assert z0.shape == () and int(z0) == int(y0[1, 2])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("num", [2, 5, (2, 3), 0])
def test_split_matches_jax(seed, num):
    assert_bits_equal(T.split(T.key(seed), num), kdata(jax.random.split(jax.random.PRNGKey(seed), num)))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("data", [0, 1, 7, 2**31, 2**32 - 1, np.int64(-3), np.uint32(9)])
def test_fold_in_matches_jax(seed, data):
    got = T.fold_in(T.key(seed), data)
    assert_bits_equal(got, kdata(jax.random.fold_in(jax.random.PRNGKey(seed), data)))


@pytest.mark.parametrize("seed", SEEDS)
def test_split_fold_in_chain(seed):
    jk, k = jax.random.PRNGKey(seed), T.key(seed)
    for step in range(6):
        jk = jax.random.split(jax.random.fold_in(jk, step), 3)[step % 3]
        k = T.split(T.fold_in(k, step), 3)[step % 3]
        assert_bits_equal(k, kdata(jk))
    assert_bits_equal(T.uniform(k, (64,)), jax.random.uniform(jk, (64,)))
    assert_bits_equal(T.normal(k, (64,)), jax.random.normal(jk, (64,)))


# ------------------------------------------------------------- samplers ----
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_bits_matches_jax(seed, shape):
    jk, k = jax.random.PRNGKey(seed), T.key(seed)
    for width, dtype in [(8, np.uint8), (16, np.uint16), (32, np.uint32)]:
        assert_bits_equal(T.random_bits(k, width, shape), jax.random.bits(jk, shape, dtype))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES_X32)
def test_uniform_matches_jax(seed, shape, dtype):
    got = T.uniform(T.key(seed), shape, dtype)
    assert_bits_equal(got, jax.random.uniform(jax.random.PRNGKey(seed), shape, dtype))


@pytest.mark.parametrize("dtype", DTYPES_X32)
def test_uniform_bounds_match_jax(dtype):
    jk, k = jax.random.PRNGKey(42), T.key(42)
    for lo, hi in [(-3.0, 5.5), (0.1, 0.7), (-1e3, 1e-3)]:
        assert_bits_equal(T.uniform(k, (4000,), dtype, lo, hi), jax.random.uniform(jk, (4000,), dtype, lo, hi))
    lo, hi = np.linspace(-2, 1, 5).astype(dtype), np.linspace(1, 9, 5).astype(dtype)
    assert_bits_equal(T.uniform(k, (3, 5), dtype, lo, hi), jax.random.uniform(jk, (3, 5), dtype, lo, hi))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES_X32)
def test_normal_matches_jax(seed, shape, dtype):
    got = T.normal(T.key(seed), shape, dtype)
    assert_bits_equal(got, jax.random.normal(jax.random.PRNGKey(seed), shape, dtype))


def test_normal_float32_large_sample():
    # ~0.3% of these samples take erfinv's w >= 5 branch, ~36% log1p's log branch.
    assert_bits_equal(T.normal(T.key(7), (200_000,)), jax.random.normal(jax.random.PRNGKey(7), (200_000,)))


# ------------------------------------------------------ x64 (subprocess) ----
_X64_SCRIPT = textwrap.dedent("""
    import json, sys, numpy as np, jax
    jax.config.update("jax_enable_x64", True)
    seeds, shapes, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
    f64, res = np.float64, {}
    for s in seeds:
        k = jax.random.PRNGKey(s)
        res[f"key_{s}"] = jax.random.key_data(k)
        res[f"key32_{s}"] = jax.random.key_data(jax.random.PRNGKey(np.int32(s % 2**31)))
        for sh in shapes:
            res[f"bits_{s}_{sh}"] = jax.random.bits(k, tuple(sh), np.uint64)
            res[f"unif_{s}_{sh}"] = jax.random.uniform(k, tuple(sh), f64)
            res[f"norm_{s}_{sh}"] = jax.random.normal(k, tuple(sh), f64)
        res[f"bounds_{s}"] = jax.random.uniform(k, (4000,), f64, -3.0, 5.5)
    res["norm_big"] = jax.random.normal(jax.random.PRNGKey(7), (100_000,), f64)
    np.savez(out, **{n: np.asarray(v) for n, v in res.items()})
""")


@pytest.fixture(scope="module")
def x64_ref(tmp_path_factory):
    out = tmp_path_factory.mktemp("x64") / "ref.npz"
    seeds = SEEDS + [-1, 2**40 + 7, -(2**40) - 3]
    subprocess.run([sys.executable, "-c", _X64_SCRIPT, json.dumps(seeds), json.dumps(SHAPES), str(out)],
                   check=True, capture_output=True)
    return seeds, dict(np.load(out))


def test_x64_against_jax(x64_ref):
    seeds, ref = x64_ref
    for s in seeds:
        k = T.key(s, x64=True)
        assert_bits_equal(k, ref[f"key_{s}"])
        assert_bits_equal(T.key(np.int32(s % 2**31), x64=True), ref[f"key32_{s}"])
        for sh in SHAPES:
            name = f"{s}_{list(sh)}"
            assert_bits_equal(T.random_bits(k, 64, sh), ref[f"bits_{name}"])
            assert_bits_equal(T.uniform(k, sh, np.float64), ref[f"unif_{name}"])
            assert_bits_equal(T.normal(k, sh, np.float64), ref[f"norm_{name}"])
        assert_bits_equal(T.uniform(k, (4000,), np.float64, -3.0, 5.5), ref[f"bounds_{s}"])
    assert_bits_equal(T.normal(T.key(7), (100_000,), np.float64), ref["norm_big"])


# ------------------------------------------------------ negative control ----
@pytest.mark.parametrize("seed", SEEDS)
def test_wrong_key_does_not_match(seed):
    jk, wrong = jax.random.PRNGKey(seed), T.key(seed + 1)
    assert not np.array_equal(wrong, kdata(jk))
    assert not np.array_equal(T.random_bits(wrong, 32, (16,)), np.asarray(jax.random.bits(jk, (16,))))
    for fn in (T.uniform, T.normal):
        expected = np.asarray(getattr(jax.random, fn.__name__)(jk, (16,)))
        with pytest.raises(AssertionError):
            assert_bits_equal(fn(wrong, (16,)), expected)


# ---------------------------------------------------------------- misc ----
def test_fma_emulation_matches_libm():
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.fma.restype, libm.fma.argtypes = ctypes.c_double, [ctypes.c_double] * 3
    libm.fmaf.restype, libm.fmaf.argtypes = ctypes.c_float, [ctypes.c_float] * 3
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(5000) * np.exp2(rng.integers(-20, 20, 5000)), rng.standard_normal(5000)
    c = np.where(rng.random(5000) < 0.5, -(a * b) * (1 + rng.choice([0, 2**-52, -(2**-53)], 5000)), b)
    np.testing.assert_array_equal(raw(xla_cpu_math.fma64(a, b, c)), raw([libm.fma(*v) for v in zip(a, b, c)]))
    a, b, c = (v.astype(np.float32) for v in (a, b, c))
    expected = np.array([libm.fmaf(*v) for v in zip(a.tolist(), b.tolist(), c.tolist())], np.float32)
    np.testing.assert_array_equal(raw(xla_cpu_math.fma_small(a, b, c, np.float32)), raw(expected))


def test_outputs_are_fresh_and_typed():
    k = T.key(0)
    assert T.uniform(k, (0,)).shape == (0,) and T.normal(k, (2, 0), np.float16).dtype == np.float16
    assert T.random_bits(k, 64, ()).dtype == np.uint64 and T.split(k, (2, 3)).shape == (2, 3, 2)
    assert T.uniform(k, 4, "bfloat16").dtype == ml_dtypes.bfloat16
    assert_bits_equal(k, T.key(0))  # inputs are not mutated


@pytest.mark.parametrize("bad_key", [np.zeros(3, np.uint32), np.zeros((1, 2), np.uint32),
                                     np.array([0, 1]), np.zeros(2, np.float32)])
def test_bad_key_raises(bad_key):
    for call in (lambda: T.split(bad_key), lambda: T.fold_in(bad_key, 1),
                 lambda: T.random_bits(bad_key, 32, (2,)), lambda: T.uniform(bad_key, (2,)),
                 lambda: T.normal(bad_key, (2,)), lambda: T.threefry2x32(bad_key, np.uint32(0), np.uint32(0))):
        with pytest.raises(ValueError, match="key"):
            call()


def test_bad_arguments_raise():
    k = T.key(0)
    for width in (12, 32.0, True, "32"):
        with pytest.raises(ValueError, match="bit_width"):
            T.random_bits(k, width, (2,))
    for fn in (T.uniform, T.normal):
        for dtype in (np.int32, np.complex64, "float8_e4m3fn", "nope"):
            with pytest.raises(ValueError, match="dtype"):
                fn(k, (2,), dtype)
        with pytest.raises(ValueError, match="shape"):
            fn(k, (-1,))
    with pytest.raises(ValueError, match="minval"):
        T.uniform(k, (3,), np.float32, np.zeros(4), 1.0)
    with pytest.raises(ValueError, match="x0"):
        T.threefry2x32(k, np.zeros(2, np.int64), np.zeros(2, np.uint32))
    with pytest.raises(ValueError, match="num"):
        T.split(k, -2)
    with pytest.raises(ValueError, match="seed"):
        T.key(2**63)
    with pytest.raises(TypeError, match="seed"):
        T.key(1.5)
    with pytest.raises(ValueError, match="data"):
        T.fold_in(k, -1)


def test_float16_fma_detection_reads_the_linux_flag_name(tmp_path):
    # regression: the flag was looked up as "avx512fp16"; Linux writes "avx512_fp16", so an
    # Intel Sapphire Rapids host was treated as FMA-less and float16 uniform draws were off by 1 ulp
    from tlaloc._prims.xla_cpu_math import host_has_float16_fma
    spr, zen4 = tmp_path / "spr", tmp_path / "zen4"
    spr.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16 avx512_fp16 amx_tile\n")
    zen4.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\n")
    assert host_has_float16_fma(str(spr)) is True
    assert host_has_float16_fma(str(zen4)) is False
    assert host_has_float16_fma(str(tmp_path / "absent")) is False
