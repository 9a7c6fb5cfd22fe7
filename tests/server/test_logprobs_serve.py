"""OpenAI ``logprobs`` from a real ``tlaloc serve`` process, read with the official ``openai`` client.

Oracle: transformers' ``log_softmax`` (float64) of its own logits for the same seeded tiny
Llama (written again here with the fixture's seed, so the weights are the served ones).
The session tokenizer maps id i < 256 to byte i, so a chat entry's ``bytes`` name its
token id: the test reads the sampled ids back from them.
"""
import numpy as np
import pytest

from .test_serve_process import ServeProcess

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
openai = pytest.importorskip("openai")

ATOL = 2e-4
PROMPT = [3, 17, 99, 5, 200, 7, 42]
MESSAGES = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def setup(tiny_llama_artifact, serve_env, tmp_path_factory):
    from tlaloc.serving import Engine
    from .test_real_engine import write_tiny_llama
    folder = tmp_path_factory.mktemp("tiny-llama-oracle")
    write_tiny_llama(folder, hidden=64, layers=2, ffn=128)             # as tiny_llama_artifact: same seed
    hf = transformers.LlamaForCausalLM.from_pretrained(str(folder), attn_implementation="eager").double().eval()
    engine = Engine(str(tiny_llama_artifact))                          # tokenizer and template; nothing compiled
    server = ServeProcess(tiny_llama_artifact, env=serve_env)
    yield hf, engine, openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    server.stop()


def _log_softmax(hf, prompt, tokens) -> np.ndarray:
    """(len(tokens), V) float64: the log-softmax that predicted each of ``tokens`` after ``prompt``."""
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + tokens])).logits[0]
    return torch.log_softmax(logits, -1)[len(prompt) - 1:len(prompt) - 1 + len(tokens)].numpy()


def _greedy(hf, prompt, n) -> list:
    ids = []
    for _ in range(n):
        ids.append(int(np.argmax(_log_softmax(hf, prompt, ids + [0])[-1])))
    return ids


def test_completions_logprobs_equal_transformers(setup):
    hf, engine, client = setup
    want = _greedy(hf, PROMPT, 6)
    ref = _log_softmax(hf, PROMPT, want)
    got = client.completions.create(model=engine.model_name, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3)
    lp = got.choices[0].logprobs
    decode = [engine.tokenizer.decode([t]) for t in want]
    assert lp.tokens == decode and "".join(lp.tokens) == got.choices[0].text
    np.testing.assert_allclose(lp.token_logprobs, [ref[i, t] for i, t in enumerate(want)], atol=ATOL)
    assert lp.text_offset == list(np.cumsum([0] + [len(s) for s in decode])[:-1])
    for i, top in enumerate(lp.top_logprobs):
        expected = {}
        for t in np.argsort(-ref[i], kind="stable")[:3]:
            expected.setdefault(engine.tokenizer.decode([int(t)]), ref[i, t])
        assert list(top) == list(expected)                              # most likely first
        np.testing.assert_allclose(list(top.values()), list(expected.values()), atol=ATOL)
    # negative control: the previous position's log-probabilities are far outside the tolerance
    assert max(abs(lp.token_logprobs[i] - ref[i - 1, t]) for i, t in enumerate(want) if i) > 100 * ATOL

    stream = client.completions.create(model=engine.model_name, prompt=PROMPT, max_tokens=6, temperature=0,
                                       logprobs=3, stream=True)
    tokens, values, offsets = [], [], []
    for chunk in stream:
        c = chunk.choices[0]
        assert len(c.logprobs.tokens) == len(c.logprobs.token_logprobs) == len(c.logprobs.text_offset)
        assert "".join(c.logprobs.tokens) == c.text                     # each chunk carries its tokens' logprobs
        tokens += c.logprobs.tokens
        values += c.logprobs.token_logprobs
        offsets += c.logprobs.text_offset
    assert tokens == lp.tokens and offsets == lp.text_offset
    np.testing.assert_allclose(values, lp.token_logprobs, atol=1e-6)


def _chat_ids(content) -> list:
    assert all(len(e.bytes) == 1 for e in content)                    # byte tokens: bytes == [id]
    return [e.bytes[0] for e in content]


def _check_chat(content, ref, ids, top):
    for i, e in enumerate(content):
        assert abs(e.logprob - ref[i, ids[i]]) < ATOL
        order = np.argsort(-ref[i], kind="stable")[:top]
        assert len(e.top_logprobs) == top
        np.testing.assert_allclose([t.logprob for t in e.top_logprobs], ref[i, order], atol=ATOL)
        clear = np.abs(np.diff(ref[i, order])) > 1e-3
        got = [t.bytes[0] for t in e.top_logprobs]
        for j in range(top):
            if (j == 0 or clear[j - 1]) and (j == top - 1 or clear[j]):
                assert got[j] == order[j]


def test_chat_logprobs_greedy_and_sampled_equal_transformers(setup):
    from tlaloc.serving.server import prompts as _prompts
    hf, engine, client = setup
    prompt = _prompts.chat_token_ids(engine, MESSAGES)
    chat = client.chat.completions.create(model=engine.model_name, messages=MESSAGES, max_tokens=6, temperature=0,
                                          logprobs=True, top_logprobs=5)
    content = chat.choices[0].logprobs.content
    ids = _chat_ids(content)
    assert ids == _greedy(hf, prompt, len(ids)) and len(ids) == 6
    _check_chat(content, _log_softmax(hf, prompt, ids), ids, 5)
    assert "".join(e.token for e in content) == chat.choices[0].message.content

    stream = client.chat.completions.create(model=engine.model_name, messages=MESSAGES, max_tokens=8,
                                            temperature=1.3, seed=11, logprobs=True, top_logprobs=20, stream=True)
    streamed = [e for chunk in stream if chunk.choices and chunk.choices[0].logprobs
                for e in chunk.choices[0].logprobs.content]
    ids = _chat_ids(streamed)
    ref = _log_softmax(hf, prompt, ids)
    assert ids != [int(np.argmax(r)) for r in ref]                     # it sampled
    _check_chat(streamed, ref, ids, 20)

    plain = client.chat.completions.create(model=engine.model_name, messages=MESSAGES, max_tokens=2,
                                           temperature=0, logprobs=True)
    assert all(e.top_logprobs == [] for e in plain.choices[0].logprobs.content)
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(model=engine.model_name, messages=MESSAGES, max_tokens=2,
                                       logprobs=True, top_logprobs=21)


def test_artifact_without_logprobs_is_refused_by_name(tiny_llama_artifact, tmp_path):
    """The same model exported with top_logprobs=0, behind the in-process app: a 400 naming logprobs."""
    from fastapi.testclient import TestClient
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    from tlaloc.serving.server import create_app
    from .test_real_engine import write_tiny_llama
    folder = tmp_path / "hf"
    folder.mkdir()
    write_tiny_llama(folder, hidden=16, layers=1, ffn=32)
    export(str(folder), str(tmp_path / "art"), batch=(1,), context=(32,), block_size=16, top_logprobs=0,
           progress=False)
    with TestClient(create_app(Engine(str(tmp_path / "art"), fast_compile=True))) as client:
        r = client.post("/v1/completions", json={"prompt": [5, 6], "max_tokens": 2, "logprobs": 1})
        assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
        assert "re-export" in r.json()["error"]["message"]
        r = client.post("/v1/chat/completions", json={"messages": MESSAGES, "logprobs": True, "max_tokens": 2})
        assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
        r = client.post("/v1/completions", json={"prompt": [5, 6], "max_tokens": 2})
        assert r.status_code == 200 and r.json()["choices"][0]["logprobs"] is None
