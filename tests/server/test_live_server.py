"""A real uvicorn on 127.0.0.1: streaming, disconnects, concurrency, the official openai client.

Only loopback traffic; every loop is bounded; the ``live`` fixture stops each server.
"""
import asyncio
import json
import time

import httpx
import numpy as np
import pytest

from .conftest import API_KEY, wait_for
from .fake_engine import FakeEngine


def _decode(engine, ids):
    return engine.tokenizer.decode(ids, skip_special_tokens=True)


async def _stream_completion(client, url, prompt, max_tokens):
    """Stream one completion; return (text, finish_reason, seconds to first chunk)."""
    start, first, parts, reason = time.perf_counter(), None, [], None
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True, "temperature": 0}
    async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line:
                continue
            assert line.startswith("data: ")
            if line == "data: [DONE]":
                break
            choice = json.loads(line[6:])["choices"][0]
            first = first or time.perf_counter() - start
            parts.append(choice["text"])
            reason = choice["finish_reason"] or reason
    return "".join(parts), reason, first


def test_sixteen_concurrent_streams_match_running_alone(live):
    engine = FakeEngine(max_batch=8, step_latency_s=0.002)      # 16 > max_batch: some wait
    server = live(engine)
    prompts = [[3 + i] * (1 + 3 * i) for i in range(16)]
    lengths = [8 + 7 * i for i in range(16)]

    async def run_all():
        async with httpx.AsyncClient(timeout=30) as client:
            return await asyncio.gather(*(_stream_completion(client, server.url, p, n)
                                          for p, n in zip(prompts, lengths)))

    results = asyncio.run(asyncio.wait_for(run_all(), 30))
    for prompt, n, (text, reason, _) in zip(prompts, lengths, results):
        alone = engine.expected_ids(prompt, n)
        assert text == _decode(engine, alone)
        assert reason == ("stop" if alone[-1] == 256 else "length")
    assert max(s["max_new_tokens"] for s in engine.submitted.values()) == lengths[-1]
    health = httpx.get(f"{server.url}/health", timeout=5).json()
    assert health["kv_pages_used"] == 0 and health["running"] == 0 and health["waiting"] == 0


def test_client_disconnect_mid_stream_cancels_and_frees_pages(live):
    engine = FakeEngine(step_latency_s=0.01)
    engine.eos_token_ids = ()                                  # runs the full 200 tokens (2 s)
    server = live(engine)
    body = {"prompt": "go on", "max_tokens": 200, "stream": True}
    with httpx.Client(timeout=10) as client:
        with client.stream("POST", f"{server.url}/v1/completions", json=body) as r:
            lines = r.iter_lines()
            got = [next(lines) for _ in range(6)]               # a few chunks, then hang up
            assert any(line.startswith("data: {") for line in got)
    rid = next(iter(engine.submitted))
    wait_for(lambda: rid in engine.cancelled, what="the disconnect to cancel the request")
    wait_for(lambda: httpx.get(f"{server.url}/health", timeout=5).json()["kv_pages_used"] == 0,
             what="the pages to be freed")
    assert engine.stats()["tokens_out"] < 200
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "again", "max_tokens": 3}, timeout=10)
    assert r.status_code == 200


def test_client_disconnect_while_waiting_for_a_whole_answer_cancels(live):
    engine = FakeEngine(step_latency_s=0.01)
    engine.eos_token_ids = ()                                  # runs the full 200 tokens (2 s)
    server = live(engine)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/v1/completions", json={"prompt": "slow", "max_tokens": 200}, timeout=0.3)
    rid = next(iter(engine.submitted))
    wait_for(lambda: rid in engine.cancelled, what="the non-streamed request to be cancelled")


def test_malformed_requests_amid_good_streams(live):
    engine = FakeEngine(step_latency_s=0.001)
    server = live(engine)

    async def bad(client, i):
        r = await client.post(f"{server.url}/v1/completions", content=b'{"prompt": [1, 2' if i % 2 else b"[]",
                              headers={"content-type": "application/json"})
        return r.status_code

    async def run():
        async with httpx.AsyncClient(timeout=30) as client:
            good = [_stream_completion(client, server.url, "ok", 12) for _ in range(6)]
            return await asyncio.gather(*good, *(bad(client, i) for i in range(6)))

    results = asyncio.run(asyncio.wait_for(run(), 30))
    assert all(r[1] in ("stop", "length") for r in results[:6])
    assert results[6:] == [400] * 6


def test_openai_client_against_the_server(live):
    openai = pytest.importorskip("openai")
    engine = FakeEngine()
    server = live(engine, api_key=API_KEY)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=10)
    ids = engine.tokenizer.encode("Hello").ids
    completion = client.completions.create(model="fake-tiny", prompt="Hello", max_tokens=20, temperature=0)
    assert completion.choices[0].text == _decode(engine, engine.expected_ids(ids, 20))
    stream = client.completions.create(model="fake-tiny", prompt="Hello", max_tokens=20, temperature=0,
                                       stream=True)
    assert "".join(c.choices[0].text for c in stream) == completion.choices[0].text
    chat = client.chat.completions.create(model="fake-tiny", messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=15, temperature=0.7, seed=11)
    streamed = client.chat.completions.create(model="fake-tiny", messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=15, temperature=0.7, seed=11, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in streamed)
    assert text == chat.choices[0].message.content and chat.choices[0].finish_reason in ("stop", "length")
    assert [m.id for m in client.models.list()] == ["fake-tiny"]
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="fake-tiny", prompt="x" * 300, max_tokens=5)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0).models.list()

    encoder = FakeEngine(kind="encoder", model_name="fake-encoder")
    server = live(encoder)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=10)
    result = client.embeddings.create(model="fake-encoder", input=["one", "two"])     # base64 on the wire
    got = np.array([d.embedding for d in result.data], dtype=np.float32)
    np.testing.assert_array_equal(got, FakeEngine(kind="encoder").embed(["one", "two"]))


def test_load_64_clients_some_malformed_some_hanging_up(live):
    """64 concurrent clients, 10% malformed and 10% disconnecting mid-stream; bounded to 60 s."""
    engine = FakeEngine(max_batch=16, step_latency_s=0.002, kv_pages_total=4096)
    engine.eos_token_ids = ()
    server = live(engine)

    async def client_task(client, i):
        if i % 10 == 3:                                       # malformed
            r = await client.post(f"{server.url}/v1/chat/completions", content=b'{"messages": [',
                                  headers={"content-type": "application/json"})
            return ("malformed", r.status_code)
        body = {"prompt": [5 + i % 50] * (1 + i % 20), "max_tokens": 30 + i, "stream": True}
        async with client.stream("POST", f"{server.url}/v1/completions", json=body) as r:
            lines, last = 0, None
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    lines, last = lines + 1, line
                if i % 10 == 7 and lines == 3:                # hang up mid-stream
                    return ("gone", r.status_code)
            return ("done", r.status_code, last)

    async def run():
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as client:
            return await asyncio.gather(*(client_task(client, i) for i in range(64)))

    results = asyncio.run(asyncio.wait_for(run(), 60))     # the bound; ~2 s on an idle machine
    kinds = [r[0] for r in results]
    assert kinds.count("malformed") == 7 and kinds.count("gone") == 6
    assert all(r[1] == 400 for r in results if r[0] == "malformed")
    assert all(r[1:] == (200, "data: [DONE]") for r in results if r[0] == "done")
    wait_for(lambda: httpx.get(f"{server.url}/health", timeout=5).json()["kv_pages_used"] == 0,
             timeout=30, what="every page to be freed")
    assert len(engine.cancelled) == 6
