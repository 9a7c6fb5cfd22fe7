"""The scheduler through the Engine: chunked prefill, batching, padding, donation, continuous batching,
cancellation, back-pressure, prefix caching, stop ids, refusals."""
import numpy as np
import pytest

from tlaloc.serving import CapacityError, QueueFullError
from tlaloc.serving.errors import ArgumentError

from .fixtures import NEW_TOKENS, PROMPTS

LONG = [int(x) for x in np.random.default_rng(5).integers(3, 250, 40)]   # 40 tokens: three 16-token chunks


def _greedy(eng, prompts, n=NEW_TOKENS):
    return [r.token_ids for r in eng.generate(prompts, max_new_tokens=n, stop=[])]


def _drain(eng, out=None):
    out = {} if out is None else out
    finished = {}
    while eng.has_work():
        for ev in eng.step():
            out.setdefault(ev.request_id, []).extend(ev.token_ids)
            if ev.finished:
                finished[ev.request_id] = ev.finish_reason
    return out, finished


def test_chunked_prefill_equals_whole_prefill(engine, oracle):
    whole = _greedy(engine("llama"), PROMPTS + [LONG], n=16)
    for chunk in (4, 7):
        eng = engine("llama", engine_options={"prefill_chunk": chunk})
        assert _greedy(eng, PROMPTS + [LONG], n=16) == whole
        calls = sum(n for (mode, _, _), n in eng.scheduler.counters_by_bucket.items() if mode == "prefill")
        assert calls == -(-len(LONG) // chunk)                                 # LONG took that many steps
    assert [w[:16] for w in whole[:3]] == [o[:16] for o in oracle("llama")]


def test_batched_prefill_of_four_prompts_equals_each_alone(engine):
    prompts = [PROMPTS[1], PROMPTS[2], [9, 8, 7, 6, 5], [200, 3]]
    alone = [_greedy(engine("llama"), [p], n=8)[0] for p in prompts]         # fresh engines: no prefix cache
    eng = engine("llama")
    assert _greedy(eng, prompts, n=8) == alone
    assert eng.scheduler.counters_by_bucket[("prefill", 4, 16)] == 1           # one prefill step for all four


def test_decode_rows_unchanged_by_padding_to_a_larger_batch_bucket(engine, monkeypatch):
    eng = engine("llama")
    alone = _greedy(eng, [PROMPTS[1]])[0]
    monkeypatch.setattr(eng.scheduler, "batch", [4])                            # every step padded to batch 4
    padded = _greedy(eng, [PROMPTS[1]])[0]
    assert padded == alone
    assert eng.scheduler.counters_by_bucket[("decode", 4, 64)] > 0


def test_kv_pools_are_donated_in_place(engine):
    eng = engine("llama")
    pointers = eng.kv_pool_pointers()
    assert len(pointers) == 2 and len(set(pointers)) == 2                       # k, v: every layer's pages
    rid = eng.submit(PROMPTS[2], max_new_tokens=20)
    steps = 0
    while eng.has_work():
        eng.step()
        steps += 1
        assert eng.kv_pool_pointers() == pointers                              # same buffers, every step
    assert steps >= 20 and rid
    for pool in eng.executor.pools.values():                                   # (L, P, BS, K, E)
        arr = np.asarray(pool)
        assert arr.shape[0] == 2 and not arr[:, 0].any()                        # each layer's page 0: scratch
        assert all(arr[layer, 1:].any() for layer in range(2))                  # each layer's own pages written


def test_requests_joining_at_different_steps_equal_each_alone(engine, oracle):
    eng = engine("llama")
    want = oracle("llama")
    a = eng.submit(PROMPTS[2], max_new_tokens=NEW_TOKENS)
    out = {}
    for _ in range(3):
        for ev in eng.step():
            out.setdefault(ev.request_id, []).extend(ev.token_ids)
    b = eng.submit(PROMPTS[0], max_new_tokens=NEW_TOKENS)
    for _ in range(5):
        for ev in eng.step():
            out.setdefault(ev.request_id, []).extend(ev.token_ids)
    assert eng.stats()["running"] == 2
    c = eng.submit(PROMPTS[1], max_new_tokens=NEW_TOKENS)
    out, finished = _drain(eng, out)
    assert [out[a], out[b], out[c]] == [want[2], want[0], want[1]]
    assert set(finished.values()) == {"length"}
    assert eng.stats()["kv_pages_used"] == 0


def test_cancellation_frees_pages(engine):
    eng = engine("llama")
    rid = eng.submit(LONG, max_new_tokens=20)
    eng.submit(PROMPTS[1], max_new_tokens=20)
    for _ in range(4):
        eng.step()
    used = eng.stats()["kv_pages_used"]
    assert used >= 6
    assert eng.cancel(rid) and not eng.cancel("no-such-request")
    assert eng.stats()["kv_pages_used"] < used
    events = eng.step()
    assert any(e.request_id == rid and e.finished and e.finish_reason == "cancelled" for e in events)
    out, _ = _drain(eng)
    assert eng.stats()["kv_pages_used"] == 0 and eng.stats()["running"] == 0
    queued = eng.submit(PROMPTS[0], max_new_tokens=4)
    assert eng.cancel(queued)                                                   # cancelled while waiting
    assert eng.step()[0].finish_reason == "cancelled"


def test_back_pressure_queues_then_refuses(engine, oracle):
    eng = engine("llama", engine_options={"max_waiting": 3})
    total = eng.stats()["kv_pages_total"]                                       # 32 pages of 8 tokens
    ids = [eng.submit(PROMPTS[2], max_new_tokens=40) for _ in range(3)]         # 8 pages each
    out = {}
    for ev in eng.step():
        out.setdefault(ev.request_id, []).extend(ev.token_ids)
    assert eng.stats()["running"] == 3
    more = [eng.submit(PROMPTS[1], max_new_tokens=55) for _ in range(3)]        # 8 pages each: one fits now
    with pytest.raises(QueueFullError, match="queue is full"):
        eng.submit(PROMPTS[0], max_new_tokens=4)
    for ev in eng.step():
        out.setdefault(ev.request_id, []).extend(ev.token_ids)
    stats = eng.stats()
    assert stats["running"] == 4 and stats["waiting"] == 2 and stats["kv_pages_used"] <= total
    out, finished = _drain(eng, out)
    assert all(out[i][:NEW_TOKENS] == oracle("llama")[2] for i in ids)
    assert len({tuple(out[i]) for i in more}) == 1 and len(finished) == 6
    assert eng.stats()["kv_pages_used"] == 0


def test_over_capacity_requests_are_refused_with_a_message(engine):
    eng = engine("llama")
    with pytest.raises(CapacityError, match=r"prompt \(60 tokens\) \+ max_new_tokens \(10\) = 70 is over the "
                                            r"artifact's largest context 64"):
        eng.submit(list(range(3, 63)), max_new_tokens=10)
    with pytest.raises(CapacityError, match="largest context 64"):
        eng.generate([list(range(3, 70))], max_new_tokens=1)
    with pytest.raises(ArgumentError, match="token id 256 is out of range"):
        eng.submit([5, 256], max_new_tokens=1)
    with pytest.raises(ArgumentError, match="prompt is empty"):
        eng.submit([], max_new_tokens=1)
    with pytest.raises(ArgumentError, match="tokenize text first"):
        eng.submit("hello", max_new_tokens=1)
    with pytest.raises(ArgumentError, match="top_p must be in"):
        eng.submit([5], max_new_tokens=1, temperature=1.0, top_p=0.0)
    assert not eng.has_work()


def test_prefix_cache_shares_prompt_pages(engine):
    eng = engine("llama")
    shared = LONG[:32]                                                         # 4 full pages
    first = _greedy(eng, [shared + [5, 6]], n=8)[0]
    hits = eng.stats()["prefix_cache_hit_tokens"]
    assert _greedy(eng, [shared + [5, 6]], n=8)[0] == first                   # recomputed from cached pages
    assert eng.stats()["prefix_cache_hit_tokens"] == hits + 32
    a = eng.submit(shared + [7], max_new_tokens=8)
    b = eng.submit(shared + [9, 9], max_new_tokens=8)
    out = {}
    for ev in eng.step():
        out.setdefault(ev.request_id, []).extend(ev.token_ids)
    assert eng.stats()["kv_pages_used"] == 4 + 2 * 1                           # 4 shared pages + one own page each
    assert eng.scheduler.pages.refcount(eng.scheduler.running[0].pages[0]) == 2
    out, _ = _drain(eng, out)
    cold = engine("llama")                                                      # a fresh engine: no cache
    assert out[a] == _greedy(cold, [shared + [7]], n=8)[0]
    assert out[b] == _greedy(cold, [shared + [9, 9]], n=8)[0]
    assert eng.stats()["kv_pages_used"] == 0


def test_stop_ids_end_a_request(engine, oracle):
    eng = engine("llama")
    full = oracle("llama")[1]
    stop = full[5]
    first = full.index(stop)
    rid = eng.submit(PROMPTS[1], max_new_tokens=NEW_TOKENS, stop_ids=[stop])
    out, finished = _drain(eng)
    assert out[rid] == full[:first + 1] and finished[rid] == "stop"
    [r] = eng.generate([PROMPTS[1]], max_new_tokens=NEW_TOKENS, stop=[stop])
    assert r.token_ids == full[:first + 1] and r.finish_reason == "stop"


def test_a_failed_program_ends_its_requests_and_the_engine_keeps_serving(engine, oracle, monkeypatch):
    eng = engine("llama", engine_options={"async_scheduling": False})   # every call waited for: the 3rd fails
    real = eng.executor.dispatch
    calls = {"n": 0}

    def flaky(mode, B, C, arrays, T=None):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("device fell over")
        return real(mode, B, C, arrays, T)
    monkeypatch.setattr(eng.executor, "dispatch", flaky)
    rid = eng.submit(PROMPTS[1], max_new_tokens=8)
    out, finished = _drain(eng)
    assert finished[rid] == "error" and eng.stats()["kv_pages_used"] == 0
    assert eng.stats()["requests_failed"] == 1

    def lose_the_pools(mode, B, C, arrays, T=None):                         # donated, then the call failed
        for pool in eng.executor.pools.values():
            pool.delete()
        raise RuntimeError("execution failed after donation")
    monkeypatch.setattr(eng.executor, "dispatch", lose_the_pools)
    a = eng.submit(PROMPTS[0], max_new_tokens=4)
    events = eng.step()
    assert [(e.request_id, e.finish_reason) for e in events] == [(a, "error")]
    assert "device fell over" not in events[0].error
    monkeypatch.setattr(eng.executor, "dispatch", real)
    assert _greedy(eng, [PROMPTS[1]])[0] == oracle("llama")[1]              # fresh pools: serving again
    assert eng.stats()["kv_pages_used"] == 0
