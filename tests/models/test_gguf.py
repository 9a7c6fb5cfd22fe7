"""GGUF: block dequantization against the ggml layout, a seeded Llama written as GGUF, and real SmolLM2-135M."""
import time

import numpy as np
import pytest

from .helpers import require, torch_threads

require("gguf")

import tlaloc.models as tm  # noqa: E402
from tlaloc.models import gguf_file  # noqa: E402
from tlaloc.serving.export.reference import generate  # noqa: E402

# ggml block layouts (32 weights a block): Q8_0 = f16 d, int8 q[32]      -> d * q
#                                          Q4_0 = f16 d, u8 nibbles[16]  -> d * (nibble - 8)
#                                          Q4_1 = f16 d, f16 m, nibbles  -> d * nibble + m
# nibble j of a block: low half of byte j for weights 0..15, high half for weights 16..31.


def _reference_dequant(raw: np.ndarray, qtype: str) -> np.ndarray:
    rows = []
    for row in raw:
        size = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}[qtype]
        out = []
        for block in row.reshape(-1, size):
            d = float(block[:2].view(np.float16)[0])
            if qtype == "Q8_0":
                out.append(d * block[2:].view(np.int8).astype(np.float64))
                continue
            m = float(block[2:4].view(np.float16)[0]) if qtype == "Q4_1" else 0.0
            qs = block[4:] if qtype == "Q4_1" else block[2:]
            nib = np.concatenate([qs & 0x0F, qs >> 4]).astype(np.float64)
            out.append(d * (nib - 8) if qtype == "Q4_0" else d * nib + m)
        rows.append(np.concatenate(out))
    return np.asarray(rows, np.float32)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1"])
def test_dequantize_matches_block_layout(qtype, tmp_path):
    import gguf
    rng = np.random.default_rng(0)
    size = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}[qtype]
    raw = rng.integers(0, 256, (3, 2 * size), dtype=np.uint8)               # (rows, 2 blocks of bytes)
    for b in range(2):                                                       # sane f16 scales and mins
        raw[:, b * size:b * size + 2] = np.full(3, 0.01, np.float16).view(np.uint8).reshape(3, 2)
        if qtype == "Q4_1":
            raw[:, b * size + 2:b * size + 4] = np.full(3, -0.3, np.float16).view(np.uint8).reshape(3, 2)
    writer = gguf.GGUFWriter(str(tmp_path / "q.gguf"), "llama")
    writer.add_tensor("blk.0.ffn_up.weight", raw, raw_dtype=getattr(gguf.GGMLQuantizationType, qtype))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tensor = gguf.GGUFReader(str(tmp_path / "q.gguf")).tensors[0]
    ours = gguf_file.dequantize(tensor)
    assert ours.shape == (3, 64) and ours.dtype == np.float32
    np.testing.assert_array_equal(ours, _reference_dequant(raw, qtype))


def test_unpermute_inverts_llamacpp_permute():
    from .gguf_writer import llamacpp_permute
    w = np.arange(8 * 16 * 3, dtype=np.float32).reshape(8 * 16, 3)          # 8 heads of dim 16
    for heads in (8, 2):
        assert not np.array_equal(llamacpp_permute(w, heads), w)
        np.testing.assert_array_equal(gguf_file._unpermute(llamacpp_permute(w, heads), heads), w)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """(folder, {qtype: gguf file}, torch model): a seeded Llama written as Q8_0 and Q4_0 GGUFs."""
    require("torch", "transformers")
    from .gguf_writer import tiny_vocab, write_llama_gguf
    from .tiny import make_tiny
    folder = tmp_path_factory.mktemp("gguf")
    with torch_threads(1):
        hf = make_tiny("llama", {"vocab_size": len(tiny_vocab()[0])}, str(folder / "hf"))
    files = {q: write_llama_gguf(folder / f"tiny-{q}.gguf", hf, q) for q in ("Q8_0", "Q4_0")}
    return folder, files, hf


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0"])
def test_tiny_llama_gguf_greedy_ids_equal_transformers(qtype, tiny_gguf):
    import torch
    import transformers
    from .tiny import PROMPTS, hf_greedy
    folder, files, _ = tiny_gguf
    with torch_threads(1):
        ref = transformers.AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=f"tiny-{qtype}.gguf", dtype=torch.float32, attn_implementation="eager").eval()
        expected = [hf_greedy(ref, p) for p in PROMPTS]
    model = tm.load(files[qtype])
    assert [r.token_ids for r in generate(model, PROMPTS, 32, stop=[])] == expected


def test_gguf_tokenizer_matches_transformers(tiny_gguf):
    import transformers
    folder, files, _ = tiny_gguf
    ref = transformers.AutoTokenizer.from_pretrained(folder, gguf_file="tiny-Q8_0.gguf")
    ours = tm.load(files["Q8_0"]).tokenizer
    for text in ["<|im_start|>the cat in the hat<|im_end|>", "a tin, then the", "  in\n\tthe"]:
        assert ours.encode(text) == ref(text).input_ids
        assert ours.decode(ours.encode(text)) == text


def test_unknown_gguf_tensor_is_named(tiny_gguf, tmp_path):
    from .gguf_writer import write_llama_gguf
    _, _, hf = tiny_gguf
    path = write_llama_gguf(tmp_path / "extra.gguf", hf, "Q8_0", extra_tensor="blk.0.attn_sinks.weight")
    with pytest.raises(tm.CheckpointError, match=r"unexpected keys \(1\): <gguf>blk\.0\.attn_sinks\.weight"):
        tm.load(path)


def test_a_gguf_file_is_parsed_once_until_it_changes(tiny_gguf, tmp_path):
    """Regression (session 21): every load parsed the whole file again (SmolLM2's vocabulary, ~7 s).
    The reader is kept while the file is unchanged; a rewritten file (another inode, size or time)
    is read anew, with its own values. Control: the two files' models differ."""
    import shutil

    import jax

    from .gguf_writer import write_llama_gguf
    _, files, hf = tiny_gguf
    path = tmp_path / "m.gguf"
    shutil.copy(files["Q8_0"], path)
    first, meta = gguf_file.open_reader(str(path))
    again, meta2 = gguf_file.open_reader(str(path))
    assert again is first and meta2 == meta and meta2 is not meta
    before = tm.load(str(path))
    write_llama_gguf(tmp_path / "other.gguf", hf, "Q4_0")
    ref = tm.load(str(tmp_path / "other.gguf"))
    (tmp_path / "other.gguf").replace(path)                      # a new file under the same name
    assert gguf_file.open_reader(str(path))[0] is not first
    after = tm.load(str(path))

    def leaves(model):
        return np.concatenate([np.ravel(a) for a in jax.tree_util.tree_leaves(model.weights)])
    assert not np.array_equal(leaves(before), leaves(after))
    np.testing.assert_array_equal(leaves(after), leaves(ref))


# -- real weights: SmolLM2-135M-Instruct, Q4_1 ---------------------------------------------------

@pytest.mark.slow
def test_smollm2_gguf_greedy_ids_equal_transformers(smollm2_reference):
    """transformers' greedy ids (models/smol_reference.py) from our eager NumPy model of the file."""
    from .smol_reference import CHAT, NEW_TOKENS, SMOL_FILE, TEXTS
    root, reference = smollm2_reference
    model = tm.load(f"{root}/{SMOL_FILE}")
    chat = model.tokenizer.apply_chat_template(CHAT)
    ids = [model.tokenizer.encode(p) for p in [chat] + TEXTS]
    start = time.perf_counter()
    got = [r.token_ids for r in generate(model, ids, max_new_tokens=NEW_TOKENS, stop=[])]
    rate = 3 * NEW_TOKENS / (time.perf_counter() - start)
    print(f"\nSmolLM2-135M eager NumPy: {rate:.1f} tokens/s (3 prompts x 32, batch 1, prefill included)")
    ref = reference()
    assert chat == ref["chat"]
    assert ids == ref["prompt_ids"]
    expected = ref["greedy_ids"]
    assert got == expected
    assert "Paris" in model.tokenizer.decode(got[1])
    # negative control: flip the sign of one weight matrix and the ids change
    layers = list(model.weights["layers"])
    layers[3] = {**layers[3], "wo": -layers[3]["wo"]}
    bad = tm.Model(model.config, {**model.weights, "layers": tuple(layers)}, model.tokenizer, model.source)
    assert generate(bad, ids[1:2], 16, stop=[])[0].token_ids != got[1][:16]


def test_gguf_rope_freqs_divide_the_inverse_frequencies():
    """llama3-scaled GGUFs carry per-frequency factors as rope_freqs.weight; they divide inv_freq."""
    meta = {"general.architecture": "llama", "llama.embedding_length": 32, "llama.attention.head_count": 4,
            "llama.feed_forward_length": 64, "llama.block_count": 1, "llama.vocab_size": 10,
            "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.rope.freq_base": 500000.0}
    factors = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    cfg = gguf_file.config_from_gguf(meta, {"token_embd.weight"}, factors)
    assert cfg.tie_word_embeddings and cfg.head_dim == 8
    plain = tm.layers.rope_inv_freq(tm.RopeConfig(theta=500000.0), 8)
    np.testing.assert_allclose(tm.layers.rope_inv_freq(cfg.rope, 8), plain / factors, rtol=1e-7)
    with pytest.raises(tm.UnsupportedModelError, match="general.architecture='gemma'"):
        gguf_file.config_from_gguf({**meta, "general.architecture": "gemma"}, set())
