"""Iteration-level continuous batching: which requests run in each program call, and what it did.

The interface is vLLM v1's: :meth:`Scheduler.schedule` decides a call (a
:class:`~tlaloc.serving.runtime.batch.Batch`), the engine builds its inputs and runs it,
and :meth:`Scheduler.update` applies the sampled tokens. One engine step
(:meth:`tlaloc.serving.Engine.step`) is:

1. :meth:`Scheduler.begin_step`: report cancellations made since the last step, then admit
   waiting requests, first come first served, while fewer than the largest batch bucket
   run and the free pages cover the newcomer's whole need (prompt plus ``max_new_tokens``)
   on top of what running requests may still claim. A request is never admitted that could
   later run out of pages, so no live sequence is dropped. Admission looks the prompt's
   full pages up in the prefix cache first and shares what it finds;
2. ``schedule("decode")``: every request with a token to feed (one token each);
3. ``schedule("prefill")``: every request still reading its prompt, at most
   ``prefill_chunk`` tokens of it each, so a long prompt takes several steps and never
   holds up the others' decodes (scheduled after the decode call ran: a failure there may
   have ended some).

Each call is the smallest (batch, context) bucket that covers its rows. Pages are taken
as tokens need them (when a row is scheduled) and given back when a request finishes,
fails or is cancelled. Prompt pages that fill up are registered in the prefix cache.

Every value is validated (and top_k clamped to the vocabulary) at :meth:`Scheduler.submit`;
what the engine does when a call fails is in :mod:`tlaloc.serving.runtime.engine`.
"""
from __future__ import annotations

import itertools
import logging
from collections import deque
from typing import Callable

import numpy as np

from ..errors import ArgumentError, CapacityError, QueueFullError
from . import requests as rq
from .batch import Batch, Row, row_logprobs
from .page_allocator import PageAllocator, page_hashes
from .requests import Event, Request

log = logging.getLogger("tlaloc.serving")


class Scheduler:
    """The request queue, the running batch and the page allocator.

    batch, context: the artifact's bucket ladders (ascending); program_tokens(mode, C): the
    tokens per row of that mode's programs at context C (ascending: a call takes the smallest
    that holds its longest row); prefill_chunk: prompt tokens per
    request per step; max_logprobs: the most top log-probabilities the programs output.
    """

    def __init__(self, *, batch: list, context: list, program_tokens: Callable, block_size: int, num_pages: int,
                 prefill_chunk: int, vocab_size: int, max_waiting: int = 1024, max_logprobs: int = 0):
        self.batch, self.context = list(batch), list(context)
        self.program_tokens = program_tokens
        self.block_size, self.prefill_chunk = block_size, prefill_chunk
        self.vocab_size = vocab_size
        self.max_waiting = max_waiting
        self.max_logprobs = int(max_logprobs)
        self.pages = PageAllocator(num_pages)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._pending: list[Event] = []
        self._ids = itertools.count()
        self.counters_by_bucket: dict = {}        # (mode, B, C) -> program calls
        self.counters = {"tokens_in": 0, "tokens_out": 0, "prefix_cache_hit_tokens": 0, "steps": 0,
                         "requests_finished": 0, "requests_cancelled": 0, "requests_failed": 0}

    # -- submitting ----------------------------------------------------------------------------
    @property
    def max_batch(self) -> int:
        return self.batch[-1]

    @property
    def max_context(self) -> int:
        return self.context[-1]

    def submit(self, prompt_ids, *, max_new_tokens: int, temperature=0.0, top_k=None, top_p=None, seed=None,
               stop_ids=(), request_id=None, logprobs=None) -> str:
        """Queue a request (see :meth:`tlaloc.serving.Engine.submit`); returns its id."""
        prompt = rq.check_prompt(prompt_ids, self.vocab_size)
        logprobs = rq.check_logprobs(logprobs, self.max_logprobs)
        max_new_tokens = rq.check_max_new_tokens(max_new_tokens)
        temperature, top_k, top_p = rq.check_sampling(temperature, top_k, top_p, self.vocab_size)
        seed = rq.check_seed(seed)
        stops = rq.check_stop_ids(stop_ids)
        total = len(prompt) + max_new_tokens
        if total > self.max_context:
            raise CapacityError(f"prompt ({len(prompt)} tokens) + max_new_tokens ({max_new_tokens}) = {total} is over "
                                f"the artifact's largest context {self.max_context}; shorten the prompt, ask for "
                                f"fewer tokens, or export with a larger --context")
        need = rq.pages_for(total - 1, self.block_size)
        if need > self.pages.total:
            raise CapacityError(f"this request needs {need} KV pages of {self.block_size} tokens but the artifact has "
                                f"{self.pages.total}; export with more pages (num_pages) or ask for fewer tokens")
        if len(self.waiting) >= self.max_waiting:
            raise QueueFullError(f"the engine's queue is full ({len(self.waiting)} requests waiting, max_waiting="
                                 f"{self.max_waiting}); retry later")
        rid = str(request_id) if request_id is not None else f"req-{next(self._ids)}"
        if any(r.id == rid for r in itertools.chain(self.waiting, self.running)):
            raise ArgumentError(f"request_id {rid!r} is already in use by a live request; choose another")
        rng = np.random.default_rng(seed)
        self.waiting.append(Request(rid, prompt, max_new_tokens, temperature, top_k, top_p, rng, stops,
                                    page_hashes(prompt, self.block_size), logprobs=logprobs))
        return rid

    def cancel(self, request_id: str) -> bool:
        """Stop a request and free its pages; its final event (finish_reason "cancelled") comes with the next step."""
        return self._end_live(request_id, "cancelled")

    def fail(self, request_id: str, message: str) -> bool:
        """End a waiting or running request with an error (counted as failed, not cancelled)."""
        return self._end_live(request_id, "error", message)

    def _end_live(self, request_id: str, reason: str, error: str | None = None) -> bool:
        for req in itertools.chain(list(self.waiting), list(self.running)):
            if req.id == request_id:
                if req in self.waiting:
                    self.waiting.remove(req)
                self._end(req, reason, error=error)
                return True
        return False

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self._pending)

    def live_ids(self) -> list:
        """The ids of the waiting and running requests."""
        return [r.id for r in itertools.chain(self.waiting, self.running)]

    def set_aside_events(self) -> list:
        """Take the events not yet reported (cancellations) out, to be given back by :meth:`put_back_events`."""
        events, self._pending = self._pending, []
        return events

    def put_back_events(self, events: list, drop=()) -> None:
        """Report ``events`` first at the next step, and forget the unreported events of the ids in ``drop``."""
        drop = set(drop)
        self._pending = list(events) + [e for e in self._pending if e.request_id not in drop]

    # -- one step ------------------------------------------------------------------------------
    def begin_step(self) -> list[Event]:
        """Start a step: returns the events reported since the last one (cancellations), and admits."""
        events, self._pending = self._pending, []
        self._admit()
        self.counters["steps"] += 1
        return events

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_batch:
            req = self.waiting[0]
            usable = (len(req.prompt) - 1) // self.block_size          # keep a token to compute
            hits = []
            for key in req.hashes[:usable]:
                page = self.pages.lookup(key)
                if page is None:
                    break
                hits.append(page)
            need = rq.pages_for(len(req.prompt) + req.max_new_tokens - 1, self.block_size) - len(hits)
            claimed = sum(r.reserved for r in self.running)
            if need > self.pages.available - claimed:
                for page in hits:
                    self.pages.release(page)
                break                                                  # wait for pages (first come, first served)
            self.waiting.popleft()
            req.pages, req.reserved, req.registered = hits, need, len(hits)
            req.computed = req.cached_tokens = len(hits) * self.block_size
            self.counters["tokens_in"] += len(req.prompt)
            self.counters["prefix_cache_hit_tokens"] += req.cached_tokens
            self.running.append(req)

    def schedule(self, mode: str) -> Batch | None:
        """The next program call of this step in ``mode`` ("decode" or "prefill"), or None if no request
        needs one. Takes the pages the scheduled tokens need and draws each sampling row's uniform."""
        if mode == "decode":
            spans = [(r, r.computed, 1) for r in self.running if not r.prefilling]
        else:
            spans = [(r, r.computed, min(self.prefill_chunk, len(r.prompt) - r.computed))
                     for r in self.running if r.prefilling]
        rows = []
        for req, start, n in spans:
            try:
                self._take_pages(req, start + n)
            except Exception as e:  # noqa: BLE001 - this request's pages; never the batch's problem
                self.fail_row(Row(req, start, n), e, "while its pages were taken", report=True)
                continue
            samples = start + n >= req.n_tokens
            rows.append(self._row(req, start, n, samples))
        if not rows:
            return None
        C = self.bucket(self.context, max(row.end for row in rows), "context")
        T = self.bucket(self.program_tokens(mode, C), max(row.n for row in rows), "tokens")
        return Batch(mode, self.bucket(self.batch, len(rows), "batch"), C, T, tuple(rows))

    def steady(self, batch: Batch) -> bool:
        """Whether the decode call after ``batch`` (a decode call) is known before ``batch``'s tokens are:
        it runs the same requests, every one of them running, decoding one token a row and with a token
        still to come after ``batch``'s; no request waits, reads its prompt, or has an event to report.
        Then :meth:`next_decode` can schedule it while ``batch`` runs (vLLM's async scheduling)."""
        if batch.mode != "decode" or batch.tokens != 1 or self.waiting or self._pending:
            return False
        if len(self.running) != len(batch.rows) or batch.size != self.bucket(self.batch, len(batch.rows), "batch"):
            return False
        return all(row.request is req and row.n == 1 and not req.prefilling
                   and len(req.generated) + 1 < req.max_new_tokens for req, row in zip(self.running, batch.rows))

    def next_decode(self, prev: Batch) -> Batch | None:
        """The decode call that follows ``prev``, scheduled before ``prev``'s tokens are back (see
        :meth:`steady`; None when it does not hold): each row feeds the position after ``prev``'s,
        whose token is ``prev``'s output (the engine passes it on the device). Takes the row's page
        (within the request's reservation: it has a token to come) and draws its uniform, as
        :meth:`schedule` would at the next step. A request that ``prev`` ends (a stop id) or that is
        cancelled meanwhile has its row's output dropped by :meth:`update`; the key and value it
        writes land in the request's own page, after its last token, where nothing reads them."""
        if not self.steady(prev):
            return None
        rows = []
        for row in prev.rows:
            req = row.request
            try:
                self._take_pages(req, row.end + 1)
            except Exception:  # noqa: BLE001 - cannot happen within the reservation; run the step as usual
                self.undo_draws(Batch("decode", prev.size, prev.context, 1, tuple(rows)))
                return None
            rows.append(self._row(req, row.end, 1, True))
        C = self.bucket(self.context, max(row.end for row in rows), "context")
        return Batch("decode", prev.size, C, self.bucket(self.program_tokens("decode", C), 1, "tokens"), tuple(rows))

    @staticmethod
    def _row(req: Request, start: int, n: int, samples: bool) -> Row:
        """A row of ``n`` tokens from ``start``; one that samples with temperature > 0 draws its uniform
        and keeps the generator's state from before the draw (see :meth:`undo_draws`)."""
        if not (samples and req.temperature > 0):
            return Row(req, start, n)
        state = req.rng.bit_generator.state
        return Row(req, start, n, req.rng.random(), state)

    def undo_draws(self, batch: Batch) -> None:
        """Put every row's generator back where it stood before the row's uniform was drawn: ``batch``
        is dropped unapplied (async scheduling: it failed in flight, or the waiting engine would
        have run its rows in another call), and the call that re-runs its rows draws the same
        uniforms, so seeded sampling gives the waiting engine's tokens."""
        for row in batch.rows:
            if row.drawn_from is not None:
                row.request.rng.bit_generator.state = row.drawn_from

    def _take_pages(self, req: Request, tokens: int) -> None:
        while len(req.pages) < rq.pages_for(tokens, self.block_size):
            req.pages.append(self.pages.allocate())
            req.reserved -= 1

    def bucket(self, ladder: list, need: int, what: str) -> int:
        """The smallest rung of ``ladder`` >= ``need``."""
        for v in ladder:
            if v >= need:
                return v
        raise CapacityError(f"no {what} bucket covers {need} (largest {ladder[-1]})")   # refused at submit

    def update(self, batch: Batch, sampled: dict) -> list[Event]:
        """Apply one call's outputs: ``sampled["next_token_ids"]`` (B,), and the log-probability outputs
        (see :func:`~tlaloc.serving.runtime.batch.row_logprobs`) for rows that asked. Advances every
        row, registers filled prompt pages, appends each sampling row's token and ends the requests
        that hit a stop id or max_new_tokens. Returns one event per sampled token."""
        ids = np.asarray(sampled["next_token_ids"])
        events, running = [], set(map(id, self.running))
        for r, row in enumerate(batch.rows):
            req = row.request
            if id(req) not in running:
                continue                      # ended while the call ran (async scheduling: see next_decode)
            req.computed = row.end
            self._register(req)
            if not row.samples:
                continue                                          # a prefill chunk that is not the last
            token = int(ids[r])
            req.generated.append(token)
            self.counters["tokens_out"] += 1
            lp = None if req.logprobs is None else [row_logprobs(sampled, r, token, req.logprobs)]
            if token in req.stop_ids:
                events.append(self._end(req, "stop", [token], report=False, logprobs=lp))
            elif len(req.generated) >= req.max_new_tokens:
                events.append(self._end(req, "length", [token], report=False, logprobs=lp))
            else:
                events.append(Event(req.id, [token], logprobs=lp))
        return events

    def fail_row(self, row: Row, error: Exception, where: str = "", report: bool = False) -> Event:
        """End ``row``'s request with ``error`` (a fault of this request alone); returns its final event."""
        log.warning("serving: request %s failed%s: %s: %s", row.request.id, f" {where}" if where else "",
                    type(error).__name__, error)
        return self._end(row.request, "error", error=f"{type(error).__name__}: {error}", report=report)

    def count_call(self, batch: Batch) -> None:
        key = (batch.mode, batch.size, batch.context)
        self.counters_by_bucket[key] = self.counters_by_bucket.get(key, 0) + 1

    def _register(self, req: Request) -> None:
        full = min(req.computed, len(req.prompt)) // self.block_size
        for i in range(req.registered, full):
            self.pages.register(req.pages[i], req.hashes[i])
        req.registered = max(req.registered, full)

    def _end(self, req: Request, reason: str, tokens=(), error=None, report=True, logprobs=None) -> Event:
        if req in self.running:
            self.running.remove(req)
        for page in req.pages:
            self.pages.release(page)
        req.pages, req.reserved = [], 0
        key = {"cancelled": "requests_cancelled", "error": "requests_failed"}.get(reason, "requests_finished")
        self.counters[key] += 1
        event = Event(req.id, list(tokens), True, reason, error, logprobs)
        if report:
            self._pending.append(event)
        return event

    def fail_all(self, message: str) -> list[Event]:
        """End every running request with an error (their KV is lost) and forget all pages."""
        events = [self._end(req, "error", error=message, report=False) for req in list(self.running)]
        self.pages.reset()
        return events

    def stats(self) -> dict:
        return {"running": len(self.running), "waiting": len(self.waiting), "kv_pages_used": self.pages.used,
                "kv_pages_total": self.pages.total, "kv_pages_cached": self.pages.cached, **self.counters}


__all__ = ["Scheduler"]
