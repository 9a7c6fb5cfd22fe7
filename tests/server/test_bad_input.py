"""Every bad request gets a 4xx with an OpenAI error body, and the server keeps serving."""
import json

import pytest
from fastapi.testclient import TestClient

from tlaloc.serving.errors import QueueFullError
from tlaloc.serving.server import create_app

from .fake_engine import Event, FakeEngine

COMPLETIONS, CHAT, EMBEDDINGS = "/v1/completions", "/v1/chat/completions", "/v1/embeddings"
USER = [{"role": "user", "content": "hi"}]

# (name, path, raw body or JSON-able body, status, param, code)
DECODER_CASES = [
    ("malformed JSON", COMPLETIONS, b'{"prompt": "x",', 400, None, "invalid_json"),
    ("malformed JSON (chat)", CHAT, b"{messages: []}", 400, None, "invalid_json"),
    ("empty body", COMPLETIONS, b"", 400, None, "invalid_json"),
    ("body is a list", COMPLETIONS, [1, 2], 400, None, "invalid_value"),
    ("max_tokens as string", COMPLETIONS, {"prompt": "x", "max_tokens": "5"}, 400, "max_tokens", "invalid_value"),
    ("temperature as string", COMPLETIONS, {"prompt": "x", "temperature": "hot"}, 400, "temperature",
     "invalid_value"),
    ("temperature out of range", COMPLETIONS, {"prompt": "x", "temperature": 9}, 400, "temperature",
     "invalid_value"),
    ("stream as string", COMPLETIONS, {"prompt": "x", "stream": "yes"}, 400, "stream", "invalid_value"),
    ("n zero", COMPLETIONS, {"prompt": "x", "n": 0}, 400, "n", "invalid_value"),
    ("stop of ints", COMPLETIONS, {"prompt": "x", "stop": [1, 2]}, 400, "stop", "invalid_value"),
    ("five stop strings", COMPLETIONS, {"prompt": "x", "stop": list("abcde")}, 400, "stop", "invalid_value"),
    ("unknown field", COMPLETIONS, {"prompt": "x", "frobnicate": True}, 400, "frobnicate", "invalid_value"),
    ("prompt missing", COMPLETIONS, {"max_tokens": 3}, 400, "prompt", "invalid_value"),
    ("prompt a number", COMPLETIONS, {"prompt": 5}, 400, "prompt", "invalid_value"),
    ("empty prompt", COMPLETIONS, {"prompt": ""}, 400, "prompt", "invalid_value"),
    ("token id too large", COMPLETIONS, {"prompt": [1, 2, 100000]}, 400, "prompt", "invalid_token_id"),
    ("token id negative", COMPLETIONS, {"prompt": [[1], [-3]]}, 400, "prompt", "invalid_token_id"),
    ("prompt over capacity", COMPLETIONS, {"prompt": "y" * 250, "max_tokens": 10}, 400, "prompt",
     "context_length_exceeded"),
    ("ids over capacity", COMPLETIONS, {"prompt": [5] * 300}, 400, "prompt", "context_length_exceeded"),
    ("chat over capacity", CHAT, {"messages": [{"role": "user", "content": "z" * 400}]}, 400, "messages",
     "context_length_exceeded"),
    ("messages not a list", CHAT, {"messages": "hi"}, 400, "messages", "invalid_value"),
    ("messages empty", CHAT, {"messages": []}, 400, "messages", "invalid_value"),
    ("unknown role", CHAT, {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages.0.role",
     "invalid_value"),
    # the fake engine has no log-probability outputs (as an artifact exported with top_logprobs=0)
    ("logprobs, none exported", COMPLETIONS, {"prompt": "x", "logprobs": 2}, 400, "logprobs",
     "unsupported_parameter"),
    ("chat logprobs, none exported", CHAT, {"messages": USER, "logprobs": True}, 400, "logprobs",
     "unsupported_parameter"),
    ("chat top_logprobs, none exported", CHAT, {"messages": USER, "logprobs": True, "top_logprobs": 2}, 400,
     "top_logprobs", "unsupported_parameter"),
    ("penalty", CHAT, {"messages": USER, "presence_penalty": 0.5}, 400, "presence_penalty",
     "unsupported_parameter"),
    ("tools", CHAT, {"messages": USER, "tools": [{"type": "function"}]}, 400, "tools", "unsupported_parameter"),
    ("unknown model", COMPLETIONS, {"prompt": "x", "model": "gpt-9"}, 404, "model", "model_not_found"),
    ("embeddings on a decoder", EMBEDDINGS, {"input": "x"}, 400, "model", "wrong_model_kind"),
]

ENCODER_CASES = [
    ("malformed JSON", EMBEDDINGS, b"{", 400, None, "invalid_json"),
    ("input missing", EMBEDDINGS, {}, 400, "input", "invalid_value"),
    ("empty input list", EMBEDDINGS, {"input": []}, 400, "input", "invalid_value"),
    ("empty string", EMBEDDINGS, {"input": ["a", ""]}, 400, "input", "invalid_value"),
    ("token ids", EMBEDDINGS, {"input": [1, 2, 3]}, 400, "input", "invalid_value"),
    ("too long", EMBEDDINGS, {"input": "w" * 100}, 400, "input", "context_length_exceeded"),
    ("wrong dimensions", EMBEDDINGS, {"input": "a", "dimensions": 3}, 400, "dimensions", "invalid_value"),
    ("bad encoding", EMBEDDINGS, {"input": "a", "encoding_format": "hex"}, 400, "encoding_format",
     "invalid_value"),
    ("completions on an encoder", COMPLETIONS, {"prompt": "x"}, 400, "model", "wrong_model_kind"),
]


def _post(client, path, body):
    if isinstance(body, bytes):
        return client.post(path, content=body, headers={"content-type": "application/json"})
    return client.post(path, json=body)


def _assert_openai_error(r, status, param, code):
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["code"] == code
    assert error["type"] == "invalid_request_error" and error["message"]


@pytest.mark.parametrize("name, path, body, status, param, code", DECODER_CASES, ids=[c[0] for c in DECODER_CASES])
def test_decoder_bad_request(client, name, path, body, status, param, code):
    _assert_openai_error(_post(client, path, body), status, param, code)


@pytest.mark.parametrize("name, path, body, status, param, code", ENCODER_CASES, ids=[c[0] for c in ENCODER_CASES])
def test_encoder_bad_request(encoder_client, name, path, body, status, param, code):
    _assert_openai_error(_post(encoder_client, path, body), status, param, code)


def test_all_bad_requests_in_a_row_then_a_good_one(client, fake):
    for _, path, body, status, _, _ in DECODER_CASES:
        assert _post(client, path, body).status_code == status
    r = client.post(COMPLETIONS, json={"prompt": "still here", "max_tokens": 4})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
    assert client.get("/health").json()["kv_pages_used"] == 0


def test_unknown_path_and_method(client):
    assert client.get("/v2/nothing").json()["error"]["code"] == "not_found"
    r = client.get(COMPLETIONS)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


class RefusingEngine(FakeEngine):
    """An engine whose own checks refuse what the server's pre-checks let through."""

    def __init__(self, exc):
        super().__init__()
        self.exc = exc

    def submit(self, prompt_ids, **kwargs):
        if len(self.submitted) >= 1:                  # the first choice is taken, the second refused
            raise self.exc
        return super().submit(prompt_ids, **kwargs)


@pytest.mark.parametrize("exc, status, code", [(ValueError("no bucket holds this"), 400, "invalid_prompt"),
                                               (QueueFullError("queue full; retry"), 429, "queue_full")])
def test_engine_refusal_is_reported_and_earlier_choices_cancelled(exc, status, code):
    engine = RefusingEngine(exc)
    engine.step_latency_s = 0.01
    with TestClient(create_app(engine)) as c:
        r = c.post(COMPLETIONS, json={"prompt": "x", "n": 2, "max_tokens": 50})
        assert r.status_code == status and r.json()["error"]["code"] == code
        assert str(exc) in r.json()["error"]["message"]
        from .conftest import wait_for
        wait_for(lambda: engine.cancelled == list(engine.submitted), what="the first choice's cancel")


class FailingEngine(FakeEngine):
    """Reports an error event for every request on its second step."""

    def step(self):
        events = super().step()
        if self.step_calls >= 2:
            return [Event(e.request_id, [], True, None, "device fell over") for e in events]
        return events


def test_engine_error_event_is_a_500_and_the_server_survives():
    engine = FailingEngine()
    with TestClient(create_app(engine)) as c:
        r = c.post(COMPLETIONS, json={"prompt": "x", "max_tokens": 20})
        assert r.status_code == 500 and "device fell over" in r.json()["error"]["message"]
        assert r.json()["error"]["type"] == "server_error"
        with c.stream("POST", COMPLETIONS, json={"prompt": "x", "max_tokens": 20, "stream": True}) as s:
            s.read()
        lines = [line for line in s.text.split("\n") if line]
        assert lines[-1] == "data: [DONE]"
        assert "device fell over" in json.loads(lines[-2][len("data: "):])["error"]["message"]
        assert c.get("/health").status_code == 200
