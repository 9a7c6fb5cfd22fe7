"""Decoders against transformers on tiny seeded checkpoints: greedy ids, key checks, cache, rope."""
import dataclasses
import json
import os

import numpy as np
import pytest

from .helpers import require, torch_threads

require("torch", "transformers")

import tlaloc.models as tm  # noqa: E402
from tlaloc.serving.export.reference import generate  # noqa: E402
from .tiny import CASES, NEW_TOKENS, PROMPTS, hf_greedy, make_tiny  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """name -> (torch model, folder), built once per module."""
    built = {}

    def get(name):
        if name not in built:
            model_type, overrides = CASES[name]
            folder = str(tmp_path_factory.mktemp(name))
            with torch_threads(1):
                built[name] = (make_tiny(model_type, overrides, folder), folder)
        return built[name]
    return get


@pytest.fixture(scope="module")
def oracle(tiny):
    """name -> transformers' greedy ids for every prompt in PROMPTS."""
    cache = {}

    def get(name):
        if name not in cache:
            hf, _ = tiny(name)
            with torch_threads(1):
                cache[name] = [hf_greedy(hf, p) for p in PROMPTS]
        return cache[name]
    return get


def _greedy(model):
    return [r.token_ids for r in generate(model, PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])]


@pytest.mark.parametrize("name", sorted(CASES))
def test_greedy_ids_equal_transformers(name, tiny, oracle):
    _, folder = tiny(name)
    model = tm.load(folder)
    assert _greedy(model) == oracle(name)


LOGIT_RTOL = 4e-6   # of max|logits| per prompt: measured worst 1.6e-6 (9.5e-6 at scale 6, float32 in both)


def _logit_errors(model, hf):
    """Per prompt, max |ours - transformers| over every position and vocab entry, over max|transformers|."""
    import torch
    errs = []
    for p in PROMPTS:
        with torch.no_grad(), torch_threads(1):
            ref = hf(torch.tensor([p])).logits[0].numpy()                 # (T, V)
        ours = np.asarray(model.logits(np.asarray([p]))[0])
        assert ours.shape == ref.shape, f"logits shape {ours.shape} != {ref.shape}"
        errs.append(float(np.abs(ours - ref).max() / np.abs(ref).max()))
    return errs


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_equal_transformers_at_every_position(name, tiny):
    """Prompt lengths 1, 9 and 24 (past the Mistral window): every position's logits, not only the argmax."""
    hf, folder = tiny(name)
    errs = _logit_errors(tm.load(folder), hf)
    assert max(errs) <= LOGIT_RTOL, f"{name}: logits off by {errs} of their scale"


@pytest.mark.parametrize("name", ["llama", "qwen3_tied"])
def test_negative_control_rmsnorm_eps_x10_fails_logits(name, tiny):
    """RMSNorm eps ×10 (which greedy ids do not see) misses the logits tolerance by 10x or more."""
    hf, folder = tiny(name)
    model = tm.load(folder)
    wrong = tm.Model(dataclasses.replace(model.config, rms_norm_eps=10 * model.config.rms_norm_eps),
                     model.weights, None, folder)
    assert max(_logit_errors(wrong, hf)) > 10 * LOGIT_RTOL


@pytest.mark.parametrize("name", sorted(CASES))
def test_negative_control_one_perturbed_weight_changes_ids(name, tiny, oracle):
    _, folder = tiny(name)
    model = tm.load(folder)
    layer = dict(model.weights["layers"][1])
    noise = np.random.default_rng(0).normal(0, 0.5, layer["w_down"].shape).astype(np.float32)
    layer["w_down"] = layer["w_down"] + noise                                  # one tensor of layer 1 perturbed
    weights = {**model.weights, "layers": (model.weights["layers"][0], layer)}
    perturbed = tm.Model(model.config, weights, None, folder)
    assert _greedy(perturbed) != oracle(name)


def test_mistral_window_is_live(tiny, oracle):
    """With the window removed the ids change: the prompts really exercise it."""
    _, folder = tiny("mistral_window6")
    model = tm.load(folder)
    assert model.config.sliding_windows == (6, 6)
    full = dataclasses.replace(model.config, sliding_windows=(None, None))
    assert _greedy(tm.Model(full, model.weights, None, folder)) != oracle("mistral_window6")


def test_mistral_window_mask_by_position():
    """Query i sees key j exactly when i - W < j <= i."""
    W, T = 3, 7
    pos = np.arange(T)[None]
    v = np.eye(T, dtype=np.float32)[None, :, None, :]                         # (1, T, 1, T): key j -> e_j
    k = np.zeros((1, T, 1, T), np.float32)
    out = tm.layers.attention(np.zeros((1, T, 1, T), np.float32), k, v, pos, pos, window=W)[0, :, 0]
    expected = np.array([[1.0 / min(i + 1, W) if i - W < j <= i else 0.0 for j in range(T)] for i in range(T)])
    np.testing.assert_allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize("name", ["llama", "qwen3_tied", "mistral_window6"])
def test_kv_cache_decode_equals_whole_forward(name, tiny):
    _, folder = tiny(name)
    model = tm.load(folder)
    ids = np.asarray([PROMPTS[2]])                                            # (1, 24)
    whole = model.logits(ids)[0]                                              # (24, V)
    cache = tm.KVCache.for_config(model.config, batch=1, max_len=24)
    steps = [tm.decoder_forward(model.config, model.weights, ids[:, :10], np.arange(10)[None], cache)[0]]
    for t in range(10, 24):
        steps.append(tm.decoder_forward(model.config, model.weights, ids[:, t:t + 1], np.array([[t]]), cache)[0])
    np.testing.assert_allclose(np.concatenate(steps), whole, atol=2e-5, rtol=1e-5)


def test_batched_rows_at_different_lengths_equal_each_alone(tiny):
    _, folder = tiny("llama")
    model = tm.load(folder)
    cfg = model.config
    a, b = PROMPTS[1], PROMPTS[2][:5]
    cache = tm.KVCache.for_config(cfg, batch=2, max_len=16)
    # prefill both rows with their first 5 tokens, then only row 0 goes on (row 1 repeats its last position)
    both = np.asarray([a[:5], b])
    tm.decoder_forward(cfg, model.weights, both, np.arange(5)[None].repeat(2, 0), cache)
    out = tm.decoder_forward(cfg, model.weights, np.asarray([[a[5]], [b[4]]]), np.array([[5], [4]]), cache)
    alone = model.logits([a[:6]])[0, -1]
    np.testing.assert_allclose(out[0, 0], alone, atol=2e-5)
    np.testing.assert_allclose(out[1, 0], model.logits([b])[0, -1], atol=2e-5)


def test_transformers4_config_spelling_loads_the_same(tiny, tmp_path):
    """rope_theta + rope_scaling + torch_dtype (transformers 4) read as rope_parameters + dtype (5)."""
    _, folder = tiny("llama_llama3_rope")
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = {"type" if k == "rope_type" else k: v for k, v in rope.items()}
    cfg["torch_dtype"] = cfg.pop("dtype")
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_text(json.dumps(cfg))
    os.symlink(os.path.join(folder, "model.safetensors"), old / "model.safetensors")
    new_model, old_model = tm.load(folder), tm.load(str(old))
    assert old_model.config == new_model.config
    assert old_model.config.rope.rope_type == "llama3"


def test_sharded_checkpoint_loads(tiny, tmp_path):
    hf, folder = tiny("qwen3_untied")
    with torch_threads(1):
        hf.save_pretrained(tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 2
    sharded, single = tm.load(str(tmp_path)), tm.load(folder)
    ids = np.asarray([PROMPTS[1]])
    np.testing.assert_array_equal(sharded.logits(ids), single.logits(ids))


def _rewrite(folder, dest, edit):
    """Copy a checkpoint with edit(tensors: dict) applied to its safetensors."""
    import shutil
    from safetensors.numpy import load_file, save_file
    os.makedirs(dest, exist_ok=True)
    shutil.copy(os.path.join(folder, "config.json"), dest)
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    edit(tensors)
    save_file(tensors, os.path.join(dest, "model.safetensors"))
    return str(dest)


def _no_weight_read(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a weight was read before the key check")
    monkeypatch.setattr(tm.loading, "load_tensor", refuse)


def test_missing_and_extra_keys_are_named_before_loading(tiny, tmp_path, monkeypatch):
    _, folder = tiny("llama")

    def edit(t):
        del t["model.layers.1.mlp.up_proj.weight"]
        t["model.layers.0.mlp.extra_proj.weight"] = np.zeros((2, 2), np.float32)
    bad = _rewrite(folder, tmp_path / "bad", edit)
    _no_weight_read(monkeypatch)
    with pytest.raises(tm.CheckpointError) as e:
        tm.load(bad)
    msg = str(e.value)
    assert "missing keys (1): model.layers.1.mlp.up_proj.weight" in msg
    assert "unexpected keys (1): model.layers.0.mlp.extra_proj.weight" in msg


def test_shape_mismatch_is_named(tiny, tmp_path, monkeypatch):
    _, folder = tiny("qwen3_untied")

    def edit(t):
        t["model.layers.0.self_attn.q_norm.weight"] = np.ones(8, np.float32)
    bad = _rewrite(folder, tmp_path / "bad", edit)
    _no_weight_read(monkeypatch)
    with pytest.raises(tm.CheckpointError, match=r"model\.layers\.0\.self_attn\.q_norm\.weight: "
                                                 r"expected \(16,\), got \(8,\)"):
        tm.load(bad)


def test_tied_model_has_no_lm_head_and_untied_requires_it(tiny, tmp_path):
    _, tied = tiny("qwen3_tied")
    model = tm.load(tied)
    assert model.config.tie_word_embeddings and "lm_head" not in model.weights
    _, untied = tiny("qwen3_untied")
    bad = _rewrite(untied, tmp_path / "bad", lambda t: t.pop("lm_head.weight"))
    with pytest.raises(tm.CheckpointError, match=r"missing keys \(1\): lm_head\.weight"):
        tm.load(bad)


def test_unsupported_model_type_is_named():
    with pytest.raises(tm.UnsupportedModelError, match="model_type='gpt2'"):
        tm.config_from_hf({"model_type": "gpt2"})
    with pytest.raises(tm.UnsupportedModelError, match="rope_type='yarn'"):
        tm.config.rope_from_hf({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1.0, "factor": 2.0}})


@pytest.mark.parametrize("name", ["llama", "llama_linear_rope", "llama_llama3_rope"])
def test_rope_inverse_frequencies_equal_transformers(name, tiny):
    hf, folder = tiny(name)
    ours = tm.layers.rope_inv_freq(tm.load(folder).config.rope, 16)
    np.testing.assert_allclose(ours, hf.model.rotary_emb.inv_freq.numpy(), rtol=1e-6)


def test_seeded_sampling_is_reproducible(tiny):
    _, folder = tiny("llama")
    model = tm.load(folder)
    run = lambda seed, **kw: [r.token_ids for r in generate(  # noqa: E731
        model, PROMPTS[:2], max_new_tokens=12, temperature=0.8, seed=seed, stop=[], **kw)]
    assert run(3) == run(3)
    assert run(3) != run(4)
    greedy = [r.token_ids for r in generate(model, PROMPTS[:2], max_new_tokens=12, stop=[])]
    assert run(5, top_k=1) == greedy
    assert run(5, top_p=1e-6) == greedy


def test_stop_token_ends_generation(tiny, oracle):
    _, folder = tiny("llama")
    model = tm.load(folder)
    ids = oracle("llama")[1]
    stop_at = ids[5]
    first = ids.index(stop_at)
    r = generate(model, [PROMPTS[1]], max_new_tokens=NEW_TOKENS, stop=[stop_at])[0]
    assert r.token_ids == ids[:first + 1] and r.finish_reason == "stop"
