"""The export's fused projections: q/k/v and gate/up concatenated, one dot each, the same model.

Oracles: the unfused decoder (the checkpoint's own tensors) eagerly in NumPy, and
transformers' greedy ids for Qwen2, whose q/k/v carry biases (fused too).
"""
import numpy as np

from tlaloc.serving.export.weights_format import flatten, fuse_projections, unflatten


def _layer(rng, D=8, H=2, K=1, E=4, F=12, biases=("bq",)):
    w = lambda *s: rng.standard_normal(s).astype(np.float32)
    p = {"attn_norm": w(D), "wq": w(D, H * E), "wk": w(D, K * E), "wv": w(D, K * E), "wo": w(H * E, D),
         "mlp_norm": w(D), "w_gate": w(D, F), "w_up": w(D, F), "w_down": w(F, D)}
    p.update({b: w(p["w" + b[1:]].shape[1]) for b in biases})
    return p


def test_fuse_projections_concatenates_columns_and_maps_them_back():
    rng = np.random.default_rng(0)
    flat = flatten({"embed": np.zeros((5, 8), np.float32), "layers": (_layer(rng), _layer(rng, biases=()))})
    fused, mapping = fuse_projections(flat)
    assert not any(k.endswith((".wq", ".wk", ".wv", ".w_gate", ".w_up", ".bq")) for k in fused)
    for name, entry in mapping.items():                                  # every part is its columns, exactly
        for part, a, b in entry["parts"]:
            got = fused[name][..., a:b]
            want = flat.get(part, np.zeros(b - a, np.float32))           # a missing bias is zeros
            np.testing.assert_array_equal(got, want)
    assert [p[0] for p in mapping["layers.0.bqkv"]["parts"]] == ["layers.0.bq", "layers.0.bk", "layers.0.bv"]
    assert "layers.1.bqkv" not in mapping and fused["layers.1.wqkv"].shape == (8, 16)
    assert fused["layers.0.w_gate_up"].shape == (8, 24)


def test_fused_decoder_layer_equals_the_separate_projections():
    from tlaloc.models import DecoderConfig
    from tlaloc.models.config import RopeConfig
    from tlaloc.models.decoder import decoder_layer
    from tlaloc.models.layers import rope_inv_freq, rope_tables
    rng = np.random.default_rng(1)
    cfg = DecoderConfig(model_type="qwen2", vocab_size=5, hidden_size=8, intermediate_size=12, num_layers=1,
                        num_heads=2, num_kv_heads=1, head_dim=4, rms_norm_eps=1e-6, rope=RopeConfig(theta=1e4),
                        max_position_embeddings=16, tie_word_embeddings=True, qkv_bias=True, o_bias=False,
                        qk_norm=False, sliding_windows=(None,), bos_token_id=None, eos_token_ids=(),
                        dtype="float32")
    p = _layer(rng, biases=("bq", "bk", "bv"))
    fused = unflatten(fuse_projections(flatten({"layers": (p,)}))[0])["layers"][0]
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)                # (B, T, D)
    pos = np.broadcast_to(np.arange(3), (2, 3))
    cos, sin = rope_tables(rope_inv_freq(cfg.rope, 4), pos)
    from tlaloc.models.kv_cache import NoCache
    want = decoder_layer(cfg, 0, p, x, cos, sin, pos, NoCache())
    got = decoder_layer(cfg, 0, fused, x, cos, sin, pos, NoCache())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    swapped = dict(fused, wqkv=np.concatenate([p["wq"], p["wv"], p["wk"]], axis=1))   # negative control: k and v
    assert np.max(np.abs(decoder_layer(cfg, 0, swapped, x, cos, sin, pos, NoCache()) - want)) > 1e-2


def test_qwen2_fused_biases_greedy_ids_equal_transformers(engine, oracle):
    from .fixtures import NEW_TOKENS, PROMPTS
    got = [r.token_ids for r in engine("qwen2").generate(PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])]
    assert got == oracle("qwen2")
