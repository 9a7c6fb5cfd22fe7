"""Quantized weights served as stored: Q8_0 blocks and int8 channels multiplied chunk by chunk.

Oracles: float64 NumPy on the dequantised matrix; for whole models, an f32 artifact of a
checkpoint whose matrices were replaced by their Q8_0 dequantisation (the same weights
in float32): its greedy ids must be the q8_0 artifact's.
"""
import os

import numpy as np
import pytest

from tlaloc.models.quantized import BLOCK, QuantizedMatrix, block_quantize


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


@pytest.mark.parametrize("layout", ["block", "channel"])
@pytest.mark.parametrize("chunk", [0, 32, 64])
def test_quantized_matrix_product_equals_float64_on_the_dequantised_matrix(layout, chunk):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((128, 24)).astype(np.float32)
    if layout == "block":
        q, s = block_quantize(w, axis=0)
        deq = _dequant_blocks(q, s, 0)
    else:
        s = (np.abs(w).max(axis=0) / 127).astype(np.float32)
        q = np.rint(w / s).astype(np.int8)
        deq = q * s.astype(np.float64)
    m = QuantizedMatrix(q, s, chunk=chunk)
    assert m.layout == layout
    x = rng.standard_normal((3, 5, 128)).astype(np.float32)
    got = m.rmatmul(x)
    assert got.dtype == np.float32 and got.shape == (3, 5, 24)
    np.testing.assert_allclose(got, x.astype(np.float64) @ deq, rtol=1e-5, atol=1e-5)
    assert np.max(np.abs(got - x @ w)) > 1e-3                      # negative control: not the unquantised w
    with pytest.raises(ValueError, match="fits neither"):
        QuantizedMatrix(q, s[:2] if layout == "block" else s[:5])


def _q8_0_reference_folder(folder, out):
    """A copy of an HF checkpoint with every matrix replaced by its Q8_0 dequantisation (blocks along
    the input features: axis 1 of an HF (out, in) weight and of the (vocab, hidden) embedding)."""
    import shutil
    from safetensors.numpy import load_file, save_file
    shutil.copytree(folder, out)
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    for k, t in tensors.items():
        if t.ndim == 2:
            q, d = block_quantize(t, axis=1)
            tensors[k] = _dequant_blocks(q, d, 1).astype(np.float32)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    return str(out)


@pytest.mark.parametrize("name", ["llama", "qwen3_tied"])
def test_q8_0_artifact_greedy_ids_equal_float_reference_of_the_same_weights(name, tiny, artifact, tmp_path):
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    from tlaloc.serving.manifest import read_manifest
    from .fixtures import LADDER, NEW_TOKENS, PROMPTS, perturb
    _, folder = tiny(name)
    m = read_manifest(artifact(name, weights="q8_0"))
    slots = {s["name"]: s for s in m["weights"]["slots"]}
    assert m["weights"]["format"] == "q8_0"
    assert slots["layers.0.wqkv"]["dtype"] == "int8" and slots["layers.0.wqkv.scale"]["dtype"] == "float16"
    assert slots["layers.0.wqkv.scale"]["shape"] == [64 // BLOCK, slots["layers.0.wqkv"]["shape"][1]]
    assert slots["embed.scale"]["shape"] == [256, 64 // BLOCK]

    def greedy(path, **options):
        return [r.token_ids for r in Engine(path, fast_compile=True, **options).generate(
            PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])]

    got = greedy(artifact(name, weights="q8_0"))
    ref_folder = _q8_0_reference_folder(folder, tmp_path / "ref")
    export(ref_folder, tmp_path / "ref_art", **LADDER, progress=False)
    assert got == greedy(tmp_path / "ref_art")
    # negative control: the same comparison sees a changed weight
    export(perturb(folder, tmp_path / "bad"), tmp_path / "bad_art", **LADDER, weights="q8_0", progress=False)
    assert greedy(tmp_path / "bad_art") != got
