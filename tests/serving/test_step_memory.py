"""What a compiled decode step moves besides the weights: no copies of the KV pools, no
transposed copy of a tied embedding, and bf16 weights converted one at a time.

These read XLA's optimised HLO and compiled memory statistics of the programs the Engine
runs (the PJRT executable), so they check the program XLA built, not its speed. Engines
that inspect the portable programs pass ``cpu_kernels=False``; the CPU-kernel variant is
checked on its own (no float32 weight at all).
"""
import re

import numpy as np
import pytest

from .fixtures import PROMPTS


def _compiled(eng, mode, B, C):
    _, program = eng.executor.executable(mode, B, C)
    return program._exe


def _entry(hlo: str) -> str:
    return hlo[hlo.index("\nENTRY"):]


def _shape(dtype: str, shape) -> str:
    return f"{dtype}[{','.join(str(d) for d in shape)}]"


def _pool_views(shape) -> list:
    """The shapes a copy of a KV pool (L, P, BS, K, E) (float32: every layer's pages) or
    (P, BS, K, E) (bfloat16: one layer's), or of one layer's pages, would have."""
    L, P, BS, K, E = shape if len(shape) == 5 else (1, *shape)
    return [(L, P, BS, K, E), (L * P, BS, K, E), (L * P * BS, K, E), (P, BS, K, E), (P * BS, K, E)]


@pytest.mark.parametrize("B", [1, 4])
def test_decode_step_updates_the_pools_without_copying_them(engine, B):
    eng = engine("llama")
    pool = eng.manifest["kv"]["slots"][0]
    hlo = _entry(_compiled(eng, "decode", B, 16).get_hlo_text())
    pool_shapes = {_shape("f32", s) for s in _pool_views(pool["shape"])}
    copied = [m for m in re.findall(r"= (f32\[[\d,]+\])\{[\d,]*\} copy\(", hlo) if m in pool_shapes]
    assert copied == [], f"decode b{B}: {len(copied)} copies of KV pools per step"
    # ... and the step still writes where it should: same buffers, tokens as before
    pointers = eng.kv_pool_pointers()
    [r] = eng.generate([PROMPTS[1]], max_new_tokens=4)
    assert eng.kv_pool_pointers() == pointers and len(r.token_ids) == 4


def test_tied_lm_head_reads_the_embedding_in_place(engine):
    eng = engine("qwen3_tied")
    V, D = eng.config["vocab_size"], eng.config["hidden_size"]
    hlo = _compiled(eng, "decode", 1, 16).get_hlo_text()
    assert not re.search(rf"f32\[{D},{V}\]\{{1,0\}} copy\(", hlo), "the (V, D) table is copied into (D, V) order"


_CONVERT_PROGRAM = """
import numpy as np
from tlaloc.serving.runtime import device                       # before XLA starts: sets the scheduler flag
import jax, jax.numpy as jnp, ml_dtypes
N, D, F = 8, 256, 1024
def f(x, *ws):                                          # 8 layers of x @ f32(w_bf16)
    for w in ws:
        x = jnp.tanh(x @ w.astype(jnp.float32)) @ jnp.ones((F, D), jnp.float32)
    return x
args = [jax.ShapeDtypeStruct((1, D), jnp.float32)] + [jax.ShapeDtypeStruct((D, F), jnp.bfloat16)] * N
p = device.Program(jax.jit(f).lower(*args).as_text(), "cpu", ["x"] + [f"w{i}" for i in range(N)],
                   [(np.float32, (1, D))] + [(ml_dtypes.bfloat16, (D, F))] * N)
print(device.memory_scheduler_active(), p._exe.get_compiled_memory_stats().temp_size_in_bytes, N * D * F * 4)
"""


@pytest.mark.parametrize("xla_flags, one_at_a_time", [("", True), ("--xla_cpu_multi_thread_eigen=false", True),
                                                     ("--xla_cpu_enable_concurrency_optimized_scheduler=true", False)])
def test_bf16_weights_are_converted_one_at_a_time(xla_flags, one_at_a_time):
    """The serving runtime's scheduler flag: converted weights live one (or two) at a time,
    not all at once; a user's own choice of scheduler is kept (the negative control)."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "XLA_FLAGS": xla_flags}
    out = subprocess.run([sys.executable, "-c", _CONVERT_PROGRAM], env=env, capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    active, temp, all_f32 = out[-3] == "True", int(out[-2]), int(out[-1])
    assert active == one_at_a_time
    assert (temp < all_f32 / 2) == one_at_a_time, (temp, all_f32)


# fuse=False: the fused gate/up matrix (D, 2F) = (64, 256) would have the head's shape
@pytest.mark.parametrize("name, options", [("qwen3_tied", dict(dtype="bf16", fuse=False)),
                                           ("qwen3_untied", dict(weights="int8", fuse=False))])
def test_bf16_and_int8_heads_are_converted_a_slice_at_a_time(name, options, tiny, tmp_path, monkeypatch):
    """Without the low-precision dots (``lowp.ENABLED = False``), no float32 copy of the whole
    output head: with HEAD_CHUNK below the vocabulary, the optimised decode step holds
    (chunk, D) slices only, and its greedy ids are bit-identical to the one-slice program
    (HEAD_CHUNK above the vocabulary: the whole table converted, the negative control)."""
    from tlaloc.models import lowp
    from tlaloc.serving import Engine
    from tlaloc.serving.export import programs
    from tlaloc.serving.export import export
    from .fixtures import LADDER
    monkeypatch.setattr(lowp, "ENABLED", False)
    export(tiny(name)[1], tmp_path / "whole", **LADDER, **options, progress=False)
    whole = Engine(tmp_path / "whole", fast_compile=True, cpu_kernels=False)
    V, D = whole.config["vocab_size"], whole.config["hidden_size"]
    chunk = 32
    assert V > chunk and V % chunk == 0 and programs.HEAD_CHUNK >= V
    full = re.compile(rf"\bf32\[({V},{D}|{D},{V})\]")
    # the entry computation's instructions are buffers; fused computations' are not
    assert full.search(_entry(_compiled(whole, "decode", 1, 16).get_hlo_text())), "control: the whole table in f32"

    monkeypatch.setattr(programs, "HEAD_CHUNK", chunk)
    export(tiny(name)[1], tmp_path / "art", **LADDER, **options, progress=False)
    sliced = Engine(tmp_path / "art", fast_compile=True, cpu_kernels=False)
    hlo = _entry(_compiled(sliced, "decode", 1, 16).get_hlo_text())
    assert not full.search(hlo), f"{name} {options}: a float32 (V, D) head temporary"
    assert re.search(rf"\bf32\[({chunk},{D}|{D},{chunk})\]", hlo), "no (chunk, D) slice of the head"
    greedy = [r.token_ids for r in sliced.generate(PROMPTS, max_new_tokens=8, stop=[])]
    assert greedy == [r.token_ids for r in whole.generate(PROMPTS, max_new_tokens=8, stop=[])]


@pytest.mark.parametrize("options", [dict(weights="q8_0"), dict(weights="int8")])
def test_quantized_matrices_are_converted_a_chunk_of_rows_at_a_time(options, tiny, tmp_path, monkeypatch):
    """No float32 copy of a whole quantized (in, out) matrix in the optimised decode step (int8:
    without the low-precision dots, ``lowp.ENABLED = False``): with quantized.CHUNK = 32, only (32, out) slices are converted (the one-dot program, CHUNK = 0,
    holds the whole matrices in float32: the negative control). Tiny llama: D 64, F 128,
    q/k/v (64, 128) fused, down (128, 64); the output head is sliced by HEAD_CHUNK instead."""
    from tlaloc.models import lowp, quantized
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    from .fixtures import LADDER
    monkeypatch.setattr(lowp, "ENABLED", False)                       # int8: the chunked float32 path
    whole = re.compile(r"\bf32\[(64,128|128,64)\]")                    # wqkv, w_down
    hlo = {}
    for chunk in (0, 32):
        monkeypatch.setattr(quantized, "CHUNK", chunk)
        export(tiny("llama")[1], tmp_path / f"art{chunk}", **LADDER, **options, progress=False)
        eng = Engine(tmp_path / f"art{chunk}", fast_compile=True, cpu_kernels=False)
        hlo[chunk] = _entry(_compiled(eng, "decode", 1, 16).get_hlo_text())
    assert whole.search(hlo[0]), "control: the one-dot program converts whole matrices"
    assert not whole.search(hlo[32]), f"{options}: a float32 copy of a whole quantized matrix"
    assert re.search(r"\bf32\[32,(128|64)\]", hlo[32]), "no (32, out) converted slice"


@pytest.mark.parametrize("options", [dict(weights="q4_1"), dict(weights="q8_0"), dict(weights="int8"),
                                     dict(dtype="bf16")])
def test_the_cpu_kernel_variant_converts_no_weight_to_float32(options, tiny, tmp_path):
    """With the CPU kernels each product reads the stored bytes: every layer product and the head
    is one kernel call (4 per layer, 1 head) and no float32 (in, out) matrix or converted slice
    of one is left in the decode step. Control: the portable program of the same q4_1 / q8_0
    artifact has the converted slices (its int8 and bf16 programs use low-precision dots)."""
    from tlaloc._runtime import cpu_kernels
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    from .fixtures import LADDER
    if not cpu_kernels.load():
        pytest.skip(f"the CPU kernels cannot be built here: {cpu_kernels.reason()}")
    export(tiny("llama")[1], tmp_path / "art", **LADDER, **options, progress=False)
    weights = re.compile(r"\bf32\[(64|32|16),(128|256)\]|\bf32\[128,64\]")   # wqkv, w_gate_up, w_down
    hlo = {}
    for k in (True, False):
        eng = Engine(tmp_path / "art", fast_compile=True, cpu_kernels=k)
        assert eng.executor.cpu_kernels is k
        hlo[k] = _entry(_compiled(eng, "decode", 1, 16).get_hlo_text())
    calls = re.findall(r'custom_call_target="(tlaloc_cpu_matmul_\w+)"', hlo[True])
    assert len(calls) == 2 * 4 + 1, calls                             # tiny llama: 2 layers, the head
    assert "tlaloc_cpu_matmul_" not in hlo[False]
    if "weights" in options and options["weights"] != "int8":
        assert weights.search(hlo[False]), "control: the portable program converts (slices of) the weights"
    assert not weights.search(hlo[True]), f"{options}: a float32 weight in the kernel program"


def _decode_hlo(tiny, tmp_path, name, options, tag, cpu_kernels=False):
    """(engine, the entry computation of its decode program at batch 1, optimised)."""
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    from .fixtures import LADDER
    export(tiny(name)[1], tmp_path / tag, **LADDER, **options, progress=False)
    eng = Engine(tmp_path / tag, fast_compile=True, cpu_kernels=cpu_kernels)
    return eng, _entry(_compiled(eng, "decode", 1, 16).get_hlo_text())


@pytest.mark.parametrize("options, narrow", [(dict(weights="int8"), "s8"), (dict(dtype="bf16"), "bf16")])
def test_int8_and_bf16_weights_reach_their_dots_unconverted(options, narrow, tiny, tmp_path, monkeypatch):
    """With the low-precision dots (models.lowp), the decode step never holds a float32 copy of a
    weight matrix or of the head, and its dots take the stored weights: int8 x int8 -> s32, bf16 x
    bf16 -> f32. The programs with ``lowp.ENABLED = False`` convert them (the negative control).
    Tiny untied qwen3: D 64, fused q/k/v (64, 128), gate/up (64, 256), down (128, 64), head (64, 256)."""
    from tlaloc.models import lowp
    f32_matrix = re.compile(r"\bf32\[(64,128|128,64|64,256|256,64)\]")
    _, fast = _decode_hlo(tiny, tmp_path, "qwen3_untied", dict(options, fuse=True), "lowp")
    monkeypatch.setattr(lowp, "ENABLED", False)
    _, slow = _decode_hlo(tiny, tmp_path, "qwen3_untied", dict(options, fuse=True), "convert")
    assert f32_matrix.search(slow), "control: the converting programs hold float32 weights"
    assert not f32_matrix.search(fast), f"{options}: a float32 copy of a weight matrix"
    assert re.search(rf"\b{narrow}\[2,64\]", fast), "no two-row narrow activation operand"


def test_bf16_pools_are_written_in_place(tiny, tmp_path, monkeypatch):
    """A bfloat16 KV pool takes a decode step's rows by dynamic_update_slice: no copy of a pool,
    float32 or int16, in the decode step. Scattered as bfloat16 (``BF16_WRITE = "scatter"``,
    ``BF16_AS_BITS = False``), XLA CPU converts each whole pool to float32 and back; scattered
    as int16 bits, it copies the pool for the bitcasts (the negative controls)."""
    from tlaloc._render import stablehlo_serving
    eng, update = _decode_hlo(tiny, tmp_path, "llama", dict(dtype="bf16"), "update")
    views = "|".join(",".join(map(str, v)) for v in _pool_views(eng.manifest["kv"]["slots"][0]["shape"]))
    pool_f32 = re.compile(rf"\bf32\[({views})\]")
    pool_s16 = re.compile(rf"\bs16\[({views})\]")
    monkeypatch.setattr(stablehlo_serving, "BF16_WRITE", "scatter")
    _, bits = _decode_hlo(tiny, tmp_path, "llama", dict(dtype="bf16"), "bits")
    monkeypatch.setattr(stablehlo_serving, "BF16_AS_BITS", False)
    _, converted = _decode_hlo(tiny, tmp_path, "llama", dict(dtype="bf16"), "converted")
    assert pool_f32.search(converted), "control: a bf16 scatter converts the pool"
    assert pool_s16.search(bits) and not pool_f32.search(bits), "control: the int16 scatter copies, not converts"
    assert not pool_f32.search(update) and not pool_s16.search(update), "a copy of a bf16 KV pool"
    pointers = eng.kv_pool_pointers()
    [r] = eng.generate([PROMPTS[1]], max_new_tokens=4)
    assert eng.kv_pool_pointers() == pointers and len(r.token_ids) == 4



def test_bf16_pools_are_written_in_place_by_the_kv_write_kernel(tiny, tmp_path):
    """In the CPU-kernel programs a bfloat16 pool takes its rows by the KV-write kernel, its result
    aliased to the pool: nowhere in the decode program (fused computations included) is a pool
    converted to float32 or to its int16 bits, nor copied, at batch 1 (one row) or 4 (a scatter
    before). Without the kernel (``cpu_kernels`` lacking ``"kv_cache_write"``, the control), XLA
    CPU computes a one-row bf16 update in float32 over the whole pool inside its fusion, and
    scatters more rows into the pool's int16 bits, converted from and to the pool whole."""
    from tlaloc._runtime import cpu_kernels
    from tlaloc.serving.export.artifact import KERNEL_FORMATS
    if not cpu_kernels.load():
        pytest.skip(f"the CPU kernels cannot be built here: {cpu_kernels.reason()}")
    eng, _ = _decode_hlo(tiny, tmp_path, "llama", dict(dtype="bf16"), "write", cpu_kernels=True)
    control, _ = _decode_hlo(tiny, tmp_path, "llama", dict(dtype="bf16", cpu_kernels=tuple(
        k for k in KERNEL_FORMATS if k != "kv_cache_write")), "update", cpu_kernels=True)
    views = "|".join(",".join(map(str, v)) for v in _pool_views(eng.manifest["kv"]["slots"][0]["shape"]))
    pool_f32 = re.compile(rf"\bf32\[({views})\]")
    pool_s16 = re.compile(rf"\bs16\[({views})\]")                      # the pool's bits, passed over whole
    pool_copy = re.compile(rf"\b(bf16|s16|f32)\[({views})\]\{{[\d,]*\}} copy\(")
    for B in (1, 4):
        whole = _compiled(eng, "decode", B, 16).get_hlo_text()
        assert "tlaloc_cpu_kv_write_bf16" in whole, B
        assert not pool_f32.search(whole), f"batch {B}: a bf16 pool converted to float32 around its rows' write"
        assert not pool_copy.search(_entry(whole)) and not pool_s16.search(whole), f"batch {B}: a bf16 pool copied"
        converted = _compiled(control, "decode", B, 16).get_hlo_text()
        assert "tlaloc_cpu_kv_write" not in converted
        # control: one row is a bf16 update (float32 inside its fusion), more an int16 scatter
        assert (pool_f32 if B == 1 else pool_s16).search(converted), f"control, batch {B}: no pass over the pool"
        pointers = eng.kv_pool_pointers()
        rows = eng.generate([PROMPTS[1]] * B, max_new_tokens=4)
        assert eng.kv_pool_pointers() == pointers and all(len(r.token_ids) == 4 for r in rows)
