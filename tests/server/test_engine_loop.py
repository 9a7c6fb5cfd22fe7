"""The one engine loop every front door uses (``tlaloc.serving.runtime.loop.EngineLoop``), over the fake engine.

Oracle: a request's tokens equal the ids the fake engine gives it run alone
(``FakeEngine.expected_ids``). The faults: a step that raises, a request the engine
drops, a sink that asks to cancel; each ends only the requests it concerns, frees them in
the engine, and the loop keeps serving.
"""
import asyncio

import numpy as np

from tlaloc.serving.runtime.engine_thread import EngineRunner
from tlaloc.serving.runtime.loop import EngineLoop

from . import triton_stub
from .fake_engine import FakeEngine, write_fake_artifact
from .test_triton import load_model


def load_failing_engine(artifact_dir):
    """An ``engine_factory`` for the Triton model: a fake engine whose second step raises."""
    return _StepFailsOnce(fail_at=2)


class _Sink:
    def __init__(self, cancel_after=None):
        self.events, self.cancel_after = [], cancel_after

    def __call__(self, event):
        self.events.append(event)

    @property
    def tokens(self):
        return [t for e in self.events for t in e.token_ids]

    def cancelled(self):
        return self.cancel_after is not None and len(self.tokens) >= self.cancel_after


class _StepFailsOnce(FakeEngine):
    def __init__(self, fail_at, **kwargs):
        super().__init__(**kwargs)
        self.fail_at = fail_at

    def step(self):
        if self.step_calls + 1 == self.fail_at:
            self.step_calls += 1
            raise RuntimeError("injected step fault")
        return super().step()


def _run(loop):
    for _ in range(500):                                   # bounded: a hang fails instead of spinning
        if not loop.live:
            return
        loop.step()
    raise AssertionError("the loop still has live requests after 500 steps")


def test_events_reach_their_own_sinks():
    engine = FakeEngine()
    loop, sinks = EngineLoop(engine), [_Sink(), _Sink()]
    prompts = [engine.tokenizer.encode(t).ids for t in ("hello", "other words")]
    for prompt, sink in zip(prompts, sinks):
        loop.submit(prompt, sink, max_new_tokens=12, stop_ids=())
    _run(loop)
    for prompt, sink in zip(prompts, sinks):
        assert sink.tokens == engine.expected_ids(prompt, 12, stop_ids=())
        assert [e.finished for e in sink.events] == [False] * 11 + [True]


def test_a_step_that_raises_fails_the_live_requests_in_the_engine_and_serving_goes_on():
    engine = _StepFailsOnce(fail_at=3)
    loop, doomed = EngineLoop(engine), [_Sink(), _Sink()]
    ids = [loop.submit([104, 105], sink, max_new_tokens=20) for sink in doomed]
    _run(loop)
    for sink in doomed:
        assert len(sink.tokens) == 2 and sink.events[-1].finished
        assert sink.events[-1].error == "engine step failed: RuntimeError: injected step fault"
    assert sorted(engine.cancelled) == sorted(ids) and not engine.has_work()     # freed (no engine.fail here)
    after = _Sink()
    loop.submit([104, 105], after, max_new_tokens=5, stop_ids=())
    _run(loop)
    assert after.tokens == engine.expected_ids([104, 105], 5, stop_ids=()) and after.events[-1].error is None


def test_a_request_the_engine_dropped_ends_with_an_error():
    """Before the shared loop, the server's engine thread waited for such a request forever."""
    engine = FakeEngine()
    loop, sink = EngineLoop(engine), _Sink()
    rid = loop.submit([104], sink, max_new_tokens=20)
    loop.step()
    engine.cancel(rid)                                     # behind the loop's back
    loop.step()
    assert sink.events[-1].finished and sink.events[-1].error == "the engine dropped the request"
    assert loop.live == 0


def test_a_sink_that_says_cancelled_is_cancelled_in_the_engine():
    engine = FakeEngine()
    loop, quitter, stayer = EngineLoop(engine), _Sink(cancel_after=3), _Sink()
    rid = loop.submit([104, 105], quitter, max_new_tokens=30, stop_ids=())
    loop.submit([106], stayer, max_new_tokens=6, stop_ids=())
    _run(loop)
    assert len(quitter.tokens) == 3 and quitter.events[-1].finish_reason == "cancelled"
    assert engine.cancelled == [rid] and stayer.tokens == engine.expected_ids([106], 6, stop_ids=())


def _with_running_request(engine, max_new_tokens, then):
    """Start an EngineRunner on ``engine``, submit request "r" and wait for its first event, then
    ``await then(rid, first, events)``; the runner is stopped afterwards. Returns what ``then`` returns."""
    runner = EngineRunner(engine)

    async def run():
        runner.start()
        try:
            events = asyncio.Queue()
            rid = await runner.submit([104], events, request_id="r", max_new_tokens=max_new_tokens)
            first = await asyncio.wait_for(events.get(), 30)
            return await then(rid, first, events)
        finally:
            runner.stop()
    return asyncio.run(run())


def test_the_engine_thread_answers_a_dropped_request_instead_of_hanging():
    engine = FakeEngine(step_latency_s=0.001)

    async def drop(rid, first, events):
        engine._running.pop(rid, None)                      # the engine loses it between two steps
        while True:
            event = await asyncio.wait_for(events.get(), 30)
            if event.finished:
                return first, event
    first, last = _with_running_request(engine, 50, drop)
    assert first.token_ids and last.error == "the engine dropped the request"


def test_decoupled_triton_model_frees_the_requests_of_a_failed_step(tmp_path, monkeypatch):
    from tlaloc.serving.triton import write_repository
    artifact = write_fake_artifact(tmp_path / "art")
    model = load_model(write_repository(artifact, tmp_path / "repo", streaming=True,
                                        engine_factory=f"{__name__}:load_failing_engine"), monkeypatch)
    failing = model.engine
    try:
        requests = [triton_stub.Request(text_input=np.array([t], dtype=object),
                                        max_tokens=np.array([40], dtype=np.int32)) for t in (b"one", b"two")]
        model.execute(requests)
        for request in requests:
            assert request.sender.done.wait(10), "no final response"
            assert "injected step fault" in request.sender.sent[-1].error().message()
        assert len(failing.cancelled) == 2 and not failing.has_work()         # nothing left running
    finally:
        model.finalize()


def test_stopping_the_engine_thread_ends_its_live_requests_in_the_engine_too(monkeypatch):
    """Regression: on stop the runner ended its live requests for their clients only; the engine
    kept running them, holding their KV pages, and a later ``Engine.generate`` on it refused.
    The negative control runs the old stop (clients only) and sees the request left running."""
    async def nothing(rid, first, events):
        return None

    def stopped_while_running():
        engine = FakeEngine(step_latency_s=0.01)
        _with_running_request(engine, 200, nothing)         # stopped with ~2 s of steps left
        return engine
    engine = stopped_while_running()
    assert not engine.has_work() and engine.stats()["kv_pages_used"] == 0
    old = EngineRunner._shutdown
    monkeypatch.setattr(EngineRunner, "_shutdown", lambda self, message, in_engine=False: old(self, message))
    assert stopped_while_running().has_work()
