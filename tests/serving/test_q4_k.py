"""ggml's Q4_K served as stored (``weights="q4_k"``): a GGUF's Q4_K values come back bit for bit.

Oracle: ``gguf.quants.dequantize`` (gguf-py's implementation of ggml's dequantize_row_q4_K) of
the file's raw blocks. The GGUF fixtures are written here with an independent Q4_K packer
(``tests/models/gguf_writer.pack_q4_k``: gguf-py cannot quantize Q4_K), itself checked
against that oracle.
"""
import os

import numpy as np
import pytest

from tlaloc.models.quantized import QuantizedMatrix

gguf = pytest.importorskip("gguf")
Q4_K = gguf.GGMLQuantizationType.Q4_K


def test_the_q4_k_packer_and_unpacker_agree_with_gguf_bit_for_bit():
    from models.gguf_writer import pack_q4_k
    from tlaloc.serving.export.gguf_blocks import unpack_q4_k
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((5, 512)) + 0.3).astype(np.float32)             # (out, in) rows
    raw = pack_q4_k(a)
    assert raw.shape == (5, 2 * 144) and raw.dtype == np.uint8
    want = gguf.quants.dequantize(raw, Q4_K).reshape(5, 512)                 # ggml's values
    step = (a.reshape(5, 16, 32).max(-1) - np.minimum(a.reshape(5, 16, 32).min(-1), 0)) / 15
    assert np.all(np.abs(want - a).reshape(5, 16, 32) <= step[..., None] * 0.75)   # the packer quantizes a
    packed, scale, offset = unpack_q4_k(raw, 512)                            # (out, in / 2), (out, in / 32) x 2
    assert packed.shape == (5, 256) and scale.shape == offset.shape == (5, 16) and scale.dtype == np.float32
    got = QuantizedMatrix(packed.T, scale.T, offset.T, chunk=0).dequantize().T
    np.testing.assert_array_equal(got, want)
    # float16 sides would not do: d * sc is not a float16 value for some sub-blocks
    half = QuantizedMatrix(packed.T, scale.T.astype(np.float16), offset.T.astype(np.float16), chunk=0)
    assert not np.array_equal(half.dequantize().T, want)
    # negative controls: a changed scale byte, a changed nibble byte
    for byte in (4 + 2, 16 + 40):
        bad = raw.copy()
        bad[1, byte] ^= 0x11
        moved = QuantizedMatrix(*(p.T for p in unpack_q4_k(bad, 512)), chunk=0).dequantize().T
        np.testing.assert_array_equal(moved, gguf.quants.dequantize(bad, Q4_K).reshape(5, 512))
        assert not np.array_equal(moved, want)
    with pytest.raises(ValueError, match="not rows of 500 Q4_K weights"):
        unpack_q4_k(raw, 500)


@pytest.fixture(scope="module")
def q4_k_gguf(tmp_path_factory):
    """A seeded Llama (hidden 256, so every layer matrix holds whole Q4_K superblocks) written as a
    GGUF with Q4_K layer matrices and Q8_0 embedding and head; (path, hf model)."""
    from models.gguf_writer import tiny_vocab, write_llama_gguf
    from models.helpers import require, torch_threads
    from models.tiny import make_tiny
    require("torch", "transformers")
    folder = tmp_path_factory.mktemp("q4k")
    with torch_threads(1):
        hf = make_tiny("llama", {"vocab_size": len(tiny_vocab()[0]), "hidden_size": 256, "intermediate_size": 256},
                       str(folder / "hf"))
    return write_llama_gguf(folder / "tiny-q4_k.gguf", hf, "Q8_0", layer_qtype="Q4_K"), hf


def _oracle(path, cfg):
    """Each layer matrix of the GGUF as gguf-py dequantizes it, (in, out), q and k rows un-permuted
    (the inverse of llama.cpp's permutation, written here), under the artifact's fused names."""
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}

    def matrix(name, heads=None):
        t = tensors[name]
        assert t.tensor_type == Q4_K
        w = gguf.quants.dequantize(np.asarray(t.data), Q4_K).reshape(int(t.shape[1]), int(t.shape[0]))
        if heads:
            w = w.reshape(heads, w.shape[0] // heads // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)
        return w.T

    out = {}
    for i in range(cfg.num_layers):
        b = f"blk.{i}."
        out[f"layers.{i}.wqkv"] = np.concatenate([matrix(b + "attn_q.weight", cfg.num_heads),
                                                  matrix(b + "attn_k.weight", cfg.num_kv_heads),
                                                  matrix(b + "attn_v.weight")], axis=1)
        out[f"layers.{i}.wo"] = matrix(b + "attn_output.weight")
        out[f"layers.{i}.w_gate_up"] = np.concatenate([matrix(b + "ffn_gate.weight"), matrix(b + "ffn_up.weight")],
                                                      axis=1)
        out[f"layers.{i}.w_down"] = matrix(b + "ffn_down.weight")
    return out


def _stored(path):
    from safetensors.numpy import load_file
    return load_file(os.path.join(path, "weights.safetensors"))


def test_q4_k_gguf_values_come_back_bitwise_through_the_export(q4_k_gguf, tmp_path):
    from tlaloc.models import load
    from tlaloc.serving.export import export
    from tlaloc.serving.manifest import read_manifest
    from .fixtures import LADDER
    path, _ = q4_k_gguf
    cfg = load(path).config
    export(path, tmp_path / "art", **LADDER, weights="q4_k", progress=False)
    m = read_manifest(str(tmp_path / "art"))
    assert m["weights"]["format"] == "q4_k" and m["weights"]["group"] == 32
    stored, oracle = _stored(tmp_path / "art"), _oracle(path, cfg)
    for name, want in oracle.items():
        assert stored[name].dtype == np.uint8 and stored[name + ".scale"].dtype == np.float32
        got = QuantizedMatrix(stored[name], stored[name + ".scale"], stored[name + ".offset"], chunk=0).dequantize()
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert stored["embed"].dtype == np.int8 and stored["lm_head"].dtype == np.int8           # tables: q8_0
    # negative control: int4 (group 32, float16 sides, from the float values) does not keep them
    export(path, tmp_path / "int4", **LADDER, weights="int4", progress=False)
    s4 = _stored(tmp_path / "int4")
    assert not all(np.array_equal(QuantizedMatrix(s4[n], s4[n + ".scale"], s4[n + ".offset"]).dequantize(), w)
                   for n, w in oracle.items())


def test_q4_k_artifact_greedy_ids_equal_the_f32_artifact_of_the_same_file(q4_k_gguf, tmp_path):
    """The q4_k artifact computes with the file's values (embedding and head: Q8_0 blocks kept), so
    its greedy ids are those of the f32 artifact of the same GGUF, with the CPU kernels (float32
    sides) and without them."""
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    from .fixtures import LADDER, NEW_TOKENS, PROMPTS
    path, _ = q4_k_gguf
    export(path, tmp_path / "q4k", **LADDER, weights="q4_k", progress=False)
    export(path, tmp_path / "f32", **LADDER, progress=False)
    m = __import__("tlaloc.serving.manifest", fromlist=["read_manifest"]).read_manifest(str(tmp_path / "q4k"))
    assert any("tlaloc_cpu_matmul_q4_1_p64" in p.get("cpu_kernels", {}).get("targets", ()) for p in m["programs"])

    def greedy(p, **options):
        return [r.token_ids for r in Engine(p, fast_compile=True, **options).generate(
            PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])]

    got = greedy(tmp_path / "q4k")
    assert got == greedy(tmp_path / "f32")
    assert got == greedy(tmp_path / "q4k", cpu_kernels=False)
    # negative control: the same comparison sees int4's requantized weights
    export(path, tmp_path / "int4", **LADDER, weights="int4", progress=False)
    assert greedy(tmp_path / "int4") != got


def test_q4_k_needs_q4_k_tensors(tmp_path):
    """A GGUF without Q4_K layer matrices is refused for weights='q4_k', naming the fix."""
    from models.gguf_writer import tiny_vocab, write_llama_gguf
    from models.helpers import require, torch_threads
    from models.tiny import make_tiny
    from tlaloc.errors import ArgumentError
    from tlaloc.serving.export import export
    from .fixtures import LADDER
    require("torch", "transformers")
    with torch_threads(1):
        hf = make_tiny("llama", {"vocab_size": len(tiny_vocab()[0])}, str(tmp_path / "hf"))
    path = write_llama_gguf(tmp_path / "q8.gguf", hf, "Q8_0")
    with pytest.raises(ArgumentError, match="holds no Q4_K layer matrix; use weights='int4'"):
        export(path, tmp_path / "art", **LADDER, weights="q4_k", progress=False)


def test_layer_matrices_the_file_holds_in_another_type_are_stored_in_8_bits(tmp_path):
    """A Q4_K_M file keeps attn_v and some ffn_down in Q6_K: those (and the fused q/k/v holding
    attn_v) are stored as q8_0 from the file's values, not requantized to 4 bits; the Q4_K
    matrices are still kept exactly."""
    from models.gguf_writer import tiny_vocab, write_llama_gguf
    from models.helpers import require, torch_threads
    from models.tiny import make_tiny
    from tlaloc.models import load
    from tlaloc.serving.export import export
    from .fixtures import LADDER
    require("torch", "transformers")
    with torch_threads(1):
        hf = make_tiny("llama", {"vocab_size": len(tiny_vocab()[0]), "hidden_size": 256, "intermediate_size": 256},
                       str(tmp_path / "hf"))
    path = write_llama_gguf(tmp_path / "mixed.gguf", hf, "Q8_0", layer_qtype="Q4_K", keep=("attn_v", "ffn_down"))
    cfg = load(path).config
    export(path, tmp_path / "art", **LADDER, weights="q4_k", progress=False)
    stored = _stored(tmp_path / "art")
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    for i in range(cfg.num_layers):
        b = f"layers.{i}."
        for name in ("wqkv", "w_down"):                              # q8_0: int8 values, one scale per 32 rows
            assert stored[b + name].dtype == np.int8 and b + name + ".offset" not in stored
            assert stored[b + name + ".scale"].shape[0] == stored[b + name].shape[0] // 32
        want = gguf.quants.dequantize(np.asarray(tensors[f"blk.{i}.ffn_down.weight"].data),
                                      gguf.GGMLQuantizationType.Q8_0).reshape(256, 256).T
        got = stored[b + "w_down"].astype(np.float32) * np.repeat(stored[b + "w_down.scale"].astype(np.float32), 32, 0)
        np.testing.assert_array_equal(got, want)                     # Q8_0 blocks come back exactly as q8_0
        for name in ("wo", "w_gate_up"):                             # still the file's Q4_K blocks, float32 sides
            assert stored[b + name].dtype == np.uint8 and stored[b + name + ".scale"].dtype == np.float32
        wo = QuantizedMatrix(stored[b + "wo"], stored[b + "wo.scale"], stored[b + "wo.offset"], chunk=0).dequantize()
        oracle = gguf.quants.dequantize(np.asarray(tensors[f"blk.{i}.attn_output.weight"].data), Q4_K)
        np.testing.assert_array_equal(wo, oracle.reshape(256, 256).T)
    # with ffn_down alone in Q8_0 every stored value is the file's (Q8_0 blocks come back exactly as
    # q8_0): the greedy ids are the f32 artifact's. (The fused q/k/v above is not: its Q4_K parts are
    # requantized to 8 bits, close to but not exactly the file's values.)
    from tlaloc.serving import Engine
    from .fixtures import NEW_TOKENS, PROMPTS
    down = write_llama_gguf(tmp_path / "down.gguf", hf, "Q8_0", layer_qtype="Q4_K", keep=("ffn_down",))
    export(down, tmp_path / "down", **LADDER, weights="q4_k", progress=False)
    export(down, tmp_path / "f32", **LADDER, progress=False)

    def greedy(p):
        return [r.token_ids for r in Engine(p, fast_compile=True).generate(PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])]
    assert _stored(tmp_path / "down")["layers.0.w_down"].dtype == np.int8
    assert greedy(tmp_path / "down") == greedy(tmp_path / "f32")
    # negative control: the same file with every layer matrix in Q4_K stores w_down in 4 bits
    full = write_llama_gguf(tmp_path / "all.gguf", hf, "Q8_0", layer_qtype="Q4_K")
    export(full, tmp_path / "all", **LADDER, weights="q4_k", progress=False)
    assert _stored(tmp_path / "all")["layers.0.w_down"].dtype == np.uint8
