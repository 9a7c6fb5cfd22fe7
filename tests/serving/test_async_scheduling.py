"""Async scheduling (``Engine(async_scheduling=True)``, the default): the next decode call starts on
the running call's tokens while they are still on the device.

Oracle: the same engine with ``async_scheduling=False``, which waits for every call, and the
float reference (``oracle``). Every test checks that calls really were started in flight
(a test that never overlapped a call would pass vacuously).
"""
import numpy as np
import pytest

from .fixtures import PROMPTS

MIXED = [PROMPTS[1], PROMPTS[2], [9, 8, 7, 6, 5]]


def _drain(eng, limit=500):
    out, finished, errors = {}, {}, {}
    for _ in range(limit):
        if not eng.has_work():
            break
        for ev in eng.step():
            out.setdefault(ev.request_id, []).extend(ev.token_ids)
            if ev.finished:
                finished[ev.request_id], errors[ev.request_id] = ev.finish_reason, ev.error
    assert not eng.has_work(), f"the engine still has work after {limit} steps"
    return out, finished, errors


def _count_continued(eng, monkeypatch) -> list:
    """Patch ``eng`` to count the decode calls started while the one before them was in flight."""
    n, real = [0], eng._continue

    def counting(prev, results):
        started = real(prev, results)
        n[0] += bool(started)
        return started
    monkeypatch.setattr(eng, "_continue", counting)
    return n


def _both(engine, **sampling):
    """(async engine, waiting engine) over the same artifact."""
    return engine("llama"), engine("llama", engine_options={"async_scheduling": False})


def test_greedy_and_sampled_tokens_equal_the_waiting_engine(engine, oracle, monkeypatch):
    fast, slow = _both(engine)
    assert fast.async_scheduling and not slow.async_scheduling
    continued = _count_continued(fast, monkeypatch)
    greedy = [r.token_ids for r in fast.generate(MIXED, max_new_tokens=12, stop=[])]
    assert greedy == [r.token_ids for r in slow.generate(MIXED, max_new_tokens=12, stop=[])]
    assert [g[:8] for g in greedy[:2]] == [o[:8] for o in oracle("llama")[1:3]]
    assert continued[0] >= 8                          # 3 rows in lockstep: most decode calls overlapped
    kw = dict(max_new_tokens=12, temperature=0.9, top_k=20, seed=4)
    sampled = [r.token_ids for r in fast.generate(MIXED, **kw)]
    assert sampled == [r.token_ids for r in slow.generate(MIXED, **kw)]
    assert sampled != greedy                          # control: the sampling settings took effect
    assert fast.stats()["kv_pages_used"] == 0 and not fast.has_work()


def test_a_stop_id_mid_run_drops_the_token_computed_after_it(engine, monkeypatch):
    fast, slow = _both(engine)
    full = [r.token_ids for r in slow.generate(MIXED, max_new_tokens=12, stop=[])]
    stop = full[0][4]                                 # row 0 stops at its 5th token; the others run on
    continued = _count_continued(fast, monkeypatch)
    want = [r.token_ids for r in slow.generate(MIXED, max_new_tokens=12, stop=[stop])]
    got = fast.generate(MIXED, max_new_tokens=12, stop=[stop])
    assert [r.token_ids for r in got] == want and got[0].finish_reason == "stop"
    assert want[0] == full[0][:full[0].index(stop) + 1]
    assert continued[0] > 0
    assert fast.stats()["kv_pages_used"] == 0 and not fast.has_work()


def test_streaming_with_a_cancel_and_a_late_request_equals_the_waiting_engine(engine, monkeypatch):
    runs = []
    for eng in _both(engine):
        continued = _count_continued(eng, monkeypatch) if eng.async_scheduling else [None]
        a = eng.submit(PROMPTS[1], max_new_tokens=16)
        b = eng.submit(PROMPTS[2], max_new_tokens=16)
        out = {}
        for step in range(200):
            if not eng.has_work():
                break
            for ev in eng.step():
                out.setdefault(ev.request_id, []).extend(ev.token_ids)
            if sum(len(v) for v in out.values()) >= 8 and "late" not in out:
                eng.cancel(b)                         # while a call for it may be in flight
                eng.submit(PROMPTS[0], max_new_tokens=6, request_id="late")
                out["late"] = []
        runs.append(({k: v for k, v in out.items() if k != b}, len(out.get(b, [])), continued[0]))
        assert eng.stats()["kv_pages_used"] == 0
    (fast, fast_b, n), (slow, slow_b, _) = runs
    assert fast == slow and len(fast["late"]) == 6 and len(fast[list(fast)[0]]) == 16
    assert fast_b <= slow_b + 1 and n > 0            # the cancelled request: no tokens after its cancel's step


@pytest.mark.parametrize("persistent", [False, True])
def test_a_call_that_fails_in_flight_is_rerun_waiting(engine, oracle, monkeypatch, persistent):
    """A failure reported when an in-flight call is waited for (not when it is started): nothing of
    it is applied and the step re-runs its rows, waiting, with the waiting engine's rules (a row at
    fault fails alone: tests/serving/test_faults.py). Here only in-flight calls fail, every time
    from the third on when ``persistent``: the re-runs carry the request to its end, unharmed."""
    eng = engine("llama")
    continued = _count_continued(eng, monkeypatch)
    real, seen, applying = eng.executor.collect, {"decode": 0}, [False]
    real_apply = eng._apply

    def apply(batch, results):                        # waits for an in-flight call
        applying[0] = True
        try:
            return real_apply(batch, results)
        finally:
            applying[0] = False
    monkeypatch.setattr(eng, "_apply", apply)

    def flaky(results):
        if applying[0]:
            seen["decode"] += 1
            if seen["decode"] == 3 or (persistent and seen["decode"] > 3):
                real(results)
                raise RuntimeError("injected fault when the call was waited for")
        return real(results)
    monkeypatch.setattr(eng.executor, "collect", flaky)
    rid = eng.submit(PROMPTS[1], max_new_tokens=10)
    out, finished, errors = _drain(eng)
    assert continued[0] > 0 and seen["decode"] >= (4 if persistent else 3)
    assert finished[rid] == "length", errors[rid]
    assert out[rid][:8] == oracle("llama")[1][:8]                         # re-run, nothing lost
    assert eng.stats()["kv_pages_used"] == 0


def test_lost_pools_in_flight_fail_the_running_requests_and_serving_resumes(engine, oracle, monkeypatch):
    eng = engine("llama")
    continued = _count_continued(eng, monkeypatch)
    real, armed = eng.executor.collect, {"on": True}

    def lose(results):
        if armed["on"] and continued[0] >= 2:
            armed["on"] = False
            for pool in eng.executor.pools.values():
                pool.delete()
            raise RuntimeError("execution failed after donation")
        return real(results)
    monkeypatch.setattr(eng.executor, "collect", lose)
    a, b = eng.submit(PROMPTS[1], max_new_tokens=12), eng.submit(PROMPTS[2], max_new_tokens=12)
    _, finished, errors = _drain(eng)
    assert finished == {a: "error", b: "error"} and "KV cache was lost" in errors[a]
    assert eng.stats()["kv_pages_used"] == 0
    [r] = eng.generate([PROMPTS[1]], max_new_tokens=8, stop=[])             # fresh pools: serving again
    assert r.token_ids == oracle("llama")[1][:8]


def test_logprobs_in_flight_equal_the_waiting_engine(engine, monkeypatch):
    got = []
    for eng in _both(engine):
        rid = eng.submit(PROMPTS[2], max_new_tokens=10, logprobs=3)
        lps = []
        while eng.has_work():
            for ev in eng.step():
                lps.extend(ev.logprobs or [])
        got.append(lps)
    assert len(got[0]) == 10 and got[0] == got[1]


def _sampled_run(eng, prompts, **kw):
    ids = [eng.submit(p, request_id=f"r{k}", seed=k + 7, **kw) for k, p in enumerate(prompts)]
    out, finished, errors = _drain(eng)
    assert eng.stats()["kv_pages_used"] == 0
    return [out[i] for i in ids], [finished[i] for i in ids]


@pytest.mark.parametrize("where", ["collect", "dispatch"])
def test_seeded_samples_are_the_waiting_engines_after_a_fault_in_flight(engine, monkeypatch, where):
    """A call that fails in flight (``collect``), or the next call failing to start (``dispatch``
    while continuing), is re-run with the uniforms its rows drew: the draws of the calls dropped
    unapplied are undone, so seeded sampling gives the tokens of the run without the fault (the
    waiting engine re-runs a failed call with the same uniforms too)."""
    fast, slow = _both(engine)
    kw = dict(max_new_tokens=10, temperature=1.0, top_k=50)
    want = _sampled_run(slow, MIXED[:2], **kw)
    assert _sampled_run(fast, MIXED[:2], **kw) == want
    continued = _count_continued(fast, monkeypatch)
    inside, seen = {"_continue": False, "_apply": False}, [0]
    for name in inside:
        def mark(*args, _name=name, _real=getattr(fast, name)):
            inside[_name] = True
            try:
                return _real(*args)
            finally:
                inside[_name] = False
        monkeypatch.setattr(fast, name, mark)
    real = getattr(fast.executor, where)

    def flaky(*args, **kwargs):
        if inside["_continue" if where == "dispatch" else "_apply"]:
            seen[0] += 1
            if seen[0] == 3:
                if where == "collect":
                    real(*args, **kwargs)
                raise RuntimeError(f"injected fault in {where}")
        return real(*args, **kwargs)
    monkeypatch.setattr(fast.executor, where, flaky)
    got = _sampled_run(fast, MIXED[:2], **kw)
    assert seen[0] >= 3 and continued[0] > 0
    assert got == want


def _applied_calls(eng, monkeypatch) -> list:
    """Patch ``eng`` to record every call it applies: (mode, batch, context, the rows of live requests)."""
    calls, real = [], eng.scheduler.update

    def update(batch, sampled):
        live = set(map(id, eng.scheduler.running))
        calls.append((batch.mode, batch.size, batch.context,
                      [(row.request.id, row.start) for row in batch.rows if id(row.request) in live]))
        return real(batch, sampled)
    monkeypatch.setattr(eng.scheduler, "update", update)
    return calls


@pytest.mark.parametrize("how", ["cancel", "stop"])
def test_an_ended_request_leaves_the_others_on_the_waiting_engines_calls(engine, monkeypatch, how):
    """Request X (row 0) ends mid-run, by a cancel after its 3rd token or by a stop id at its 9th,
    while the next call, started with X's row, is in flight. The waiting engine runs the other
    row alone (batch bucket 1; after the stop also context 16, X's row needing 64), so the call
    started with X is dropped and its live rows re-run: every call applied is the waiting
    engine's, and with it the other request's tokens and log-probabilities, bit for bit (calls
    of other buckets differ in the last bits, in the CPU-kernel programs)."""
    fast, slow = _both(engine)
    x_prompt, a_prompt = PROMPTS[1], PROMPTS[0]
    [full] = [r.token_ids for r in slow.generate([x_prompt], max_new_tokens=12, stop=[])]
    assert [r.token_ids for r in fast.generate([x_prompt], max_new_tokens=12, stop=[])] == [full]   # same cache
    k = next(k for k in range(8, 12) if full[k] not in full[:k])     # X's end is then past context 16
    got = []
    for eng in (fast, slow):
        continued = _count_continued(eng, monkeypatch) if eng.async_scheduling else [1]
        calls = _applied_calls(eng, monkeypatch)
        x = eng.submit(x_prompt, max_new_tokens=12, stop_ids=[full[k]] if how == "stop" else [], request_id="X")
        a = eng.submit(a_prompt, max_new_tokens=14, logprobs=3, temperature=0.8, seed=3, request_id="A")
        out, lps, reasons = {}, [], {}
        while eng.has_work():
            for ev in eng.step():
                assert ev.request_id not in reasons, f"an event after {ev.request_id} ended: {ev}"
                out.setdefault(ev.request_id, []).extend(ev.token_ids)
                if ev.request_id == a:
                    lps.extend(ev.logprobs or [])
                if ev.finished:
                    reasons[ev.request_id] = ev.finish_reason
            if how == "cancel" and len(out.get(x, [])) >= 3 and x not in reasons:
                eng.cancel(x)
        got.append((out, lps, reasons, [c for c in calls if c[3]]))
        assert eng.stats()["kv_pages_used"] == 0 and continued[0] > 0
    assert got[0][2] == got[1][2] == {"X": "cancelled" if how == "cancel" else "stop", "A": "length"}
    assert got[0][3] == got[1][3]                     # the calls applied: buckets and rows
    assert got[0][0] == got[1][0] and len(got[0][1]) == 14 and got[0][1] == got[1][1]
    if how == "stop":
        assert got[0][0]["X"] == full[:k + 1]
