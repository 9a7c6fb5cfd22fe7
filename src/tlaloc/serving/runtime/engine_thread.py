"""The engine thread: the one thread that calls into a ``tlaloc.serving.Engine``.

The engine is not thread-safe, and ``engine.step()`` blocks for a whole batch step, so
one worker thread owns it and drives it with an :class:`~tlaloc.serving.runtime.loop.EngineLoop`
(the HTTP server, and the streaming Triton model). Other threads talk to it through a
command queue:

- ``runner.submit_nowait(ids, sink, request_id=..., ...)`` (any thread) returns a
  ``concurrent.futures.Future`` of the request id, or of the engine's refusal; the
  request's events are then passed to ``sink`` on the engine thread (see the loop's sinks);
- ``await runner.submit(ids, queue, request_id=..., ...)`` (asyncio): the same, with the
  events put on ``queue`` (an ``asyncio.Queue``) through its event loop's
  ``call_soon_threadsafe``;
- ``runner.cancel(request_id)`` (plain, callable from any thread or a ``finally``);
- ``await runner.embed(texts)``: embedding requests that arrive together are merged
  into one ``engine.embed`` call (dynamic batching), up to ``embed_max_batch`` texts.

Between commands the thread steps the loop while the engine has work, and after each
step it keeps a snapshot of ``engine.stats()`` for ``/metrics`` and ``/health``. It
measures time to first token and time per output token per request.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import queue
import threading
import time
from typing import Callable

import numpy as np

from .loop import EngineLoop

log = logging.getLogger("tlaloc.serving")
_STOP = object()


@dataclasses.dataclass
class _Timed:
    """A sink that observes time to first token and time per output token, then passes the event on."""
    sink: Callable
    metrics: object
    submitted_at: float
    first_token_at: float | None = None
    tokens: int = 0

    def __call__(self, event) -> None:
        now = time.perf_counter()
        if event.token_ids:
            if self.first_token_at is None:
                self.first_token_at = now
                if self.metrics:
                    self.metrics.ttft.observe(now - self.submitted_at)
            self.tokens += len(event.token_ids)
        if event.finished and not event.error and self.metrics and self.tokens > 1 \
                and self.first_token_at is not None:
            self.metrics.tpot.observe((now - self.first_token_at) / (self.tokens - 1))
        self.sink(event)

    def cancelled(self) -> bool:
        cancelled = getattr(self.sink, "cancelled", None)
        return bool(cancelled is not None and cancelled())


@dataclasses.dataclass(frozen=True)
class _QueueSink:
    """Puts events on an asyncio queue from the engine thread."""
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue

    def __call__(self, event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:
            pass                                      # the request's event loop is gone


class EngineRunner:
    """Owns ``engine`` on a worker thread; see the module docstring.

    Arguments:
        engine: an object with the ``tlaloc.serving.Engine`` streaming protocol.
        metrics: a :class:`tlaloc.serving.server.metrics.ServerMetrics`, or None.
        embed_window_s: after an embedding request arrives, wait this long for more to batch.
        embed_max_batch: at most this many texts per ``engine.embed`` call.
    """

    def __init__(self, engine, metrics=None, *, embed_window_s: float = 0.002,
                 embed_max_batch: int = 64, idle_poll_s: float = 0.05):
        self.engine = engine
        self.metrics = metrics
        self.loop = EngineLoop(engine)
        self._embed_window_s, self._embed_max_batch = embed_window_s, embed_max_batch
        self._idle_poll_s = idle_poll_s
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._snapshot: dict = {}
        self._thread: threading.Thread | None = None
        self._stop_message = "the server is shutting down"
        self.failure: str | None = None        # set when the thread died

    # -- other threads -----------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._snapshot = self._safe_stats()
            self._thread = threading.Thread(target=self._run, name="tlaloc-engine", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0, message: str = "the server is shutting down") -> None:
        """Stop the thread; every live request and queued command gets an error carrying ``message``."""
        if self._thread is not None:
            self._stop_message = message
            self._commands.put(_STOP)
            self._thread.join(timeout)
            self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def snapshot(self) -> dict:
        """The latest ``engine.stats()``, taken by the engine thread."""
        return dict(self._snapshot)

    def submit_nowait(self, prompt_ids: list[int], sink: Callable, *, request_id: str | None = None,
                      **params) -> concurrent.futures.Future:
        """Queue a request whose events go to ``sink`` (called on the engine thread); the future holds
        its id once the engine took it, or the engine's refusal."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put(("submit", prompt_ids, params, request_id, sink, future))
        return future

    async def submit(self, prompt_ids: list[int], sink: asyncio.Queue, *, request_id: str, **params) -> str:
        """Submit from asyncio: the request's events are put on the queue ``sink``; returns its id."""
        future = self.submit_nowait(prompt_ids, _QueueSink(asyncio.get_running_loop(), sink),
                                    request_id=request_id, **params)
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
                        self._shutdown(self._stop_message, in_engine=True)
                        return
                    if command[0] == "submit":
                        self._submit(*command[1:])
                    elif command[0] == "cancel":
                        self.loop.cancel(command[1])
                if embeds:
                    self._embed(embeds)
                self.loop.step()
                self._snapshot = self._safe_stats()
        except BaseException as exc:  # noqa: BLE001 - report, then let the server answer 503
            self.failure = f"engine thread died: {type(exc).__name__}: {exc}"
            log.exception("tlaloc engine thread died")
            self._shutdown(self.failure)

    def _next_commands(self) -> list:
        commands = []
        if not self.loop.has_work():
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

    def _safe_stats(self) -> dict:
        try:
            return dict(self.engine.stats())
        except Exception:  # noqa: BLE001
            log.exception("engine.stats() failed")
            return dict(self._snapshot)

    def _submit(self, prompt_ids, params, request_id, sink, future) -> None:
        if not future.set_running_or_notify_cancel():
            return                                  # the caller gave up before we got to it
        try:
            rid = self.loop.submit(prompt_ids, _Timed(sink, self.metrics, time.perf_counter()),
                                   request_id=request_id, **params)
        except Exception as exc:  # noqa: BLE001 - ValueError is the user's; others are reported too
            future.set_exception(exc)
            return
        future.set_result(rid)

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

    def _shutdown(self, message: str, in_engine: bool = False) -> None:
        """Fail every live request and answer every queued command with ``message``. On a stop
        (``in_engine``) the requests end in the engine too, so their KV pages are free for the
        engine's next user; after the engine thread died the engine is not called again."""
        self.loop.fail_all(message, in_engine=in_engine)
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                break
            if command is not _STOP and command[0] in ("submit", "embed") \
                    and command[-1].set_running_or_notify_cancel():
                command[-1].set_exception(RuntimeError(message))


__all__ = ["EngineRunner"]
