"""Fault injection in the engine: one request's fault fails only that request, and no page leaks.

Oracle: each surviving request's ids equal the ids it gets run alone on a fresh engine
(greedy), so a fault that disturbed another row's KV or sampling would show.
"""
import asyncio

import numpy as np
import pytest

from tlaloc.serving.errors import ArgumentError

from .fixtures import PROMPTS

POISON = 251                     # a token id no other prompt here holds: the injected fault keys on it
LONG = [int(x) for x in np.random.default_rng(5).integers(3, 250, 40)]      # three 16-token prefill chunks


def _drain(eng, first=()):
    out, finished, errors = {}, {}, {}
    for step in range(500):                                # bounded: a hang fails instead of spinning
        if not eng.has_work() and step:
            break
        for ev in (first if step == 0 else eng.step()):
            out.setdefault(ev.request_id, []).extend(ev.token_ids)
            if ev.finished:
                finished[ev.request_id], errors[ev.request_id] = ev.finish_reason, ev.error
    assert not eng.has_work(), "the engine still has work after 500 steps"
    return out, finished, errors


def _alone(engine, prompt, n=8, **sampling):
    eng = engine("llama")
    [r] = eng.generate([prompt], max_new_tokens=n, stop=[], **sampling)
    return r.token_ids


def _poisoned(real, error=RuntimeError("injected device fault")):
    """A runner that raises whenever a row of the call holds the POISON token."""
    def runner(mode, B, C, arrays, T=None):
        if (np.asarray(arrays["token_ids"]) == POISON).any():
            raise error
        return real(mode, B, C, arrays, T)
    return runner


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_a_program_fault_in_one_row_fails_only_that_request(engine, monkeypatch, mode):
    eng = engine("llama")
    good = [PROMPTS[1], PROMPTS[2], [7, 8, 9]]
    want = [_alone(engine, p) for p in good]
    if mode == "prefill":
        bad_prompt = [5, POISON, 6]
    else:                       # the poison is generated: make it the stop-free decode input by forcing it
        bad_prompt = [5, 6, 7]
    monkeypatch.setattr(eng.executor, "dispatch", _poisoned(eng.executor.dispatch))
    ids = [eng.submit(p, max_new_tokens=8) for p in good]
    bad = eng.submit(bad_prompt, max_new_tokens=8)
    first = []
    if mode == "decode":
        first = eng.step()                                  # all four prefilled together
        [req] = [r for r in eng.scheduler.running if r.id == bad]
        req.generated[-1] = POISON                          # its next decode input is the poison
    out, finished, errors = _drain(eng, first)
    assert finished[bad] == "error" and "injected device fault" in errors[bad]
    for rid, w in zip(ids, want):
        assert finished[rid] == "length" and out[rid] == w
    stats = eng.stats()
    assert stats["kv_pages_used"] == 0
    assert stats["requests_failed"] == 1 and stats["requests_cancelled"] == 0


def test_a_device_error_that_loses_the_kv_pools_fails_the_running_requests_and_serving_resumes(engine, monkeypatch):
    eng = engine("llama")
    real = eng.executor.dispatch

    def lose_pools(mode, B, C, arrays, T=None):
        if (np.asarray(arrays["token_ids"]) == POISON).any():
            for pool in eng.executor.pools.values():
                pool.delete()
            raise RuntimeError("execution failed after donation")
        return real(mode, B, C, arrays, T)
    monkeypatch.setattr(eng.executor, "dispatch", lose_pools)
    eng.submit(PROMPTS[1], max_new_tokens=4)
    eng.submit([POISON, 3], max_new_tokens=4)
    _, finished, _ = _drain(eng)
    assert set(finished.values()) == {"error"}
    assert eng.stats()["kv_pages_used"] == 0 and eng.stats()["requests_failed"] == 2
    rid = eng.submit(PROMPTS[2], max_new_tokens=8)                 # fresh pools: serving again
    out, _, _ = _drain(eng)
    assert out[rid] == _alone(engine, PROMPTS[2])


def test_a_cancel_mid_prefill_frees_its_pages_and_the_others_finish(engine):
    eng = engine("llama")
    want = _alone(engine, PROMPTS[2])
    long_id = eng.submit(LONG, max_new_tokens=8)
    other = eng.submit(PROMPTS[2], max_new_tokens=8)
    eng.step()                                                     # LONG has one chunk of three in
    [req] = [r for r in eng.scheduler.running if r.id == long_id]
    assert 0 < req.computed < len(LONG) and req.pages
    assert eng.cancel(long_id)
    out, finished, _ = _drain(eng)
    assert finished[long_id] == "cancelled" and finished[other] == "length"
    assert out[other] == want
    assert eng.stats()["kv_pages_used"] == 0 and eng.stats()["requests_cancelled"] == 1


def test_a_huge_top_k_is_clamped_at_admission_and_others_are_untouched(engine):
    eng = engine("llama")
    sampled = _alone(engine, PROMPTS[1], temperature=1.0, seed=3)
    greedy = _alone(engine, PROMPTS[2])
    a = eng.submit(PROMPTS[1], max_new_tokens=8, temperature=1.0, top_k=2 ** 31, seed=(3, 0))
    b = eng.submit(PROMPTS[2], max_new_tokens=8)
    out, finished, _ = _drain(eng)
    assert finished == {a: "length", b: "length"}
    assert out[a] == sampled                   # top_k >= vocabulary samples exactly as no top_k
    assert out[b] == greedy
    other = _alone(engine, PROMPTS[1], temperature=1.0, seed=4)   # negative control: the seed matters
    assert other != sampled


@pytest.mark.parametrize("kwargs,name", [
    ({"seed": -1}, "seed"), ({"seed": (1, -2)}, "seed"), ({"top_k": -1}, "top_k"),
    ({"temperature": 1e300}, "temperature"), ({"top_p": float("nan")}, "top_p"),
    ({"max_new_tokens": 2 ** 40}, "max_new_tokens"),
])
def test_out_of_range_values_are_refused_at_submit_naming_the_argument(engine, kwargs, name):
    eng = engine("llama")
    with pytest.raises((ArgumentError, ValueError), match=name):
        eng.submit(PROMPTS[1], **{"max_new_tokens": 4, **kwargs})
    assert not eng.has_work()


def test_a_step_that_raises_fails_its_streams_as_failures_and_serving_goes_on(engine, monkeypatch):
    from tlaloc.serving.runtime.engine_thread import EngineRunner
    eng = engine("llama")
    want = _alone(engine, PROMPTS[2], n=4)
    real_step, calls = eng.scheduler.begin_step, {"n": 0}

    def broken_once():
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("scheduler bug")
        return real_step()
    monkeypatch.setattr(eng.scheduler, "begin_step", broken_once)
    runner = EngineRunner(eng)

    async def finish(sink):
        tokens = []
        while True:
            event = await asyncio.wait_for(sink.get(), 120)
            tokens += event.token_ids
            if event.finished:
                return tokens, event

    async def run():
        runner.start()
        try:
            first = asyncio.Queue()
            await runner.submit(PROMPTS[1], first, request_id="a", max_new_tokens=8)
            _, failed = await finish(first)
            second = asyncio.Queue()
            await runner.submit(PROMPTS[2], second, request_id="b", max_new_tokens=4)
            return failed, await finish(second)
        finally:
            runner.stop()
    failed, (tokens, done) = asyncio.run(run())
    assert "scheduler bug" in failed.error
    assert tokens == want and done.finish_reason == "length"
    stats = eng.stats()
    assert stats["requests_failed"] == 1 and stats["requests_cancelled"] == 0 and stats["kv_pages_used"] == 0


@pytest.mark.parametrize("others", [1, 3])
def test_a_row_whose_inputs_fail_half_written_fails_alone(engine, monkeypatch, others):
    """The engine writes each row into the batch arrays in turn: a row that raises after writing part of
    its place must leave it padding again for the next row (and, when rows failed, the call drops to the
    bucket that holds the rest). Its sampling settings are the values written before the failure."""
    eng = engine("llama")
    good = [PROMPTS[1], PROMPTS[2], [7, 8, 9]][:others]
    want = [_alone(engine, p) for p in good]
    bad = eng.submit(LONG[:14], max_new_tokens=8, temperature=5.0, seed=1)      # one chunk: it samples
    ids = [eng.submit(p, max_new_tokens=8) for p in good]
    [req] = [r for r in eng.scheduler.waiting if r.id == bad]
    req.top_k = 2 ** 40              # over int32: fails after its temperature and slots are written
    calls, real = [], eng.executor.dispatch

    def recording(mode, B, C, arrays, T=None):
        calls.append((mode, B, {k: np.array(v) for k, v in arrays.items()}))
        return real(mode, B, C, arrays, T)
    monkeypatch.setattr(eng.executor, "dispatch", recording)
    out, finished, errors = _drain(eng)
    assert finished[bad] == "error" and "OverflowError" in errors[bad]
    for rid, w in zip(ids, want):
        assert finished[rid] == "length" and out[rid] == w
    mode, B, first = calls[0]
    assert mode == "prefill" and B == (1 if others == 1 else 4)          # the rows left, in their bucket
    assert (first["temperature"] == 0).all() and (first["top_k"] == 0).all()  # nothing of the failed row
    for k, p in enumerate(good):
        n = min(len(p), 16)                                                 # the first prefill chunk
        assert first["token_ids"][k, :n].tolist() == p[:n] and first["seq_lens"][k] == n
        assert (first["slot_mapping"][k, n:] == -1).all() and (first["token_ids"][k, n:] == 0).all()
    assert (first["seq_lens"][others:] == 1).all() and (first["slot_mapping"][others:] == -1).all()
    assert eng.stats()["kv_pages_used"] == 0 and eng.stats()["requests_failed"] == 1


def test_the_kept_argument_list_holds_no_pool_or_input_between_calls(engine):
    """The executor keeps each program's argument list (weights) across calls and writes only the
    request and pool places; after a call, and after one that fails on a bad input, those places are
    empty again (no pool or input kept alive) and serving goes on unchanged."""
    eng = engine("llama")
    want = _alone(engine, PROMPTS[1])
    [r] = eng.generate([PROMPTS[1]], max_new_tokens=8, stop=[])
    assert r.token_ids == want
    ex = eng.executor
    assert ex._plans
    for args, fill in ex._plans.values():
        assert all(args[i] is None for i, _, _ in fill)
        assert sum(a is None for a in args) == len(fill)                     # the weights stay
    from tlaloc.serving.runtime.batch import empty_inputs
    wrong = empty_inputs(1, 2, 2)                                           # not the program's shapes
    with pytest.raises(ValueError, match="the program takes"):
        ex.run("decode", 1, 16, wrong)
    assert not ex.pools_lost()
    for args, fill in ex._plans.values():
        assert all(args[i] is None for i, _, _ in fill)
    [r] = eng.generate([PROMPTS[1]], max_new_tokens=8, stop=[])
    assert r.token_ids == want
