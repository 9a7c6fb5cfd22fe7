"""ggml's Q4_K served as stored (``weights="q4_k"``): a GGUF's Q4_K values come back bit for bit,
and so do its Q6_K and Q8_0 layer matrices (a Q4_K_M file's attn_v and ffn_down).

Oracle: ``gguf.quants.dequantize`` (gguf-py's implementation of ggml's dequantize_row_q4_K /
q6_K / q8_0) of the file's raw blocks. The GGUF fixtures are written here with independent Q4_K
and Q6_K packers (``tests/models/gguf_writer.pack_q4_k`` / ``pack_q6_k``: gguf-py cannot quantize
either), themselves checked against that oracle.
"""
import os

import numpy as np
import pytest

from tlaloc.models.quantized import QuantizedMatrix

gguf = pytest.importorskip("gguf")
Q4_K = gguf.GGMLQuantizationType.Q4_K
Q6_K = gguf.GGMLQuantizationType.Q6_K
Q8_0 = gguf.GGMLQuantizationType.Q8_0


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


def test_the_q6_k_packer_and_unpacker_agree_with_gguf_bit_for_bit():
    from models.gguf_writer import pack_q6_k
    from tlaloc.serving.export.gguf_blocks import unpack_q6_k
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((6, 512)) * 0.05).astype(np.float32)            # (out, in) rows
    a[2, 100:116] *= 40                                                      # one sub-block far larger
    raw = pack_q6_k(a)
    assert raw.shape == (6, 2 * 210) and raw.dtype == np.uint8
    want = gguf.quants.dequantize(raw, Q6_K).reshape(6, 512)                 # ggml's values
    step = np.abs(a.reshape(6, 32, 16)).max(-1) / 31                        # (rows, groups of 16)
    d = step.reshape(6, 2, 16).max(-1) / 127                                 # the superblock's scale of scales
    # the packer quantizes a: within half a step, plus what rounding sc to a multiple of d costs
    bound = step / 2 + 16.5 * np.repeat(d, 16, axis=1)
    assert np.all(np.abs(want - a).reshape(6, 32, 16) <= bound[..., None] * 1.01)
    assert np.abs(want - a).max() < 0.05 * np.abs(a).max()
    q, scale = unpack_q6_k(raw, 512)                                         # (out, in), (out, in / 16)
    assert q.dtype == np.int8 and q.shape == (6, 512) and scale.dtype == np.float32 and scale.shape == (6, 32)
    assert q.min() >= -32 and q.max() <= 31
    m = QuantizedMatrix(q.T, scale.T, chunk=0)
    assert m.layout == "block" and m.group == 16 and m.kernel_format() == "q8_0"
    np.testing.assert_array_equal(m.dequantize().T, want)
    # the portable product, chunk by chunk (64 rows, 4 groups each), against float64 on ggml's values
    x = rng.standard_normal((3, 512)).astype(np.float32)
    got = np.asarray(QuantizedMatrix(q.T, scale.T).rmatmul(x))
    ref = x.astype(np.float64) @ want.T.astype(np.float64)
    assert np.max(np.abs(got - ref) / (np.abs(x).astype(np.float64) @ np.abs(want.T))) < 1e-6
    # float16 scales would not do: d * sc is not a float16 value for some groups
    assert not np.array_equal(scale.astype(np.float16).astype(np.float32), scale)
    # negative controls: a changed ql byte, qh byte, scale byte, d byte
    for byte in (5, 128 + 7, 192 + 3, 209):
        bad = raw.copy()
        bad[1, byte] ^= 0x21
        qb, sb = unpack_q6_k(bad, 512)
        moved = QuantizedMatrix(qb.T, sb.T, chunk=0).dequantize().T
        np.testing.assert_array_equal(moved, gguf.quants.dequantize(bad, Q6_K).reshape(6, 512))
        assert not np.array_equal(moved, want)
    with pytest.raises(ValueError, match="not rows of 500 Q6_K weights"):
        unpack_q6_k(raw, 500)


def test_the_q8_0_unpacker_agrees_with_gguf_bit_for_bit():
    from tlaloc.serving.export.gguf_blocks import unpack_q8_0
    a = np.random.default_rng(2).standard_normal((4, 256)).astype(np.float32)
    raw = gguf.quantize(a, Q8_0)
    q, d = unpack_q8_0(raw, 256)
    assert q.dtype == np.int8 and d.dtype == np.float16 and d.shape == (4, 8)
    want = gguf.quants.dequantize(raw, Q8_0).reshape(4, 256)
    np.testing.assert_array_equal(QuantizedMatrix(q.T, d.T, chunk=0).dequantize().T, want)


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
        w = _file_matrix(t)
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


def _file_matrix(t):
    """GGUF tensor ``t`` as gguf-py dequantizes it, (out, in) as the file stores it."""
    return gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(int(t.shape[1]), int(t.shape[0]))


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


def _mixed_export(tmp_path, keep, keep_qtype, name):
    from models.gguf_writer import tiny_vocab, write_llama_gguf
    from models.helpers import require, torch_threads
    from models.tiny import make_tiny
    from tlaloc.serving.export import export
    from .fixtures import LADDER
    require("torch", "transformers")
    hf_dir = tmp_path / "hf"
    with torch_threads(1):
        hf = make_tiny("llama", {"vocab_size": len(tiny_vocab()[0]), "hidden_size": 256, "intermediate_size": 256},
                       str(hf_dir))
    path = write_llama_gguf(tmp_path / f"{name}.gguf", hf, "Q8_0", layer_qtype="Q4_K", keep=keep,
                            keep_qtype=keep_qtype)
    export(path, tmp_path / name, **LADDER, weights="q4_k", progress=False)
    return path


def _layer_oracle(path, cfg, i):
    """Layer ``i``'s matrices as gguf-py dequantizes the file's tensors, (in, out), q and k un-permuted
    (written here), under the model's unfused names; and each one's GGUF type."""
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    names = {"wq": "attn_q", "wk": "attn_k", "wv": "attn_v", "wo": "attn_output", "w_gate": "ffn_gate",
             "w_up": "ffn_up", "w_down": "ffn_down"}
    out, types = {}, {}
    for key, g in names.items():
        t = tensors[f"blk.{i}.{g}.weight"]
        w = _file_matrix(t)
        heads = {"wq": cfg.num_heads, "wk": cfg.num_kv_heads}.get(key)
        if heads:
            w = w.reshape(heads, w.shape[0] // heads // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)
        out[key], types[key] = w.T, t.tensor_type
    return out, types


def _matrix(stored, name):
    return QuantizedMatrix(stored[name], stored[name + ".scale"], stored.get(name + ".offset"), chunk=0).dequantize()


def test_q6_k_layer_matrices_are_kept_exactly_and_mixed_projections_are_left_unfused(tmp_path):
    """A Q4_K_M-like file: q, k, o, gate, up in Q4_K; attn_v and ffn_down in Q6_K. Every layer
    matrix of the artifact is the file's values bit for bit: Q4_K as nibbles with float32 sides,
    Q6_K as int8 q - 32 with a float32 scale per 16 rows; q/k/v (not all one type) are stored
    apart, gate/up (both Q4_K) fused. The greedy ids equal the f32 artifact's of the same file,
    with the CPU kernels and without."""
    from tlaloc.models import load
    from tlaloc.models.quantized import block_quantize
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    from tlaloc.serving.manifest import read_manifest
    from .fixtures import LADDER, NEW_TOKENS, PROMPTS
    path = _mixed_export(tmp_path, ("attn_v", "ffn_down"), "Q6_K", "q6")
    cfg = load(path).config
    stored, m = _stored(tmp_path / "q6"), read_manifest(str(tmp_path / "q6"))
    assert sorted(m["weights"]["fused"]) == [f"layers.{i}.w_gate_up" for i in range(cfg.num_layers)]
    for i in range(cfg.num_layers):
        b = f"layers.{i}."
        oracle, types = _layer_oracle(path, cfg, i)
        assert types["wv"] == types["w_down"] == Q6_K and types["wq"] == types["w_gate"] == Q4_K
        assert b + "wqkv" not in stored and b + "w_gate" not in stored
        for name in ("wv", "w_down"):                                # Q6_K: int8, float32 scale per 16 rows
            assert stored[b + name].dtype == np.int8 and b + name + ".offset" not in stored
            assert stored[b + name + ".scale"].dtype == np.float32
            assert stored[b + name + ".scale"].shape == (stored[b + name].shape[0] // 16, stored[b + name].shape[1])
        for name in ("wq", "wk", "wo", "w_gate_up"):                 # Q4_K: nibbles, float32 sides
            assert stored[b + name].dtype == np.uint8 and stored[b + name + ".scale"].dtype == np.float32
        oracle["w_gate_up"] = np.concatenate([oracle.pop("w_gate"), oracle.pop("w_up")], axis=1)
        for name, want in oracle.items():
            np.testing.assert_array_equal(_matrix(stored, b + name), want, err_msg=b + name)
    # negative control: the Q6_K values requantized to q8_0 (the former fallback) are not kept exactly
    want = _layer_oracle(path, cfg, 0)[0]["w_down"]
    q, d = block_quantize(want, axis=0)
    assert not np.array_equal(q.astype(np.float32) * np.repeat(d.astype(np.float32), 32, axis=0), want)
    # the programs call the q8_0 kernel (the Q6_K matrices) and the q4_1 one (Q4_K)
    targets = {t for p in m["programs"] for t in p.get("cpu_kernels", {}).get("targets", ())}
    assert {"tlaloc_cpu_matmul_q8_0_p64", "tlaloc_cpu_matmul_q4_1_p64"} <= targets

    export(path, tmp_path / "f32", **LADDER, progress=False)

    def greedy(p, **options):
        return [r.token_ids for r in Engine(p, fast_compile=True, **options).generate(
            PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])]
    got = greedy(tmp_path / "q6")
    assert got == greedy(tmp_path / "f32")
    assert got == greedy(tmp_path / "q6", cpu_kernels=False)


def test_q8_0_layer_matrices_are_kept_as_their_blocks_and_q4_k_parts_stay_4_bit(tmp_path):
    """attn_v and ffn_down in Q8_0: stored as the file's own int8 values and float16 scales; q and k
    stay the file's Q4_K (no longer requantized to 8 bits with a fused q/k/v)."""
    from tlaloc.models import load
    path = _mixed_export(tmp_path, ("attn_v", "ffn_down"), None, "q8")
    cfg = load(path).config
    stored = _stored(tmp_path / "q8")
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    for i in range(cfg.num_layers):
        b = f"layers.{i}."
        oracle, types = _layer_oracle(path, cfg, i)
        assert types["wv"] == types["w_down"] == Q8_0
        for name in ("wv", "w_down"):
            assert stored[b + name].dtype == np.int8 and stored[b + name + ".scale"].dtype == np.float16
            assert stored[b + name + ".scale"].shape[0] == stored[b + name].shape[0] // 32
        raw = np.asarray(tensors[f"blk.{i}.ffn_down.weight"].data)             # the file's own bytes
        blocks = raw.reshape(256, 256 // 32, 34)                              # (out, blocks, d + 32 int8)
        np.testing.assert_array_equal(stored[b + "w_down"], blocks[..., 2:].copy().view(np.int8).reshape(256, 256).T)
        np.testing.assert_array_equal(stored[b + "w_down.scale"], blocks[..., :2].copy().view(np.float16)[..., 0].T)
        for name in ("wq", "wk"):
            assert stored[b + name].dtype == np.uint8
        for name in ("wq", "wk", "wv", "wo", "w_down"):
            np.testing.assert_array_equal(_matrix(stored, b + name), oracle[name], err_msg=b + name)


def test_q_k_v_all_in_q6_k_are_fused_exactly(tmp_path):
    """q, k and v all in Q6_K: one layout, so fused (int8 with float32 scales per 16 rows) and exact."""
    from tlaloc.models import load
    from tlaloc.serving.manifest import read_manifest
    path = _mixed_export(tmp_path, ("attn_q", "attn_k", "attn_v"), "Q6_K", "qkv")
    cfg = load(path).config
    stored, m = _stored(tmp_path / "qkv"), read_manifest(str(tmp_path / "qkv"))
    assert "layers.0.wqkv" in m["weights"]["fused"] and "layers.0.w_gate_up" in m["weights"]["fused"]
    for i in range(cfg.num_layers):
        b = f"layers.{i}."
        oracle, _ = _layer_oracle(path, cfg, i)
        assert stored[b + "wqkv"].dtype == np.int8 and stored[b + "wqkv.scale"].dtype == np.float32
        want = np.concatenate([oracle["wq"], oracle["wk"], oracle["wv"]], axis=1)
        np.testing.assert_array_equal(_matrix(stored, b + "wqkv"), want)
