"""The OpenAI-compatible endpoints over a FakeEngine, in-process (TestClient)."""
import base64
import json

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tlaloc.serving.server import create_app

from .conftest import API_KEY, wait_for
from .fake_engine import EOS_ID, FakeEngine


def decode(engine, ids):
    return engine.tokenizer.decode(ids, skip_special_tokens=True)


def sse_payloads(response):
    """The JSON payloads of an SSE body, and whether it ended with [DONE]."""
    lines = [line for line in response.text.split("\n") if line]
    assert all(line.startswith("data: ") for line in lines), lines
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[len("data: "):]) for line in lines[:-1]]


def test_completion_equals_the_engine_run_alone(client, fake):
    prompt_ids = fake.tokenizer.encode("hello there").ids
    r = client.post("/v1/completions", json={"model": "fake-tiny", "prompt": "hello there",
                                             "max_tokens": 60, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    expected = fake.expected_ids(prompt_ids, 60)
    assert body["object"] == "text_completion" and body["model"] == "fake-tiny"
    assert body["choices"][0]["text"] == decode(fake, expected)
    assert body["choices"][0]["finish_reason"] == "stop"                 # the fake's EOS came
    assert body["usage"] == {"prompt_tokens": len(prompt_ids), "completion_tokens": len(expected),
                             "total_tokens": len(prompt_ids) + len(expected)}
    submitted = next(iter(fake.submitted.values()))
    assert submitted["stop_ids"] == (EOS_ID,) and submitted["temperature"] == 0.0


def test_completion_prompt_forms_and_n(client, fake):
    r = client.post("/v1/completions", json={"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 5, "n": 2,
                                             "temperature": 0.8, "seed": 7})
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    assert all(c["finish_reason"] == "length" for c in choices)
    seeds = [s["seed"] for s in fake.submitted.values()]
    assert seeds == [(7, 0), (7, 0, 1), (7, 1), (7, 1, 1)]               # as Engine.generate seeds prompts
    first = fake.expected_ids([1, 2, 3], 5, temperature=0.8, seed=(7, 0))
    assert choices[0]["text"] == decode(fake, first)


def test_max_tokens_and_sampling_fields_reach_the_engine(client, fake):
    r = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 3, "temperature": 0.5,
                                             "top_p": 0.9, "top_k": 5, "seed": 3})
    assert r.status_code == 200
    s = next(iter(fake.submitted.values()))
    assert (s["max_new_tokens"], s["temperature"], s["top_p"], s["top_k"], s["seed"]) == (3, 0.5, 0.9, 5, (3, 0))
    assert r.json()["usage"]["completion_tokens"] == 3


def test_stop_string_cuts_the_text_and_cancels(client, fake):
    fake.step_latency_s = 0.005                        # still running when the stop string shows
    prompt_ids = fake.tokenizer.encode("hi").ids
    full = decode(fake, fake.expected_ids(prompt_ids, 60))
    word = "lazy" if "lazy" in full else full.split()[1]
    r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 60, "stop": [word, "zzz"],
                                             "temperature": 0})
    choice = r.json()["choices"][0]
    assert choice["text"] == full[:full.index(word)] and choice["finish_reason"] == "stop"
    wait_for(lambda: list(fake.submitted) == fake.cancelled, what="the engine to get the cancel")
    assert fake.stats()["kv_pages_used"] == 0


def test_chat_uses_the_engines_template(client, fake):
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "you"}]}]
    r = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 12, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    rendered = ("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi you<|im_end|>\n"
                "<|im_start|>assistant\n")
    prompt_ids = fake.tokenizer.encode(rendered, add_special_tokens=False).ids
    assert next(iter(fake.submitted.values()))["prompt_ids"] == prompt_ids
    assert body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert message == {"role": "assistant", "content": decode(fake, fake.expected_ids(prompt_ids, 12))}


def test_chat_default_max_tokens_is_the_rest_of_the_context(client, fake):
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 200
    s = next(iter(fake.submitted.values()))
    assert len(s["prompt_ids"]) + s["max_new_tokens"] == fake.max_context


def test_streamed_completion_chunks(client, fake):
    prompt_ids = fake.tokenizer.encode("stream me").ids
    with client.stream("POST", "/v1/completions", json={"prompt": "stream me", "max_tokens": 40, "stream": True,
                                                        "temperature": 0,
                                                        "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        r.read()
    chunks = sse_payloads(r)
    assert all(c["object"] == "text_completion" for c in chunks)
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"]]
    expected = fake.expected_ids(prompt_ids, 40)
    assert "".join(texts) == decode(fake, expected)
    assert all("\ufffd" not in t for t in texts)                            # the fox arrives whole
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert reasons[-1] == "stop" and set(reasons[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(expected)


def test_streamed_chat_chunks(client, fake):
    with client.stream("POST", "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "stream": True, "n": 2}) as r:
        r.read()
    chunks = sse_payloads(r)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        assert mine[-1]["delta"] == {} and mine[-1]["finish_reason"] == "length"
        text = "".join(c["delta"].get("content", "") for c in mine)
        assert len(fake.tokenizer.encode(text).ids) <= 10 and text


def test_models_and_health(client):
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "fake-tiny"
    assert models["data"][0]["max_model_len"] == 256
    assert client.get("/v1/models/fake-tiny").json()["id"] == "fake-tiny"
    assert client.get("/v1/models/other").status_code == 404
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["kv_pages_used"] == 0 and health["kind"] == "decoder"


def test_metrics_parse_as_prometheus_text(client):
    client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 5})
    client.post("/v1/completions", json={"prompt": "abc", "max_tokens": "five"})
    r = client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    for name in ("tlaloc_requests_running", "tlaloc_requests_waiting", "tlaloc_kv_pages_used",
                 "tlaloc_kv_pages_total", "tlaloc_prompt_tokens", "tlaloc_generation_tokens",
                 "tlaloc_time_to_first_token_seconds", "tlaloc_time_per_output_token_seconds",
                 "tlaloc_http_requests"):
        assert name in families, name
    assert families["tlaloc_time_to_first_token_seconds"].type == "histogram"
    count = [s.value for s in families["tlaloc_time_to_first_token_seconds"].samples if s.name.endswith("_count")]
    assert count == [1.0]
    out = [s.value for s in families["tlaloc_generation_tokens"].samples if s.name.endswith("_total")]
    assert out == [5.0]
    statuses = {(s.labels["endpoint"], s.labels["status"]) for s in families["tlaloc_http_requests"].samples
                if s.name.endswith("_total")}
    assert {("/v1/completions", "200"), ("/v1/completions", "400")} <= statuses


def test_embeddings_float_and_base64(encoder_client, encoder):
    r = encoder_client.post("/v1/embeddings", json={"input": ["a cat", "a dog"], "model": "fake-encoder"})
    assert r.status_code == 200, r.text
    body = r.json()
    expected = encoder.embed(["a cat", "a dog"])
    got = np.array([d["embedding"] for d in body["data"]], dtype=np.float32)
    np.testing.assert_array_equal(got, expected)
    assert [d["index"] for d in body["data"]] == [0, 1] and body["usage"]["prompt_tokens"] == 10
    r = encoder_client.post("/v1/embeddings", json={"input": "a cat", "encoding_format": "base64"})
    vector = np.frombuffer(base64.b64decode(r.json()["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_array_equal(vector, expected[0])


def test_concurrent_embeddings_are_batched(encoder):
    import concurrent.futures
    encoder.embed_latency_s = 0.05                     # while one call runs, the others queue up
    with TestClient(create_app(encoder, embed_window_s=0.02)) as c:
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            results = list(pool.map(lambda i: c.post("/v1/embeddings", json={"input": f"text {i}"}), range(12)))
    assert all(r.status_code == 200 for r in results)
    for i, r in enumerate(results):
        np.testing.assert_allclose(r.json()["data"][0]["embedding"], FakeEngine(kind="encoder").embed(
            [f"text {i}"])[0], rtol=1e-6)
    assert sum(encoder.embed_calls) - 2 * 0 >= 12 and max(encoder.embed_calls) > 1, encoder.embed_calls
    assert len(encoder.embed_calls) < 12


def test_kind_mismatch_is_refused(client, encoder_client):
    r = client.post("/v1/embeddings", json={"input": "x"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "wrong_model_kind"
    r = encoder_client.post("/v1/completions", json={"prompt": "x"})
    assert r.status_code == 400 and "decoder" in r.json()["error"]["message"]


@pytest.mark.parametrize("headers, status", [({}, 401), ({"Authorization": "Bearer nope"}, 401),
                                             ({"Authorization": API_KEY}, 401),
                                             ({"Authorization": f"Bearer {API_KEY}"}, 200)])
def test_api_key_guards_everything_but_health(fake, headers, status):
    with TestClient(create_app(fake, api_key=API_KEY)) as c:
        for method, path, body in (("GET", "/v1/models", None), ("GET", "/metrics", None),
                                   ("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})):
            r = c.request(method, path, json=body, headers=headers)
            assert r.status_code == status, (path, r.text)
            if status == 401:
                assert r.json()["error"]["code"] == "invalid_api_key"
        assert c.get("/health").status_code == 200


@pytest.mark.parametrize("route,body", [
    ("/v1/completions", {"prompt": "hello there"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello there"}]}),
])
def test_a_bad_stop_is_refused_before_the_prompt_is_tokenised(client, fake, monkeypatch, route, body):
    """Regression: ``stop`` was checked after the prompt (possibly megabytes) was tokenised; the
    limits are checked before any work. The control: a valid stop tokenises and answers 200."""
    calls = []
    for name in ("encode", "encode_batch"):
        original = getattr(fake.tokenizer, name)
        monkeypatch.setattr(fake.tokenizer, name, lambda *a, _o=original, **k: calls.append(1) or _o(*a, **k))
    r = client.post(route, json={"model": "fake-tiny", "max_tokens": 2, "stop": ["a", "b", "c", "d", "e"], **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stop", r.text
    assert calls == []
    r = client.post(route, json={"model": "fake-tiny", "max_tokens": 2, "stop": ["zz"], **body})
    assert r.status_code == 200, r.text
    assert calls
