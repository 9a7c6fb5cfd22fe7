"""Regression tests for the server faults of issue 17, over the fake engine (fast, in-process).

Each of these failed before its fix: a 500 (``max_tokens: null``, ``response_format``
with braces), tokenising on the event loop (an 8 MB prompt froze every stream), no cap on
a prompt list (10,000 prompts ran for nobody), failures counted as cancellations, a
negative seed blamed on the prompt, and a chat without ``max_tokens`` on a small page
pool blamed on the prompt.
"""
import asyncio
import json

import httpx
import pytest
from fastapi.testclient import TestClient

from tlaloc.serving.server.choices import Generation
from tlaloc.serving.limits import ServerLimits
from tlaloc.serving.server import create_app

from .fake_engine import FakeEngine

USER = [{"role": "user", "content": "hi"}]


def _app_client(engine=None, **kwargs):
    return TestClient(create_app(engine or FakeEngine(), **kwargs), raise_server_exceptions=False)


def test_max_tokens_null_means_the_default():
    # OpenAI: "max_tokens: integer or null, defaults to 16" -- null is the default, not an error
    engine = FakeEngine()
    with _app_client(engine) as client:
        r = client.post("/v1/completions", json={"prompt": "a", "max_tokens": None})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] <= 16
        [kwargs] = engine.submitted.values()
        assert kwargs["max_new_tokens"] == 16
        r = client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": None,
                                                      "max_completion_tokens": None})
        assert r.status_code == 200, r.text


def test_response_format_with_braces_is_a_400_naming_it():
    with _app_client() as client:
        r = client.post("/v1/chat/completions", json={"messages": USER,
                                                      "response_format": {"type": "json_object"}})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "response_format"
    assert '{"type": "text"}' in r.json()["error"]["message"]


def test_unsupported_messages_name_their_field():
    with _app_client() as client:
        r = client.post("/v1/completions", json={"prompt": "x", "logprobs": 2})
    assert r.status_code == 400 and "'logprobs'" in r.json()["error"]["message"]
    assert "re-export" in r.json()["error"]["message"]              # the fake engine has no logprob outputs


class _LoopWatchingTokenizer:
    """Wraps a tokenizer; records whether each encode/decode ran with an event loop in its thread."""

    def __init__(self, inner):
        self._inner, self.on_loop = inner, []

    def _note(self):
        try:
            asyncio.get_running_loop()
            self.on_loop.append(True)
        except RuntimeError:
            self.on_loop.append(False)

    def encode(self, *args, **kwargs):
        self._note()
        return self._inner.encode(*args, **kwargs)

    def encode_batch(self, *args, **kwargs):
        self._note()
        return self._inner.encode_batch(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"prompt": "hello " * 500, "max_tokens": 2}),
    ("/v1/completions", {"prompt": ["one", "two"], "max_tokens": 2}),
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 2}),
])
def test_tokenising_runs_off_the_event_loop(path, body):
    engine = FakeEngine(max_context=4096)
    engine.tokenizer = watch = _LoopWatchingTokenizer(engine.tokenizer)
    with _app_client(engine) as client:
        r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    assert watch.on_loop and not any(watch.on_loop), watch.on_loop


def test_request_body_over_the_limit_is_a_413():
    with _app_client(limits=ServerLimits(max_request_bytes=1000)) as client:
        r = client.post("/v1/completions", json={"prompt": "a" * 2000})
        assert r.status_code == 413, r.text
        assert r.json()["error"]["code"] == "request_too_large"
        assert client.post("/v1/completions", json={"prompt": "a", "max_tokens": 1}).status_code == 200


def test_prompt_list_is_capped_before_any_work():
    engine = FakeEngine()
    with _app_client(engine) as client:
        r = client.post("/v1/completions", json={"prompt": ["a"] * 10000, "max_tokens": 1})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "prompt" and r.json()["error"]["code"] == "too_many_prompts"
    assert engine.submitted == {}                          # nothing reached the engine


@pytest.mark.parametrize("body,param", [
    ({"prompt": "x", "n": 17}, "n"),
    ({"prompt": ["a"] * 40, "n": 4}, "n"),                 # 160 sequences in one request
    ({"prompt": "x", "stop": ["a"] * 5}, "stop"),
    ({"prompt": "x", "stop": "z" * 1000}, "stop"),
    ({"prompt": "x", "seed": -1}, "seed"),
    ({"prompt": "x", "seed": 2 ** 64}, "seed"),
    ({"prompt": "x", "max_tokens": 2 ** 63}, "max_tokens"),
])
def test_limits_name_their_param(body, param):
    engine = FakeEngine()
    with _app_client(engine) as client:
        r = client.post("/v1/completions", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text
    assert engine.submitted == {}


def test_huge_top_k_is_clamped_to_the_vocabulary_at_admission():
    engine = FakeEngine()
    with _app_client(engine) as client:
        r = client.post("/v1/completions", json={"prompt": "x", "top_k": 2 ** 31, "temperature": 1,
                                                 "max_tokens": 2})
    assert r.status_code == 200, r.text
    [kwargs] = engine.submitted.values()
    assert kwargs["top_k"] == engine.tokenizer.get_vocab_size(with_added_tokens=True)


class _Runner:
    """Takes submissions instantly; records them and the cancels."""

    def __init__(self):
        self.submitted, self.cancelled = [], []

    async def submit(self, ids, sink, *, request_id, **params):
        self.submitted.append(request_id)
        return request_id

    def cancel(self, request_id):
        self.cancelled.append(request_id)


def test_a_disconnect_during_submission_stops_submitting():
    runner = _Runner()
    gen = Generation(runner, FakeEngine().tokenizer, request_id="r", prompts=[[1]] * 50, n=1,
                     sampling={"max_new_tokens": 1}, stop=[])

    async def gone_after_ten():
        return len(runner.submitted) >= 10

    async def run():
        with pytest.raises(Exception) as info:
            await gen.start(is_disconnected=gone_after_ten, check_every=1)
        return info.value

    error = asyncio.run(run())
    assert type(error).__name__ == "ClientGone"
    assert 10 <= len(runner.submitted) < 50
    assert sorted(runner.cancelled) == sorted(runner.submitted)       # what was taken is cancelled


def test_chat_default_max_tokens_fits_a_small_page_pool():
    engine = FakeEngine(max_context=256)
    engine.max_sequence_tokens = 40          # a pool of fewer pages than the context holds
    with _app_client(engine) as client:
        r = client.post("/v1/chat/completions", json={"messages": USER})
        assert r.status_code == 200, r.text
        [kwargs] = engine.submitted.values()
        assert len(kwargs["prompt_ids"]) + kwargs["max_new_tokens"] == 40
        r = client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 100})
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens", r.text


def test_a_failed_request_is_a_500_naming_the_engine_and_the_server_keeps_serving(live):
    class Failing(FakeEngine):
        def step(self):
            events = super().step()
            return [type(e)(e.request_id, [], True, "error", "device fault") if e.request_id.startswith(
                "cmpl") and self.submitted[e.request_id]["temperature"] == 1.5 else e for e in events]

    engine = Failing()
    server = live(engine)
    with httpx.Client(timeout=30) as client:
        r = client.post(f"{server.url}/v1/completions", json={"prompt": "x", "temperature": 1.5})
        assert r.status_code == 500 and r.json()["error"]["code"] == "engine_error"
        r = client.post(f"{server.url}/v1/completions", json={"prompt": "x", "max_tokens": 3})
        assert r.status_code == 200
        assert json.loads(r.text)["choices"][0]["finish_reason"] == "length"


def test_embedding_inputs_are_capped_and_tokenised_off_the_loop():
    engine = FakeEngine(kind="encoder", model_name="fake-encoder", max_context=64)
    engine.tokenizer = watch = _LoopWatchingTokenizer(engine.tokenizer)
    with _app_client(engine, limits=ServerLimits(max_embedding_inputs=3)) as client:
        r = client.post("/v1/embeddings", json={"input": ["a", "b", "c", "d"]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "input", r.text
        assert engine.embed_calls == []
        assert client.post("/v1/embeddings", json={"input": ["a", "b"]}).status_code == 200
    assert watch.on_loop and not any(watch.on_loop)
