"""The CPU kernels of ``tlaloc/kernels/cpu/matmul.cc`` (x @ W with W as stored), through XLA.

Each format's kernel runs inside a compiled StableHLO program (``stored_matmul`` emitted as
``stablehlo.custom_call``) and is held to float64 NumPy on the dequantised matrix
(``dequantize`` below is written here, independently of the library's). Negative controls:
one changed weight block moves the result far beyond the tolerance; the NumPy definition of
the primitive is checked against the same oracle.
"""
import ml_dtypes
import numpy as np
import pytest

from tlaloc._prims.stored_matmul import FORMATS, kernel_call_wanted, kernel_calls, stored_matmul
from tlaloc._runtime import cpu_kernels

BLOCK = 32


#: the kernels are built with -march=native: q4_1 takes its bfloat16 dot products where the CPU has them
BF16_DOTS = cpu_kernels.q4_1_bf16_dots()


def to_bf16(a) -> np.ndarray:
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)      # round to nearest even


def kernel_want(fmt, x, parts) -> np.ndarray:
    """What the kernel of ``fmt`` computes, in float64: x @ W, except q4_1 with bfloat16 dot products,
    whose nibble sums take x as hi + lo (hi = bf16(x), lo = bf16(x - hi): matmul.cc's header) while
    its offsets multiply the float32 sums of x itself."""
    x64, w = np.asarray(x, np.float64), dequantize(fmt, parts)
    if fmt != "q4_1" or not BF16_DOTS:
        return x64 @ w
    hi = to_bf16(x)
    split = hi.astype(np.float64) + to_bf16(np.asarray(x, np.float32) - hi).astype(np.float64)
    offsets = np.repeat(parts[2].astype(np.float64), w.shape[0] // parts[2].shape[0], axis=0)     # (K, N)
    return split @ w + (x64 - split) @ offsets


def _kernels_or_skip():
    if not cpu_kernels.load():
        pytest.skip(f"the CPU kernels cannot be built here: {cpu_kernels.reason()}")


def dequantize(fmt, parts) -> np.ndarray:
    """W (K, N) float64, from GGUF's definitions (ggml dequantize_row_q8_0 / q4_1); the ``_t``
    formats store W.T row by row (scales per row, or per (row, block))."""
    if fmt.endswith("_t"):
        if fmt == "i8ch_t":
            return (parts[0].astype(np.float64) * parts[1].astype(np.float64)[:, None]).T
        return dequantize(fmt[:-2], [np.ascontiguousarray(p.T) for p in parts])
    if fmt in ("f32", "bf16"):
        return parts[0].astype(np.float64)
    q, scale = parts[0], parts[1].astype(np.float64)
    if fmt == "i8ch":
        return q.astype(np.float64) * scale[None, :]
    K = q.shape[0] * (2 if fmt == "q4_1" else 1)
    group = K // scale.shape[0]                          # q4_1: 32 (GGUF) or 64 (int4 group 64); q8_0: 32 or 16
    w = np.empty((K, q.shape[1]))
    for k in range(K):
        b, j = divmod(k, BLOCK)
        if fmt == "q8_0":
            w[k] = q[k] * scale[k // group]
        else:
            byte = q[b * 16 + (j % 16)].astype(np.int64)
            nibble = byte & 15 if j < 16 else byte >> 4
            w[k] = nibble * scale[k // group] + parts[2][k // group].astype(np.float64)
    return w


def make_parts(fmt, K, N, seed=0):
    if fmt.endswith("_t"):
        parts = make_parts(fmt[:-2], K, N, seed)
        return [np.ascontiguousarray(p.T) for p in parts]
    rng = np.random.default_rng(seed)
    if fmt == "f32":
        return [rng.standard_normal((K, N)).astype(np.float32)]
    if fmt == "bf16":
        return [rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)]
    if fmt == "i8ch":
        return [rng.integers(-127, 128, (K, N), dtype=np.int8), (rng.random(N) * 0.02 + 0.001).astype(np.float32)]
    scale = (rng.random((K // BLOCK, N)) * 0.02 + 0.001).astype(np.float16)
    if fmt == "q8_0":
        return [rng.integers(-127, 128, (K, N), dtype=np.int8), scale]
    offset = (-rng.random((K // BLOCK, N)) * 0.1).astype(np.float16)
    return [rng.integers(0, 256, (K // 2, N), dtype=np.uint8), scale, offset]


def as_stored(fmt, parts):
    """The arrays as the kernel reads them: the ``_p64`` targets (every format without ``_t``)
    take their weights in panel order, as the executor uploads them."""
    if fmt.endswith("_t"):
        return parts
    return [cpu_kernels.pack_panels(p) for p in parts]


def compiled(fmt, x_shape, parts):
    """A compiled program computing stored_matmul(x, *parts) with the kernel (custom call)."""
    from tlaloc.serving.export.programs import Slot, lower
    from tlaloc.serving.runtime.device import Program
    slots = [Slot("x", "token_ids", np.dtype(np.float32), x_shape)]
    slots += [Slot(f"p{i}", "weight", p.dtype, p.shape) for i, p in enumerate(parts)]
    with kernel_calls((fmt,)):
        program = lower(lambda x, *ps: [stored_matmul(x, *ps, format=fmt)], slots, f"mm_{fmt}")
    assert f"@{cpu_kernels.target_name(fmt)}(" in program.text
    return Program(program.text, "cpu", [s.name for s in slots], [(s.dtype, s.shape) for s in slots])


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("x_shape", [(1, 96), (3, 96), (2, 4, 96), (13, 96), (16, 96)])
def test_kernel_equals_float64_on_the_dequantised_matrix(fmt, x_shape):
    _kernels_or_skip()
    K, N = 96, 192
    parts = make_parts(fmt, K, N)
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    run = compiled(fmt, x_shape, parts)
    got = np.asarray(run(x, *as_stored(fmt, parts))[0])
    want = kernel_want(fmt, x, parts)
    assert got.shape == x_shape[:-1] + (N,) and got.dtype == np.float32
    scale = np.abs(x).astype(np.float64) @ np.abs(dequantize(fmt, parts))       # the size of the sums
    assert np.max(np.abs(got - want) / scale) < 1e-6
    np.testing.assert_array_equal(np.asarray(run(x, *as_stored(fmt, parts))[0]), got)   # the same bits again
    # negative control: one changed block of weights is seen
    bad = [p.copy() for p in parts]
    block = (slice(0, 64), slice(0, BLOCK)) if fmt.endswith("_t") else (slice(0, BLOCK // 2), slice(0, 64))
    bad[0][block] = bad[0][block] // 2 if fmt.split("_t")[0] not in ("f32", "bf16") else 0
    moved = np.asarray(run(x, *as_stored(fmt, bad))[0])
    assert np.max(np.abs(moved - want) / scale) > 1e-3
    if not fmt.endswith("_t"):          # negative control: the weights in the plain (R, N) layout are misread
        plain = np.asarray(run(x, *parts)[0])
        assert np.max(np.abs(plain - want) / scale) > 1e-3
    # the primitive's NumPy definition (the eager path) is the same product, of x itself
    eager = np.asarray(stored_matmul(x, *parts, format=fmt))
    assert np.max(np.abs(eager - x.astype(np.float64) @ dequantize(fmt, parts)) / scale) < 1e-6


def make_q4_parts(K, N, group, side_dtype, seed=0):
    """q4_1 parts with ``group`` input rows per scale and offset of ``side_dtype`` (int4 group 64,
    ggml Q4_K's float32 sides: float32 values a float16 cannot hold)."""
    rng = np.random.default_rng(seed)
    scale = (rng.random((K // group, N)) * 0.02 + 0.001).astype(side_dtype)
    offset = (-rng.random((K // group, N)) * 0.1).astype(side_dtype)
    return [rng.integers(0, 256, (K // 2, N), dtype=np.uint8), scale, offset]


@pytest.mark.parametrize("group, side_dtype", [(64, np.float16), (32, np.float32), (64, np.float32)])
@pytest.mark.parametrize("x_shape", [(1, 192), (5, 192)])
def test_q4_1_kernel_takes_groups_of_64_and_float32_sides(group, side_dtype, x_shape):
    _kernels_or_skip()
    K, N = 192, 128
    parts = make_q4_parts(K, N, group, side_dtype)
    if side_dtype == np.float32:
        assert np.any(parts[1].astype(np.float16).astype(np.float32) != parts[1])   # not float16 values
    x = np.random.default_rng(4).standard_normal(x_shape).astype(np.float32)
    run = compiled("q4_1", x_shape, parts)
    got = np.asarray(run(x, *as_stored("q4_1", parts))[0])
    want = kernel_want("q4_1", x, parts)
    scale = np.abs(x).astype(np.float64) @ np.abs(dequantize("q4_1", parts))
    assert np.max(np.abs(got - want) / scale) < 1e-6
    if x_shape[0] > 1:                                    # a row's result does not depend on its batch
        alone = np.asarray(compiled("q4_1", (1, K), parts)(x[:1], *as_stored("q4_1", parts))[0])
        np.testing.assert_array_equal(alone[0], got[0])
    eager = np.asarray(stored_matmul(x, *parts, format="q4_1"))              # the NumPy definition
    assert np.max(np.abs(eager - x.astype(np.float64) @ dequantize("q4_1", parts)) / scale) < 1e-6
    # negative control: a changed block of one group is seen
    bad = [p.copy() for p in parts]
    bad[1][-1, :64] *= 2
    moved = np.asarray(run(x, *as_stored("q4_1", bad))[0])
    assert np.max(np.abs(moved - want) / scale) > 1e-3
    if group == 64:
        # the same weights with each group's row repeated for its two blocks, as group 32: the same product
        as32 = [parts[0]] + [np.repeat(p, 2, axis=0) for p in parts[1:]]          # (K/32, N)
        same = np.asarray(compiled("q4_1", x_shape, as32)(x, *as_stored("q4_1", as32))[0])
        assert np.max(np.abs(same - want) / scale) < 1e-6
        # negative control: group-64 rows read as if block b had row b (a group-32 reading of them)
        misread = [parts[0]] + [np.concatenate([p, p]) for p in parts[1:]]       # row b for block b < K/64
        got32 = np.asarray(compiled("q4_1", x_shape, misread)(x, *as_stored("q4_1", misread))[0])
        assert np.max(np.abs(got32 - want) / scale) > 1e-3


def test_q4_1_kernel_refuses_other_groups():
    """A scale with K/16 rows (a group of 16) is refused before the kernel, by the primitive."""
    from tlaloc.errors import ShapeError
    x = np.zeros((1, 64), np.float32)
    with pytest.raises(ShapeError, match=r"must be \(K/32, N\) or \(K/64, N\)"):
        stored_matmul(x, np.zeros((32, 64), np.uint8), np.zeros((4, 64), np.float16), np.zeros((4, 64), np.float16),
                      format="q4_1")
    with pytest.raises(ShapeError, match="scale and offset must have one dtype"):
        stored_matmul(x, np.zeros((32, 64), np.uint8), np.zeros((2, 64), np.float16), np.zeros((2, 64), np.float32),
                      format="q4_1")


@pytest.mark.parametrize("rows, dtype, message", [(4, "f16", "the group .K / scale rows. must be 32 or 64"),
                                                   (2, "bf16", "must both be float16 or both float32")])
def test_q4_1_kernel_itself_refuses_other_groups_and_side_dtypes(rows, dtype, message):
    """The kernel's own checks (the primitive refuses these first): a program text edited to pass
    scale and offset of K/16 rows (a group of 16), or bfloat16 ones, fails with the kernel's error."""
    _kernels_or_skip()
    from tlaloc.serving.runtime.device import Program
    parts = make_q4_parts(64, 64, 32, np.float16)
    program_text = _q4_1_text(parts)
    text = program_text.replace("tensor<2x64xf16>", f"tensor<{rows}x64x{dtype}>")
    assert text != program_text
    side = np.zeros((rows, 64), ml_dtypes.bfloat16 if dtype == "bf16" else np.float16)
    shapes = [(np.dtype(np.float32), (1, 64)), (parts[0].dtype, parts[0].shape)] + [(side.dtype, side.shape)] * 2
    run = Program(text, "cpu", ["x", "p0", "p1", "p2"], shapes)
    with pytest.raises(Exception, match=message):
        run(np.zeros((1, 64), np.float32), parts[0], side, side)


def _q4_1_text(parts):
    from tlaloc.serving.export.programs import Slot, lower
    slots = [Slot("x", "token_ids", np.dtype(np.float32), (1, 64))]
    slots += [Slot(f"p{i}", "weight", p.dtype, p.shape) for i, p in enumerate(parts)]
    with kernel_calls(("q4_1",)):
        return lower(lambda x, *ps: [stored_matmul(x, *ps, format="q4_1")], slots, "mm_q4_1").text


def make_q6_parts(K, N, seed=0):
    """q8_0 parts of group 16 with float32 scales, as ggml's Q6_K is kept: q - 32 in -32..31 and
    d * sc (float16 d times an int8 sc: float32 values, most not float16 ones)."""
    rng = np.random.default_rng(seed)
    d = (rng.random((K // 256 + 1, N)) * 0.002 + 1e-4).astype(np.float16).astype(np.float32)
    sc = rng.integers(-128, 128, (K // 16, N)).astype(np.float32)
    scale = (np.repeat(d, 16, axis=0)[:K // 16] * sc).astype(np.float32)
    return [rng.integers(-32, 32, (K, N), dtype=np.int8), scale]


@pytest.mark.parametrize("K, N", [(96, 192), (512, 128)])
@pytest.mark.parametrize("M", [1, 3, 4, 13, 16])
def test_q8_0_kernel_takes_float32_scales_per_16_rows(K, N, M):
    """The q8_0 target with a (K/16, N) float32 scale (ggml's Q6_K kept exactly): held to float64
    on W[k] = q[k] * scale[k // 16] (written here); a row's bits do not depend on its batch;
    negative controls: a changed scale row of one 16-row group, and a group-32 reading."""
    _kernels_or_skip()
    parts = make_q6_parts(K, N)
    assert parts[1].shape == (K // 16, N) and np.any(parts[1].astype(np.float16).astype(np.float32) != parts[1])
    w64 = parts[0].astype(np.float64) * np.repeat(parts[1].astype(np.float64), 16, axis=0)   # the oracle
    np.testing.assert_array_equal(dequantize("q8_0", parts), w64)
    x = np.random.default_rng(5).standard_normal((M, K)).astype(np.float32)
    run = compiled("q8_0", x.shape, parts)
    got = np.asarray(run(x, *as_stored("q8_0", parts))[0])
    want = x.astype(np.float64) @ w64
    size = np.abs(x).astype(np.float64) @ np.abs(w64)
    assert got.shape == (M, N) and got.dtype == np.float32
    assert np.max(np.abs(got - want) / size) < 1e-6
    np.testing.assert_array_equal(np.asarray(run(x, *as_stored("q8_0", parts))[0]), got)    # the same bits again
    if M > 1:                                                                 # the sum order is fixed by K alone
        alone = np.asarray(compiled("q8_0", (1, K), parts)(x[-1:], *as_stored("q8_0", parts))[0])
        np.testing.assert_array_equal(alone[0], got[-1])
    eager = np.asarray(stored_matmul(x, *parts, format="q8_0"))              # the NumPy definition
    assert np.max(np.abs(eager - want) / size) < 1e-6
    # negative control: one scale row (the second group of a block) changed is seen
    bad = [parts[0], parts[1].copy()]
    bad[1][3, :64] *= 2
    moved = np.asarray(run(x, *as_stored("q8_0", bad))[0])
    assert np.max(np.abs(moved - want) / size) > 1e-3
    # negative control: the scales read one per 32 rows (float16 of each block's first group) are wrong
    as32 = [parts[0], np.ascontiguousarray(parts[1][::2].astype(np.float16))]
    misread = np.asarray(compiled("q8_0", x.shape, as32)(x, *as_stored("q8_0", as32))[0])
    assert np.max(np.abs(misread - want) / size) > 1e-3


def test_q8_0_refuses_other_groups_and_scale_dtypes():
    """The primitive refuses float16 scales of 16 rows and float32 ones of 32 by name; the kernel
    itself (a program text edited past the primitive) refuses them and a group of 8."""
    from tlaloc.errors import ShapeError
    x = np.zeros((1, 64), np.float32)
    q = np.zeros((64, 64), np.int8)
    for scale in (np.zeros((4, 64), np.float16), np.zeros((2, 64), np.float32), np.zeros((8, 64), np.float32)):
        with pytest.raises(ShapeError, match=r"q8_0 scale .* must be \(K/32, N\) float16 or \(K/16, N\) float32"):
            stored_matmul(x, q, scale, format="q8_0")
    _kernels_or_skip()
    from tlaloc.serving.export.programs import Slot, lower
    from tlaloc.serving.runtime.device import Program
    parts = [q, np.zeros((2, 64), np.float16)]
    slots = [Slot("x", "token_ids", np.dtype(np.float32), (1, 64))]
    slots += [Slot(f"p{i}", "weight", p.dtype, p.shape) for i, p in enumerate(parts)]
    with kernel_calls(("q8_0",)):
        program_text = lower(lambda x, *ps: [stored_matmul(x, *ps, format="q8_0")], slots, "mm_q8_0").text
    for rows, dtype in ((4, np.float16), (2, np.float32), (8, np.float32)):
        mlir = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32"}[np.dtype(dtype)]
        text = program_text.replace("tensor<2x64xf16>", f"tensor<{rows}x64x{mlir}>")
        assert text != program_text
        scale = np.ones((rows, 64), dtype)
        run = Program(text, "cpu", ["x", "p0", "p1"], [(np.dtype(np.float32), (1, 64)), (q.dtype, q.shape),
                                                       (scale.dtype, scale.shape)])
        with pytest.raises(Exception, match="the group .K / scale rows. must be 32 with float16 scales or 16 with float32"):
            run(x, q, scale)
    # control: the unedited text runs
    Program(program_text, "cpu", ["x", "p0", "p1"], [(s.dtype, s.shape) for s in slots])(x, *parts)


def test_wide_outputs_and_long_inputs_split_over_units():
    """A head-like width (many column units) and a down-projection-like depth (many blocks)."""
    _kernels_or_skip()
    for K, N in ((64, 64 * 37), (1536, 128)):
        parts = make_parts("q4_1", K, N, seed=K)
        x = np.random.default_rng(2).standard_normal((2, K)).astype(np.float32)
        got = np.asarray(compiled("q4_1", x.shape, parts)(x, *as_stored("q4_1", parts))[0])
        want = kernel_want("q4_1", x, parts)
        scale = np.abs(x).astype(np.float64) @ np.abs(dequantize("q4_1", parts))
        assert np.max(np.abs(got - want) / scale) < 1e-6


def test_pack_panels_puts_element_r_n_where_the_kernels_read_it():
    R, N = 5, 192
    a = np.arange(R * N, dtype=np.int32).reshape(R, N)
    flat = cpu_kernels.pack_panels(a).ravel()
    for r in range(R):
        for n in range(N):
            assert flat[((n // 64) * R + r) * 64 + n % 64] == a[r, n]
    assert cpu_kernels.pack_panels(a).shape == (R, N)
    q = np.arange(6 * N, dtype=np.int64).reshape(6, N)            # q4_1 bytes: rows in pairs too
    packed = cpu_kernels.pack_panels((q % 251).astype(np.uint8)).ravel()
    for r in range(6):
        for n in range(N):
            assert packed[(((n // 64) * 3 + r // 2) * 64 + n % 64) * 2 + r % 2] == q[r, n] % 251
    with pytest.raises(ValueError, match="even number of rows"):
        cpu_kernels.pack_panels(np.zeros((3, 64), np.uint8))
    scale = np.arange(N, dtype=np.float32)
    assert cpu_kernels.pack_panels(scale) is scale                # a per-column vector is its own panel order
    with pytest.raises(ValueError, match="multiple of 64"):
        cpu_kernels.pack_panels(np.zeros((4, 96), np.float32))


def test_kernel_calls_are_traced_only_when_asked_and_for_tile_widths():
    assert not kernel_call_wanted("q4_1", 128)
    with kernel_calls(("q4_1",)):
        assert kernel_call_wanted("q4_1", 128)
        assert not kernel_call_wanted("q4_1", 96)           # not a whole number of 64-column tiles
        assert not kernel_call_wanted("q8_0", 128)          # a format not asked for
    assert not kernel_call_wanted("q4_1", 128)


def test_bad_parts_are_refused_by_name():
    from tlaloc.errors import ShapeError
    x = np.zeros((1, 64), np.float32)
    with pytest.raises(ShapeError, match="q4_1 part scale must be float16 or float32"):
        stored_matmul(x, np.zeros((32, 64), np.uint8), np.zeros((2, 64), np.int8), np.zeros((2, 64), np.float16),
                      format="q4_1")
    with pytest.raises(ShapeError, match=r"x's last axis \(64\) must equal the weight's input size \(96\)"):
        stored_matmul(x, np.zeros((96, 64), np.float32), format="f32")
    with pytest.raises(ShapeError, match="format must be one of"):
        stored_matmul(x, np.zeros((64, 64), np.float32), format="q5_k")


def test_a_missing_compiler_is_reported_and_the_portable_programs_run(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("TLALOC_CACHE_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match="no-such-compiler"):
        cpu_kernels.build()


def test_a_weight_computed_in_the_program_is_put_in_panel_order_there():
    """A converted weight (not a program input, so not uploaded packed) reaches the f32 panel
    kernel through a transpose in the program; export lists no input of it as packed."""
    _kernels_or_skip()
    from tlaloc import numpy as tnp
    from tlaloc.serving.export.artifact import _panel_weights
    from tlaloc.serving.export.programs import Slot, lower
    from tlaloc.serving.runtime.device import Program
    K, N = 96, 192
    w = make_parts("bf16", K, N)[0]
    x = np.random.default_rng(3).standard_normal((2, K)).astype(np.float32)
    slots = [Slot("x", "token_ids", np.dtype(np.float32), x.shape), Slot("w", "weight", w.dtype, w.shape)]
    with kernel_calls(("f32",)):
        program = lower(lambda x, w: [stored_matmul(x, tnp.astype(w, tnp.float32), format="f32")], slots, "mm")
    assert "stablehlo.transpose" in program.text and _panel_weights(program.text, ["x", "w"], "mm") == []
    run = Program(program.text, "cpu", ["x", "w"], [(s.dtype, s.shape) for s in slots])
    got = np.asarray(run(x, w)[0])                                           # the plain layout goes in
    want = x.astype(np.float64) @ w.astype(np.float64)
    scale = np.abs(x).astype(np.float64) @ np.abs(w.astype(np.float64))
    assert np.max(np.abs(got - want) / scale) < 1e-6
    packed = np.asarray(run(x, cpu_kernels.pack_panels(w))[0])              # control: packing twice is wrong
    assert np.max(np.abs(packed - want) / scale) > 1e-3


def test_q4_1_bfloat16_dots_stay_within_the_stated_bound_of_x_itself():
    """With AVX512_BF16 the q4_1 kernel splits x into two bfloat16 parts (|x - hi - lo| <= 2^-17 |x|,
    matmul.cc's header): against float64 of x itself the error stays within that bound on the
    nibble sums, over a down-projection's depth. Control: x rounded to bfloat16 once (hi alone)
    is far outside it, so the lo part is really used."""
    _kernels_or_skip()
    if not BF16_DOTS:
        pytest.skip("this CPU has no AVX512_BF16: the q4_1 kernel multiplies float32 x (held to 1e-6 above)")
    K, N = 1536, 128
    parts = make_parts("q4_1", K, N, seed=7)
    x = (np.random.default_rng(8).standard_normal((3, K)) * 3).astype(np.float32)
    got = np.asarray(compiled("q4_1", x.shape, parts)(x, *as_stored("q4_1", parts))[0])
    w = dequantize("q4_1", parts)
    nibble_part = w - np.repeat(parts[2].astype(np.float64), BLOCK, axis=0)        # nibble * scale, >= 0
    bound = 2.0 ** -17 * (np.abs(x).astype(np.float64) @ nibble_part)
    rounding = 1e-6 * (np.abs(x).astype(np.float64) @ np.abs(w))                    # the float32 sums
    err = np.abs(got - x.astype(np.float64) @ w)
    assert np.all(err <= bound + rounding), np.max(err / (bound + rounding))
    hi_only = to_bf16(x).astype(np.float64) @ w
    assert np.max(np.abs(hi_only - x.astype(np.float64) @ w) / (bound + rounding)) > 20


def test_q4_1_bytes_computed_in_the_program_are_put_in_panel_order_there():
    """q4_1 bytes that are not a program input reach the kernel through the program's own
    transpose into the paired panel order (the executor's pack_panels for uint8 arrays)."""
    _kernels_or_skip()
    from tlaloc import numpy as tnp
    from tlaloc.serving.export.programs import Slot, lower
    from tlaloc.serving.runtime.device import Program
    K, N = 96, 192
    q, scale, offset = make_parts("q4_1", K, N, seed=5)
    x = np.random.default_rng(6).standard_normal((2, K)).astype(np.float32)
    slots = [Slot("x", "token_ids", np.dtype(np.float32), x.shape), Slot("q", "weight", q.dtype, q.shape),
             Slot("s", "weight", scale.dtype, scale.shape), Slot("m", "weight", offset.dtype, offset.shape)]
    with kernel_calls(("q4_1",)):
        program = lower(lambda x, q, s, m: [stored_matmul(x, tnp.maximum(q, np.uint8(0)), s, m, format="q4_1")],
                        slots, "mm")
    assert "stablehlo.transpose" in program.text
    run = Program(program.text, "cpu", ["x", "q", "s", "m"], [(s_.dtype, s_.shape) for s_ in slots])
    got = np.asarray(run(x, q, *[cpu_kernels.pack_panels(a) for a in (scale, offset)])[0])
    want = kernel_want("q4_1", x, [q, scale, offset])
    dense = np.abs(x).astype(np.float64) @ np.abs(dequantize("q4_1", [q, scale, offset]))
    assert np.max(np.abs(got - want) / dense) < 1e-6
    misread = np.asarray(run(x, cpu_kernels.pack_panels(q), *[cpu_kernels.pack_panels(a) for a in (scale, offset)])[0])
    assert np.max(np.abs(misread - want) / dense) > 1e-3                    # control: packing twice is wrong


def test_q4_1_takes_the_largest_finite_x_and_keeps_non_finite_ones():
    """x beyond bfloat16's largest finite value (3.3895e38) but finite in float32 still splits into
    finite parts (hi is rounded down, not to infinity); an infinite or NaN x gives a non-finite
    result (NaN for infinity too, as with float32 x: GGUF's block sum multiplies the offset, here 0,
    by the sum of x)."""
    _kernels_or_skip()
    K, N = 64, 64
    q = np.zeros((K // 2, N), np.uint8)
    q[0, :] = 1                                                   # row 0: nibble 1 (low), row 16: 0
    scale = np.full((K // BLOCK, N), 2.0 ** -100, np.float32)   # float32 sides
    offset = np.zeros((K // BLOCK, N), np.float32)
    parts = [q, scale, offset]
    run = compiled("q4_1", (3, K), parts)
    x = np.zeros((3, K), np.float32)
    x[0, 0] = np.float32(3.4e38)                                  # finite, above bfloat16's largest
    x[1, 0] = np.inf
    x[2, 0] = np.nan
    got = np.asarray(run(x, *as_stored("q4_1", parts))[0])
    # hi rounded down leaves |x - hi| up to 2^-7 |x|, and lo keeps 8 bits of it: within 2^-15 |x|
    np.testing.assert_allclose(got[0], np.float64(np.float32(3.4e38)) * 2.0 ** -100, rtol=2.0 ** -15)
    assert not np.any(np.isfinite(got[1:]))


def test_q4_1_bfloat16_dots_below_2_to_the_minus_117_keep_the_weaker_stated_bound():
    """Under |x| = 2^-117 the lo part is a bfloat16 denormal that vdpbf16ps reads as 0: the header
    states 2^-9 |x| there (found by a hostile-input pass). Control: 2^-17 does not hold there."""
    _kernels_or_skip()
    if not BF16_DOTS:
        pytest.skip("this CPU has no AVX512_BF16: the q4_1 kernel multiplies float32 x")
    K, N = 64, 64
    parts = make_q4_parts(K, N, 32, np.float32, seed=9)
    parts[2][:] = 0                                               # offsets 0: the nibble sums alone
    x = (np.random.default_rng(10).standard_normal((1, K)) * 1e-35).astype(np.float32)
    got = np.asarray(compiled("q4_1", x.shape, parts)(x, *as_stored("q4_1", parts))[0])
    w = dequantize("q4_1", parts)
    size = np.abs(x).astype(np.float64) @ np.abs(w)
    err = np.abs(got - x.astype(np.float64) @ w)
    assert np.all(err <= (2.0 ** -9 + 1e-6) * size)
    assert np.max(err / size) > 2.0 ** -17


@pytest.mark.parametrize("fmt", ["f32", "bf16", "i8ch"])
def test_the_register_loops_give_a_rows_bits_alone_and_in_any_batch(fmt):
    """Regression for the AVX2 register loops (matmul.cc's rows_avx2, which keep a block's sums in
    registers for groups of 1 to 6 rows): each output is the one-row loop's chain (a multiply, then an
    add, in the order of K), so every row of a batch of 16 (groups 6, 5, 5), 13, 12, 7 (4, 3), 6, 4, 3
    and 2 equals that row computed alone, bit for bit; K = 100 leaves a short last block. Control: the
    batch's rows differ from one another (a row is not just copied)."""
    _kernels_or_skip()
    K, N = 100, 128
    parts = make_parts(fmt, K, N, seed=3)
    x = np.random.default_rng(4).standard_normal((16, K)).astype(np.float32)
    one = compiled(fmt, (1, K), parts)
    alone = np.stack([np.asarray(one(x[i:i + 1], *as_stored(fmt, parts))[0])[0] for i in range(16)])
    assert len({row.tobytes() for row in alone}) == 16
    for M in (16, 13, 12, 7, 6, 4, 3, 2):
        got = np.asarray(compiled(fmt, (M, K), parts)(x[:M], *as_stored(fmt, parts))[0])
        np.testing.assert_array_equal(got, alone[:M])
    want = x.astype(np.float64) @ dequantize(fmt, parts)
    assert np.max(np.abs(alone - want) / (np.abs(x).astype(np.float64) @ np.abs(dequantize(fmt, parts)))) < 1e-6
