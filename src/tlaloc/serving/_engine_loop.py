"""The engine thread: the one thread that calls into a ``tlaloc.serving.Engine``.

The engine is not thread-safe, and ``engine.step()`` blocks for a whole batch step, so
one worker thread owns it. Asyncio handlers talk to it through a command queue:

- ``await runner.submit(ids, sink, request_id=..., ...)`` returns once the engine took
  the request (or raises the engine's ``ValueError``); the request's events are then
  put on ``sink`` (an ``asyncio.Queue``) from the thread with ``call_soon_threadsafe``;
- ``runner.cancel(request_id)`` (plain, callable from any thread or a ``finally``);
- ``await runner.embed(texts)``: embedding requests that arrive together are merged
  into one ``engine.embed`` call (dynamic batching), up to ``embed_max_batch`` texts.

Between commands the thread runs ``engine.step()`` while ``engine.has_work()``, and
after each step it keeps a snapshot of ``engine.stats()`` for ``/metrics`` and
``/health``. It measures time to first token and time per output token per request.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import queue
import threading
import time

import numpy as np

log = logging.getLogger("tlaloc.serving")
_STOP = object()


@dataclasses.dataclass(frozen=True)
class RunnerEvent:
    """An event the runner makes itself (engine failure, shutdown); shaped like the engine's."""
    request_id: str
    token_ids: list
    finished: bool = True
    finish_reason: str | None = None
    error: str | None = None


@dataclasses.dataclass
class _Stream:
    loop: asyncio.AbstractEventLoop
    sink: asyncio.Queue
    submitted_at: float
    first_token_at: float | None = None
    tokens: int = 0


class EngineRunner:
    """Owns ``engine`` on a worker thread; see the module docstring.

    Arguments:
        engine: an object with the ``tlaloc.serving.Engine`` streaming protocol.
        metrics: a :class:`tlaloc.serving.metrics.ServerMetrics`, or None.
        embed_window_s: after an embedding request arrives, wait this long for more to batch.
        embed_max_batch: at most this many texts per ``engine.embed`` call.
    """

    def __init__(self, engine, metrics=None, *, embed_window_s: float = 0.002,
                 embed_max_batch: int = 64, idle_poll_s: float = 0.05):
        self.engine = engine
        self.metrics = metrics
        self._embed_window_s, self._embed_max_batch = embed_window_s, embed_max_batch
        self._idle_poll_s = idle_poll_s
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._streams: dict[str, _Stream] = {}
        self._snapshot: dict = {}
        self._thread: threading.Thread | None = None
        self.failure: str | None = None        # set when the thread died

    # -- the asyncio side ------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._snapshot = self._safe_stats()
            self._thread = threading.Thread(target=self._run, name="tlaloc-engine", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            self._commands.put(_STOP)
            self._thread.join(timeout)
            self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def snapshot(self) -> dict:
        """The latest ``engine.stats()``, taken by the engine thread."""
        return dict(self._snapshot)

    async def submit(self, prompt_ids: list[int], sink: asyncio.Queue, *, request_id: str, **params) -> str:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put(("submit", prompt_ids, params, request_id, sink,
                            asyncio.get_running_loop(), future))
        return await asyncio.wrap_future(future)

    def cancel(self, request_id: str) -> None:
        """Cancel a request if it is still running (no-op otherwise); returns at once."""
        self._commands.put(("cancel", request_id))

    async def embed(self, texts: list[str]) -> np.ndarray:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put(("embed", list(texts), future))
        return await asyncio.wrap_future(future)

    # -- the engine thread -----------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                commands = self._next_commands()
                embeds = [c for c in commands if c is not _STOP and c[0] == "embed"]
                for command in commands:
                    if command is _STOP:
                        self._fail_all("the server is shutting down")
                        return
                    if command[0] == "submit":
                        self._submit(*command[1:])
                    elif command[0] == "cancel":
                        self._cancel(command[1])
                if embeds:
                    self._embed(embeds)
                if self._has_work():
                    self._step()
                self._snapshot = self._safe_stats()
        except BaseException as exc:  # noqa: BLE001 - report, then let the server answer 503
            self.failure = f"engine thread died: {type(exc).__name__}: {exc}"
            log.exception("tlaloc engine thread died")
            self._fail_all(self.failure)

    def _next_commands(self) -> list:
        commands = []
        if not self._has_work():
            try:
                commands.append(self._commands.get(timeout=self._idle_poll_s))
            except queue.Empty:
                return commands
        while True:
            try:
                commands.append(self._commands.get_nowait())
            except queue.Empty:
                break
        if self._embed_window_s and any(c is not _STOP and c[0] == "embed" for c in commands):
            deadline = time.monotonic() + self._embed_window_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    commands.append(self._commands.get(timeout=left))
                except queue.Empty:
                    break
        return commands

    def _has_work(self) -> bool:
        try:
            return bool(self.engine.has_work())
        except Exception:  # noqa: BLE001
            log.exception("engine.has_work() failed")
            return False

    def _safe_stats(self) -> dict:
        try:
            return dict(self.engine.stats())
        except Exception:  # noqa: BLE001
            log.exception("engine.stats() failed")
            return dict(self._snapshot)

    def _submit(self, prompt_ids, params, request_id, sink, loop, future) -> None:
        if not future.set_running_or_notify_cancel():
            return                                  # the caller gave up before we got to it
        try:
            rid = self.engine.submit(prompt_ids, request_id=request_id, **params)
        except Exception as exc:  # noqa: BLE001 - ValueError is the user's; others are reported too
            future.set_exception(exc)
            return
        self._streams[rid] = _Stream(loop, sink, time.perf_counter())
        future.set_result(rid)

    def _cancel(self, request_id: str) -> None:
        if self._streams.pop(request_id, None) is None:
            return                                  # finished already, or never taken
        try:
            self.engine.cancel(request_id)
        except Exception:  # noqa: BLE001
            log.exception("engine.cancel(%r) failed", request_id)

    def _step(self) -> None:
        try:
            events = self.engine.step()
        except Exception as exc:  # noqa: BLE001
            log.exception("engine.step() failed")
            message = f"engine step failed: {type(exc).__name__}: {exc}"
            for rid in list(self._streams):
                self._fail_quietly(rid, message)
            self._fail_all(message, drain=False)       # queued commands are new requests: serve them
            return
        now = time.perf_counter()
        for event in events:
            stream = self._streams.get(event.request_id)
            if stream is None:
                continue                            # cancelled by the server meanwhile
            if event.token_ids:
                if stream.first_token_at is None:
                    stream.first_token_at = now
                    if self.metrics:
                        self.metrics.ttft.observe(now - stream.submitted_at)
                stream.tokens += len(event.token_ids)
            if event.finished:
                del self._streams[event.request_id]
                if self.metrics and stream.tokens > 1 and stream.first_token_at is not None:
                    self.metrics.tpot.observe((now - stream.first_token_at) / (stream.tokens - 1))
            self._deliver(stream, event)

    def _fail_quietly(self, rid: str, message: str) -> None:
        """End ``rid`` in the engine as failed (``engine.fail``; engines without it: cancel)."""
        try:
            fail = getattr(self.engine, "fail", None)
            if fail is not None:
                fail(rid, message)
            else:
                self.engine.cancel(rid)
        except Exception:  # noqa: BLE001 - the step already failed; the stream gets the error below
            pass

    def _embed(self, commands: list) -> None:
        group, size = [], 0
        for command in commands:
            if not command[2].set_running_or_notify_cancel():
                continue
            if group and size + len(command[1]) > self._embed_max_batch:
                self._embed_group(group)
                group, size = [], 0
            group.append(command)
            size += len(command[1])
        if group:
            self._embed_group(group)

    def _embed_group(self, group: list) -> None:
        texts = [t for _, batch, _ in group for t in batch]
        try:
            vectors = np.asarray(self.engine.embed(texts))        # (n, dim)
        except Exception as exc:  # noqa: BLE001
            if len(group) == 1:
                group[0][2].set_exception(exc)
                return
            for command in group:                                 # find the bad one: retry alone
                self._embed_group([command])
            return
        if self.metrics:
            self.metrics.embed_batch.observe(len(texts))
        start = 0
        for _, batch, future in group:
            future.set_result(vectors[start:start + len(batch)])
            start += len(batch)

    def _fail_all(self, message: str, drain: bool = True) -> None:
        for rid, stream in list(self._streams.items()):
            self._deliver(stream, RunnerEvent(rid, [], True, None, message))
        self._streams.clear()
        while drain:                                  # answer whatever is still queued
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                break
            if command is not _STOP and command[0] in ("submit", "embed") \
                    and command[-1].set_running_or_notify_cancel():
                command[-1].set_exception(RuntimeError(message))

    @staticmethod
    def _deliver(stream: _Stream, event) -> None:
        try:
            stream.loop.call_soon_threadsafe(stream.sink.put_nowait, event)
        except RuntimeError:
            pass                                      # the request's event loop is gone
