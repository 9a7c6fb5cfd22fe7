"""The models are tlaloc.numpy programs: they trace to DXIR, and the interpreter reproduces eager results.

This is what the export step builds on (it swaps the attention backend for paged
primitives); here the whole-sequence path (NoCache) is traced as it is.
"""
import numpy as np
import pytest

import tlaloc as tl
import tlaloc.models as tm
from tlaloc import _pytree
from tlaloc._frontend.tracing import trace_region

CFG = tm.DecoderConfig(model_type="mistral", vocab_size=50, hidden_size=32, intermediate_size=48, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=8, rms_norm_eps=1e-6, rope=tm.RopeConfig(),
                       max_position_embeddings=64, qk_norm=True, sliding_windows=(3, None))


def _random_weights(cfg, seed=0):
    rng = np.random.default_rng(seed)
    shapes = tm.expected_shapes(cfg)
    tensors = {k: rng.normal(0, 0.3, s).astype(np.float32) for k, s in shapes.items()}
    return tm.weights.build_weights(cfg, tensors.__getitem__)


def _trace_and_run(fn, args):
    graph, _, _ = trace_region(fn, args, "model")
    out = tl.eval_graph(graph, *_pytree.leaves(list(args)))
    return graph, out[0] if isinstance(out, (list, tuple)) else out


def test_decoder_traces_and_interprets_to_eager_logits():
    weights = _random_weights(CFG)
    ids, pos = np.array([[3, 17, 9, 5, 44, 1]]), np.arange(6)[None]
    graph, out = _trace_and_run(lambda w, i, p: tm.decoder_forward(CFG, w, i, p), (weights, ids, pos))
    assert len(graph.nodes) > 50
    np.testing.assert_allclose(np.asarray(out), tm.decoder_forward(CFG, weights, ids, pos), rtol=1e-6, atol=1e-6)


def test_encoder_traces_and_interprets_to_eager_embeddings():
    cfg = tm.EncoderConfig(model_type="bert", vocab_size=40, hidden_size=24, intermediate_size=32, num_layers=2,
                           num_heads=3, layer_norm_eps=1e-12, max_position_embeddings=16)
    weights = _random_weights(cfg)
    ids, mask = np.array([[2, 5, 9, 3], [2, 7, 3, 0]]), np.array([[1, 1, 1, 1], [1, 1, 1, 0]])
    _, out = _trace_and_run(lambda w, i, m: tm.encode(cfg, w, i, m), (weights, ids, mask))
    np.testing.assert_allclose(np.asarray(out), tm.encode(cfg, weights, ids, mask), rtol=1e-6, atol=1e-6)


# -- the key/shape set against transformers (an oracle outside the code under test) -------------------

def _saved_shapes(folder):
    from safetensors import safe_open
    with safe_open(f"{folder}/model.safetensors", "np") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}


def _hf_checkpoint(kind, folder):
    """A seeded transformers model of ``kind`` saved with save_pretrained; returns its config dict."""
    import json
    import transformers
    from .tiny import CASES, make_tiny
    if kind == "bert":
        cfg = transformers.BertConfig(vocab_size=120, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, max_position_embeddings=64)
        transformers.BertModel(cfg).save_pretrained(folder)
    else:
        make_tiny(*CASES[kind], folder)
    with open(f"{folder}/config.json") as f:
        return json.load(f)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3_tied", "qwen3_untied", "mistral_window6", "bert"])
def test_expected_shapes_equal_a_transformers_checkpoint(kind, tmp_path):
    """``expected_shapes`` of the config is exactly the key/shape set transformers writes for it
    (BertModel also writes a pooler, which an embedding model does not use)."""
    pytest.importorskip("transformers")
    hf_cfg = _hf_checkpoint(kind, str(tmp_path))
    saved = _saved_shapes(str(tmp_path))
    if kind == "bert":
        saved = {k: v for k, v in saved.items() if not k.startswith("pooler.")}
    cfg = tm.config_from_hf(hf_cfg)
    assert tm.expected_shapes(cfg) == saved
    tm.check_keys(cfg, _saved_shapes(str(tmp_path)), "transformers")          # the file as written passes
    one_less = dict(saved)
    one_less.pop(sorted(one_less)[-1])
    with pytest.raises(tm.CheckpointError, match="missing keys"):
        tm.check_keys(cfg, one_less, "control")
