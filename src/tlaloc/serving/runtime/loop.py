"""The one loop that drives an engine: submit with a sink, step, route every event to its sink.

Every front door drives the engine through :class:`EngineLoop`: ``Engine.generate``, the
``tlaloc generate`` command, the Triton model, and the engine thread behind the HTTP
server and the streaming Triton model (:mod:`tlaloc.serving.runtime.engine_thread`).
What differs between them is only what a sink does with an event.

A sink is a callable taking one event of its request (an
:class:`~tlaloc.serving.runtime.requests.Event`); the last one it gets has
``finished=True``. A sink may also have a ``cancelled()`` method, which the loop asks
before each step: when it says True the request is cancelled in the engine and the sink
gets a final event with finish_reason "cancelled". Sinks should not raise: an exception
leaves this step's remaining events undelivered.

Faults: when ``engine.step()`` raises, every live request is failed in the engine
(``engine.fail``, or ``cancel`` for engines without it, so its pages are freed) and its
sink gets a final error event, and the loop goes on serving. When requests are live but
the engine has no work, they were dropped: each sink gets a final error event saying so.
"""
from __future__ import annotations

import logging
from typing import Callable

from .requests import Event

log = logging.getLogger("tlaloc.serving")


class EngineLoop:
    """Routes ``engine``'s events to the sinks of the requests submitted through it (one thread)."""

    def __init__(self, engine):
        self.engine = engine
        self._sinks: dict[str, Callable] = {}

    @property
    def live(self) -> int:
        """Requests submitted through this loop that have not finished."""
        return len(self._sinks)

    def submit(self, prompt_ids, sink: Callable, **params) -> str:
        """``engine.submit(prompt_ids, **params)``, routing its events to ``sink``; raises the engine's refusal."""
        rid = self.engine.submit(prompt_ids, **params)
        self._sinks[rid] = sink
        return rid

    def cancel(self, request_id: str) -> bool:
        """Cancel ``request_id`` in the engine and stop routing its events (its sink gets no more);
        False if it is not live here."""
        if self._sinks.pop(request_id, None) is None:
            return False
        try:
            self.engine.cancel(request_id)
        except Exception:  # noqa: BLE001 - the request is gone from here either way
            log.exception("engine.cancel(%r) failed", request_id)
        return True

    def cancel_all(self) -> None:
        for rid in list(self._sinks):
            self.cancel(rid)

    def step(self) -> None:
        """One engine step (when the engine has work), its events delivered to their sinks."""
        self._poll_cancelled()
        has_work = self.has_work()
        if self._sinks and not has_work:
            self.fail_all("the engine dropped the request", in_engine=False)
        if not has_work:
            return
        try:
            events = self.engine.step()
        except Exception as exc:  # noqa: BLE001 - fail what is live, keep serving
            log.exception("engine.step() failed")
            self.fail_all(f"engine step failed: {type(exc).__name__}: {exc}")
            return
        for event in events:
            sink = self._sinks.get(event.request_id)
            if sink is None:
                continue                                  # cancelled meanwhile, or not submitted here
            if event.finished:
                del self._sinks[event.request_id]
            sink(event)

    def fail_all(self, message: str, in_engine: bool = True) -> None:
        """End every live request with a final error event carrying ``message``; with ``in_engine``,
        fail it in the engine too (``engine.fail``; engines without it: ``cancel``)."""
        sinks, self._sinks = self._sinks, {}
        for rid, sink in sinks.items():
            if in_engine:
                self._fail_in_engine(rid, message)
            sink(Event(rid, [], True, "error", message))

    def _fail_in_engine(self, rid: str, message: str) -> None:
        try:
            fail = getattr(self.engine, "fail", None)
            if fail is not None:
                fail(rid, message)
            else:
                self.engine.cancel(rid)
        except Exception:  # noqa: BLE001 - the step already failed; the sink gets the error
            pass

    def _poll_cancelled(self) -> None:
        for rid, sink in list(self._sinks.items()):
            cancelled = getattr(sink, "cancelled", None)
            if cancelled is not None and cancelled() and self.cancel(rid):
                sink(Event(rid, [], True, "cancelled"))

    def has_work(self) -> bool:
        """``engine.has_work()``; False (logged) if it raises."""
        try:
            return bool(self.engine.has_work())
        except Exception:  # noqa: BLE001
            log.exception("engine.has_work() failed")
            return False


__all__ = ["EngineLoop"]
