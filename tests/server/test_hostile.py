"""The hostile-input table: bad requests over HTTP to a real ``tlaloc serve`` process (issue 17).

One server (a seeded tiny Llama, the session's shared artifact) with small limits so
that each is reachable: 1 MiB bodies, 80 queued sequences. Every case names its expected
status, ``param`` and ``code``; after every case a good request must still succeed and the
engine must be idle (0 KV pages used, nothing running or waiting). Then the five faults of
the issue against concurrent streams, a 64-stream load with 10% malformed requests, and a
1,200-request overload (429s, never a 5xx). Loopback only; every wait is bounded.

Oracle for generated text: the same prompts answered by the same server one request at a
time (the scheduler's batch invariance is tested against transformers in tests/serving).
"""
import asyncio
import json
import time

import httpx
import pytest

from ._rawhttp import post_many
from .test_serve_process import ServeProcess

API_KEY = "sk-hostile"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
MAX_BYTES = 1024 * 1024
ARGS = ["--max-request-bytes", str(MAX_BYTES), "--max-waiting", "64", "--body-timeout", "5"]
C, CHAT, EMB = "/v1/completions", "/v1/chat/completions", "/v1/embeddings"
USER = [{"role": "user", "content": "hi"}]
GOOD = {"prompt": [3, 17, 99], "max_tokens": 2, "temperature": 0}

# (name, method, path, body: JSON-able or raw bytes, status, param, code)
CASES = [
    # the five faults of the issue
    ("max_tokens null is the default", "POST", C, {"prompt": "a", "max_tokens": None}, 200, None, None),
    ("response_format json_object", "POST", CHAT, {"messages": USER, "response_format": {"type": "json_object"}},
     400, "response_format", "unsupported_parameter"),
    ("top_k 2**31 is clamped", "POST", C, {"prompt": "x", "top_k": 2147483648, "temperature": 1, "max_tokens": 2},
     200, None, None),
    ("8 MB prompt", "POST", C, {"prompt": "a" * (8 * 1024 * 1024)}, 413, None, "request_too_large"),
    ("10,000 prompts", "POST", C, {"prompt": ["a"] * 10000, "max_tokens": 1}, 400, "prompt", "too_many_prompts"),
    # bodies
    ("malformed JSON", "POST", C, b'{"prompt": "x",', 400, None, "invalid_json"),
    ("empty body", "POST", C, b"", 400, None, "invalid_json"),
    ("body a list", "POST", C, [1, 2], 400, None, "invalid_value"),
    ("body a string", "POST", C, "prompt", 400, None, "invalid_value"),
    ("deeply nested JSON", "POST", C, b'{"prompt":' + b"[" * 5000 + b"]" * 5000 + b"}", 400, None, "invalid_json"),
    ("lone surrogate", "POST", C, b'{"prompt": "\\ud800"}', 400, None, "invalid_json"),
    ("NaN", "POST", C, b'{"prompt": "x", "temperature": NaN}', 400, "temperature", "invalid_value"),
    ("1e999", "POST", C, b'{"prompt": "x", "temperature": 1e999}', 400, "temperature", "invalid_value"),
    ("unknown field", "POST", C, {"prompt": "x", "frobnicate": 1}, 400, "frobnicate", "invalid_value"),
    # max_tokens
    ("max_tokens string", "POST", C, {"prompt": "x", "max_tokens": "5"}, 400, "max_tokens", "invalid_value"),
    ("max_tokens float", "POST", C, {"prompt": "x", "max_tokens": 3.0}, 400, "max_tokens", "invalid_value"),
    ("max_tokens 0", "POST", C, {"prompt": "x", "max_tokens": 0}, 400, "max_tokens", "invalid_value"),
    ("max_tokens negative", "POST", C, {"prompt": "x", "max_tokens": -1}, 400, "max_tokens", "invalid_value"),
    ("max_tokens 2**31", "POST", C, {"prompt": "x", "max_tokens": 2 ** 31}, 400, "max_tokens", "invalid_value"),
    ("max_tokens 2**63", "POST", C, {"prompt": "x", "max_tokens": 2 ** 63}, 400, "max_tokens", "invalid_value"),
    ("max_tokens over the context", "POST", C, {"prompt": "x", "max_tokens": 128}, 400, "max_tokens",
     "context_length_exceeded"),
    ("prompt + max_tokens over", "POST", C, {"prompt": [5] * 100, "max_tokens": 40}, 400, "prompt",
     "context_length_exceeded"),
    # sampling values
    ("temperature negative", "POST", C, {"prompt": "x", "temperature": -0.1}, 400, "temperature", "invalid_value"),
    ("temperature 2.5", "POST", C, {"prompt": "x", "temperature": 2.5}, 400, "temperature", "invalid_value"),
    ("temperature string", "POST", C, {"prompt": "x", "temperature": "hot"}, 400, "temperature",
     "invalid_value"),
    ("temperature null", "POST", C, {"prompt": "x", "temperature": None, "max_tokens": 2}, 200, None, None),
    ("top_p 0", "POST", C, {"prompt": "x", "top_p": 0}, 400, "top_p", "invalid_value"),
    ("top_p 1.5", "POST", C, {"prompt": "x", "top_p": 1.5}, 400, "top_p", "invalid_value"),
    ("top_k 0", "POST", C, {"prompt": "x", "top_k": 0}, 400, "top_k", "invalid_value"),
    ("top_k negative", "POST", C, {"prompt": "x", "top_k": -5}, 400, "top_k", "invalid_value"),
    ("top_k 10**30", "POST", C, {"prompt": "x", "top_k": 10 ** 30, "temperature": 1, "max_tokens": 2}, 200,
     None, None),
    ("n 0", "POST", C, {"prompt": "x", "n": 0}, 400, "n", "invalid_value"),
    ("n 17", "POST", C, {"prompt": "x", "n": 17}, 400, "n", "invalid_value"),
    ("40 prompts x n 2", "POST", C, {"prompt": ["a"] * 40, "n": 2}, 400, "n", "invalid_value"),
    ("n 3 works", "POST", C, {"prompt": "x", "n": 3, "max_tokens": 2}, 200, None, None),
    ("five stop strings", "POST", C, {"prompt": "x", "stop": list("abcde")}, 400, "stop", "invalid_value"),
    ("stop 1,000 chars", "POST", C, {"prompt": "x", "stop": "z" * 1000}, 400, "stop", "invalid_value"),
    ("stop ints", "POST", C, {"prompt": "x", "stop": [1, 2]}, 400, "stop", "invalid_value"),
    ("stop with braces", "POST", C, {"prompt": "x", "stop": ["{param}", "{}"], "max_tokens": 2}, 200, None, None),
    ("seed negative", "POST", C, {"prompt": "x", "seed": -1}, 400, "seed", "invalid_value"),
    ("seed 2**64", "POST", C, {"prompt": "x", "seed": 2 ** 64}, 400, "seed", "invalid_value"),
    ("seed string", "POST", C, {"prompt": "x", "seed": "x"}, 400, "seed", "invalid_value"),
    ("seed 2**63-1", "POST", C, {"prompt": "x", "seed": 2 ** 63 - 1, "temperature": 1, "max_tokens": 2}, 200,
     None, None),
    ("stream string", "POST", C, {"prompt": "x", "stream": "yes"}, 400, "stream", "invalid_value"),
    # prompts
    ("prompt missing", "POST", C, {"max_tokens": 3}, 400, "prompt", "invalid_value"),
    ("prompt null", "POST", C, {"prompt": None}, 400, "prompt", "invalid_value"),
    ("prompt a number", "POST", C, {"prompt": 5}, 400, "prompt", "invalid_value"),
    ("prompt empty string", "POST", C, {"prompt": ""}, 400, "prompt", "invalid_value"),
    ("prompt empty list", "POST", C, {"prompt": []}, 400, "prompt", "invalid_value"),
    ("prompt mixed list", "POST", C, {"prompt": [[1], "a"]}, 400, "prompt", "invalid_value"),
    ("token id too large", "POST", C, {"prompt": [1, 2, 100000]}, 400, "prompt", "invalid_token_id"),
    ("token id negative", "POST", C, {"prompt": [[1], [-3]]}, 400, "prompt", "invalid_token_id"),
    ("token id 2**70", "POST", C, {"prompt": [1, 2 ** 70]}, 400, "prompt", "invalid_token_id"),
    ("ids over capacity", "POST", C, {"prompt": [5] * 300}, 400, "prompt", "context_length_exceeded"),
    ("900 KB prompt", "POST", C, {"prompt": "ab " * 300000}, 400, "prompt", "context_length_exceeded"),
    ("NUL and emoji", "POST", C, {"prompt": "\x00🦊\u202e", "max_tokens": 2}, 200, None, None),
    # unsupported fields
    ("logprobs 2 is answered", "POST", C, {"prompt": "x", "logprobs": 2, "max_tokens": 2}, 200, None, None),
    ("logprobs 6", "POST", C, {"prompt": "x", "logprobs": 6}, 400, "logprobs", "invalid_value"),
    ("logprobs negative", "POST", C, {"prompt": "x", "logprobs": -1}, 400, "logprobs", "invalid_value"),
    ("logprobs true", "POST", C, {"prompt": "x", "logprobs": True}, 400, "logprobs", "invalid_value"),
    ("echo", "POST", C, {"prompt": "x", "echo": True}, 400, "echo", "unsupported_parameter"),
    ("best_of", "POST", C, {"prompt": "x", "best_of": 3}, 400, "best_of", "unsupported_parameter"),
    ("suffix", "POST", C, {"prompt": "x", "suffix": "y"}, 400, "suffix", "unsupported_parameter"),
    ("presence_penalty", "POST", C, {"prompt": "x", "presence_penalty": 0.5}, 400, "presence_penalty",
     "unsupported_parameter"),
    ("logit_bias", "POST", C, {"prompt": "x", "logit_bias": {"5": 100}}, 400, "logit_bias",
     "unsupported_parameter"),
    ("unknown model", "POST", C, {"prompt": "x", "model": "gpt-9"}, 404, "model", "model_not_found"),
    # chat
    ("messages missing", "POST", CHAT, {"max_tokens": 2}, 400, "messages", "invalid_value"),
    ("messages empty", "POST", CHAT, {"messages": []}, 400, "messages", "invalid_value"),
    ("messages a string", "POST", CHAT, {"messages": "hi"}, 400, "messages", "invalid_value"),
    ("unknown role", "POST", CHAT, {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages.0.role",
     "invalid_value"),
    ("content a number", "POST", CHAT, {"messages": [{"role": "user", "content": 5}]}, 400, "messages.0.content",
     "invalid_value"),
    ("image part", "POST", CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url", "text": "x"}]}]},
     400, "messages.0.content", "invalid_value"),
    ("tools", "POST", CHAT, {"messages": USER, "tools": [{"type": "function"}]}, 400, "tools",
     "unsupported_parameter"),
    ("tool_choice auto", "POST", CHAT, {"messages": USER, "tool_choice": "auto"}, 400, "tool_choice",
     "unsupported_parameter"),
    ("chat logprobs is answered", "POST", CHAT, {"messages": USER, "logprobs": True, "top_logprobs": 20,
                                                 "max_tokens": 2}, 200, None, None),
    ("top_logprobs without logprobs", "POST", CHAT, {"messages": USER, "top_logprobs": 3}, 400, "top_logprobs",
     "invalid_value"),
    ("top_logprobs 21", "POST", CHAT, {"messages": USER, "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs",
     "invalid_value"),
    ("chat logprobs a number", "POST", CHAT, {"messages": USER, "logprobs": 1}, 400, "logprobs", "invalid_value"),
    ("max_completion_tokens 0", "POST", CHAT, {"messages": USER, "max_completion_tokens": 0}, 400,
     "max_completion_tokens", "invalid_value"),
    ("chat max_tokens over the context", "POST", CHAT, {"messages": USER, "max_tokens": 500}, 400, "max_tokens",
     "context_length_exceeded"),
    ("chat without max_tokens", "POST", CHAT, {"messages": USER}, 200, None, None),
    ("chat over capacity", "POST", CHAT, {"messages": [{"role": "user", "content": "z" * 400}]}, 400, "messages",
     "context_length_exceeded"),
    ("jinja in content", "POST", CHAT, {"messages": [{"role": "user", "content": "{{ 7*7 }}{% for %}"}],
                                       "max_tokens": 2}, 200, None, None),
    ("braces in name", "POST", CHAT, {"messages": [{"role": "user", "content": "x", "name": "{0}{x}"}],
                                      "max_tokens": 2}, 200, None, None),
    # routing
    ("embeddings on a decoder", "POST", EMB, {"input": "x"}, 400, "model", "wrong_model_kind"),
    ("GET on a POST route", "GET", C, None, 405, None, "method_not_allowed"),
    ("unknown path", "POST", "/v1/nothing", {}, 404, None, "not_found"),
    ("unknown model card", "GET", "/v1/models/gpt-9", None, 404, "model", "model_not_found"),
]


@pytest.fixture(scope="module")
def server(tiny_llama_artifact, serve_env):
    proc = ServeProcess(tiny_llama_artifact, args=ARGS, env={**serve_env, "TLALOC_API_KEY": API_KEY})
    yield proc
    proc.stop()


def _send(client, method, path, body):
    if body is None:
        return client.request(method, path, headers=AUTH)
    if isinstance(body, bytes):
        return client.request(method, path, content=body, headers={**AUTH, "Content-Type": "application/json"})
    return client.request(method, path, json=body, headers=AUTH)


def _idle(client, what):
    """Wait (bounded) until the engine has nothing running or waiting and 0 KV pages in use."""
    deadline = time.monotonic() + 20
    while True:
        health = client.get("/health").json()
        if health["kv_pages_used"] == 0 and health["running"] == 0 and health["waiting"] == 0:
            return health
        if time.monotonic() > deadline:
            raise AssertionError(f"after {what}: the engine is not idle: {health}")
        time.sleep(0.02)


def test_the_table_has_at_least_sixty_cases():
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


def test_hostile_table(server):
    failures = []
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for name, method, path, body, status, param, code in CASES:
            r = _send(client, method, path, body)
            got = (r.status_code, *((r.json()["error"].get("param"), r.json()["error"].get("code"))
                                    if r.status_code >= 400 else (None, None)))
            if got != (status, param, code):
                failures.append(f"{name}: got {got}, want {(status, param, code)}: {r.text[:200]}")
            good = client.post(C, json=GOOD, headers=AUTH)
            if good.status_code != 200:
                failures.append(f"after {name}: a good request got {good.status_code}: {good.text[:200]}")
            _idle(client, name)
        assert client.post(C, json=GOOD).status_code == 401                    # the key, from TLALOC_API_KEY
        assert client.post(C, json=GOOD, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert not failures, "\n".join(failures)


async def _stream(client, body):
    """A streamed completion: (text, finish_reason) or (None, status) when refused."""
    parts, reason = [], None
    async with client.stream("POST", C, json={**body, "stream": True}, headers=AUTH) as r:
        if r.status_code != 200:
            await r.aread()
            return None, r.status_code
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                assert "error" not in event, event
                parts.append(event["choices"][0]["text"])
                reason = event["choices"][0]["finish_reason"] or reason
    return "".join(parts), reason


def _greedy_texts(server, prompts, n):
    """The greedy completions of ``prompts`` (token-id lists), n tokens each, in one request."""
    r = httpx.post(f"{server.url}{C}", json={"prompt": prompts, "max_tokens": n, "temperature": 0}, headers=AUTH,
                   timeout=120)
    assert r.status_code == 200, r.text
    return [c["text"] for c in sorted(r.json()["choices"], key=lambda c: c["index"])]


def test_bad_values_next_to_running_streams_leave_them_untouched(server):
    # fault 3 (top_k 2**31 failed every running stream) and fault 4 (a big body froze the server)
    prompts = [[3 + i, 40 + i, 7] for i in range(6)]
    alone = _greedy_texts(server, prompts, 60)
    hostile = [{"prompt": "x", "top_k": 2147483648, "temperature": 1, "max_tokens": 3},
               {"prompt": "ab " * 100000}, {"prompt": "a" * (8 * 1024 * 1024)},
               {"prompt": ["a"] * 10000, "max_tokens": 1}, {"prompt": "a", "max_tokens": None}]

    async def run():
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            streams = [asyncio.create_task(_stream(client, {"prompt": p, "max_tokens": 60, "temperature": 0}))
                       for p in prompts]
            await asyncio.sleep(0.05)
            bad = await asyncio.gather(*(client.post(C, json=b, headers=AUTH) for b in hostile))
            health = await client.get("/health")
            return await asyncio.gather(*streams), [r.status_code for r in bad], health.status_code
    results, statuses, health = asyncio.run(asyncio.wait_for(run(), 240))
    assert statuses == [200, 400, 413, 400, 200] and health == 200
    assert [text for text, _ in results] == alone
    assert all(reason in ("length", "stop") for _, reason in results)
    _idle(httpx.Client(base_url=server.url, timeout=10), "the streams")


def test_a_disconnect_cancels_a_big_request(server):
    # fault 5: 64 prompts x 120 tokens, and the client leaves at once; the rest is cancelled, not run
    with httpx.Client(base_url=server.url, timeout=10) as client:
        before = _idle(client, "the previous test")
    body = {"prompt": [[5 + i, 9] for i in range(64)], "max_tokens": 120, "temperature": 0}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{server.url}{C}", json=body, headers=AUTH, timeout=0.3)
    with httpx.Client(base_url=server.url, timeout=10) as client:
        after = _idle(client, "the disconnect")
    ran = after["tokens_out"] - before["tokens_out"]
    print(f"\ndisconnect: {ran} of {64 * 120} tokens generated, "
          f"{after['requests_cancelled'] - before['requests_cancelled']} sequences cancelled")
    assert after["requests_cancelled"] > before["requests_cancelled"]
    assert ran < 64 * 120


def test_sixty_four_streams_with_ten_percent_malformed(server):
    malformed = [b'{"prompt": [1, 2', {"prompt": "x", "top_k": -1}, {"prompt": [1, 10 ** 6]},
                 {"prompt": "x", "stop": ["a"] * 9}, {"prompt": "x", "seed": -3}, {"prompt": "x", "n": 99},
                 {"prompt": [5] * 300}]
    plan = [malformed[i // 9] if i % 9 == 0 and i // 9 < len(malformed) else ([7 + i, 11, 13 + i % 7], 8)
            for i in range(64)]
    good = [item for item in plan if isinstance(item, tuple)]
    assert len(good) == 57
    want = dict(zip((tuple(p) for p, _ in good), _greedy_texts(server, [p for p, _ in good], 8)))

    async def bad(client, body):
        if isinstance(body, bytes):
            r = await client.post(C, content=body, headers={**AUTH, "Content-Type": "application/json"})
        else:
            r = await client.post(C, json={**body, "stream": True}, headers=AUTH)
        return r.status_code

    async def run():
        async with httpx.AsyncClient(base_url=server.url, timeout=120,
                                     limits=httpx.Limits(max_connections=64)) as client:
            return await asyncio.gather(*(
                _stream(client, {"prompt": item[0], "max_tokens": item[1], "temperature": 0})
                if isinstance(item, tuple) else bad(client, item) for item in plan))
    results = asyncio.run(asyncio.wait_for(run(), 240))
    for item, result in zip(plan, results):
        if isinstance(item, tuple):
            text, reason = result
            assert text == want[tuple(item[0])] and reason in ("length", "stop"), (item, result)
        else:
            assert result == 400, (item, result)
    _idle(httpx.Client(base_url=server.url, timeout=10), "the load")


@pytest.fixture(scope="module")
def small_queue_server(tiny_llama_artifact, serve_env):
    """A server that queues at most 2 sequences beyond its running batch of 16, so overload is cheap to reach."""
    proc = ServeProcess(tiny_llama_artifact, args=["--max-waiting", "2"], env={**serve_env, "TLALOC_API_KEY": API_KEY})
    yield proc
    proc.stop()


def test_twelve_hundred_requests_overload_gives_429s_and_no_5xx(small_queue_server):
    server = small_queue_server
    bodies = [json.dumps({"prompt": [3 + i % 200, 5], "max_tokens": 4, "temperature": 0}).encode()
              for i in range(1200)]
    answers = asyncio.run(asyncio.wait_for(post_many("127.0.0.1", server.port, C, bodies, AUTH, connections=200),
                                           300))
    statuses = [status for status, _ in answers]
    counts = {s: statuses.count(s) for s in set(statuses)}
    print(f"\n1,200-request overload: {counts}")
    assert set(counts) <= {200, 429}, counts
    assert counts.get(429, 0) > 0 and counts.get(200, 0) > 0, counts
    assert all(json.loads(body)["error"]["code"] == "queue_full" for status, body in answers if status == 429)
    with httpx.Client(base_url=server.url, timeout=10) as client:
        health = _idle(client, "the overload")
        assert client.post(C, json=GOOD, headers=AUTH).status_code == 200
    assert health["requests_failed"] == 0
