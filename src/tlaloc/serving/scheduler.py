"""Iteration-level continuous batching over the exported programs.

Every :meth:`Scheduler.step`:

1. reports cancellations made since the last step;
2. admits waiting requests, first come first served, while fewer than the largest batch
   bucket run and the free pages cover the newcomer's whole need (prompt plus
   ``max_new_tokens``) on top of what running requests may still claim. A request is
   never admitted that could later run out of pages, so no live sequence is dropped.
   Admission looks the prompt's full pages up in the prefix cache first and shares
   what it finds;
3. runs one decode program over every request with a token to feed (one token each);
4. runs one prefill program over every request still reading its prompt, at most
   ``prefill_chunk`` tokens of it each, so a long prompt takes several steps and never
   holds up the others' decodes;
5. returns one :class:`Event` per request that produced a token or finished.

Each program is the smallest (batch, context) bucket that covers its rows. Pages are
taken as tokens need them and given back when a request finishes, fails or is
cancelled. Prompt pages that fill up are registered in the prefix cache.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
from collections import deque
from typing import Callable

import numpy as np

from .errors import ArgumentError, CapacityError, QueueFullError
from .pages import PageAllocator, page_hashes

log = logging.getLogger("tlaloc.serving")


@dataclasses.dataclass(frozen=True)
class Event:
    """What one step did for one request: new token ids, and whether (and why) it finished.

    finish_reason: "stop" (a stop id was produced; it is included in token_ids), "length"
    (max_new_tokens reached), "cancelled", or "error" (then ``error`` holds the message).
    """
    request_id: str
    token_ids: list
    finished: bool = False
    finish_reason: str | None = None
    error: str | None = None


@dataclasses.dataclass(eq=False)
class Request:
    id: str
    prompt: list
    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    rng: np.random.Generator
    stop_ids: frozenset
    hashes: list
    generated: list = dataclasses.field(default_factory=list)
    pages: list = dataclasses.field(default_factory=list)
    computed: int = 0            # tokens whose keys and values are in the pages
    registered: int = 0          # prompt pages registered in the prefix cache
    reserved: int = 0            # pages this request may still allocate
    cached_tokens: int = 0       # prompt tokens found in the prefix cache

    @property
    def tokens(self) -> list:
        return self.prompt + self.generated

    @property
    def prefilling(self) -> bool:
        return self.computed < len(self.prompt)


def pages_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class Scheduler:
    """The request queue, the running batch, the page allocator; programs run through ``runner``.

    runner(mode, B, C, arrays) -> next token ids (B,) runs the (mode, B, C) program on the
    request arrays (token_ids, positions, block_tables, seq_lens, slot_mapping, temperature,
    top_k, top_p, uniforms).
    """

    def __init__(self, *, batch: list, context: list, program_tokens: Callable, block_size: int, num_pages: int,
                 prefill_chunk: int, vocab_size: int, runner: Callable, max_waiting: int = 1024,
                 on_failure: Callable | None = None):
        self.batch, self.context = list(batch), list(context)
        self.program_tokens = program_tokens
        self.block_size, self.prefill_chunk = block_size, prefill_chunk
        self.vocab_size = vocab_size
        self.runner, self.on_failure = runner, on_failure
        self.max_waiting = max_waiting
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
               stop_ids=(), request_id=None) -> str:
        prompt = self._check_prompt(prompt_ids)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
            raise ArgumentError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        max_new_tokens = int(max_new_tokens)
        temperature, top_k, top_p = _sampling(temperature, top_k, top_p)
        total = len(prompt) + max_new_tokens
        if total > self.max_context:
            raise CapacityError(f"prompt ({len(prompt)} tokens) + max_new_tokens ({max_new_tokens}) = {total} is over "
                                f"the artifact's largest context {self.max_context}; shorten the prompt, ask for "
                                f"fewer tokens, or export with a larger --context")
        need = pages_for(total - 1, self.block_size)
        if need > self.pages.total:
            raise CapacityError(f"this request needs {need} KV pages of {self.block_size} tokens but the artifact has "
                                f"{self.pages.total}; export with more pages (num_pages) or ask for fewer tokens")
        if len(self.waiting) >= self.max_waiting:
            raise QueueFullError(f"the engine's queue is full ({len(self.waiting)} requests waiting, max_waiting="
                                 f"{self.max_waiting}); retry later")
        rid = str(request_id) if request_id is not None else f"req-{next(self._ids)}"
        if any(r.id == rid for r in itertools.chain(self.waiting, self.running)):
            raise ArgumentError(f"request_id {rid!r} is already in use by a live request; choose another")
        if seed is None:
            rng = np.random.default_rng()
        else:
            rng = np.random.default_rng(list(seed) if isinstance(seed, (tuple, list)) else [int(seed), 0])
        stops = frozenset(int(s) for s in stop_ids)
        self.waiting.append(Request(rid, prompt, max_new_tokens, temperature, top_k, top_p, rng, stops,
                                    page_hashes(prompt, self.block_size)))
        return rid

    def _check_prompt(self, prompt_ids) -> list:
        if isinstance(prompt_ids, (str, bytes)):
            raise ArgumentError("prompt_ids must be a list of token ids; tokenize text first (engine.tokenizer)")
        try:
            prompt = [int(t) for t in prompt_ids]
        except (TypeError, ValueError):
            raise ArgumentError(f"prompt_ids must be a list of integers, got {prompt_ids!r:.80}") from None
        if not prompt:
            raise ArgumentError("the prompt is empty; give at least one token id")
        bad = [t for t in prompt if not 0 <= t < self.vocab_size]
        if bad:
            raise ArgumentError(f"token id {bad[0]} is out of range: this model's vocabulary has ids 0.."
                                f"{self.vocab_size - 1}")
        return prompt

    def cancel(self, request_id: str) -> bool:
        """Stop a request and free its pages; its final event (finish_reason "cancelled") comes with the next step."""
        for req in list(self.waiting):
            if req.id == request_id:
                self.waiting.remove(req)
                self._end(req, "cancelled")
                return True
        for req in list(self.running):
            if req.id == request_id:
                self._end(req, "cancelled")
                return True
        return False

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self._pending)

    # -- one step ------------------------------------------------------------------------------
    def step(self) -> list[Event]:
        events, self._pending = self._pending, []
        self._admit()
        self.counters["steps"] += 1
        decode = [(r, r.computed, 1) for r in self.running if not r.prefilling]
        if decode:
            events.extend(self._run("decode", decode))
        prefill = [(r, r.computed, min(self.prefill_chunk, len(r.prompt) - r.computed))
                   for r in self.running if r.prefilling]                # after decode: a failure may end some
        if prefill:
            events.extend(self._run("prefill", prefill))
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
            need = pages_for(len(req.prompt) + req.max_new_tokens - 1, self.block_size) - len(hits)
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

    def _bucket(self, ladder: list, need: int, what: str) -> int:
        for v in ladder:
            if v >= need:
                return v
        raise CapacityError(f"no {what} bucket covers {need} (largest {ladder[-1]})")   # refused at submit

    def _run(self, mode: str, rows: list) -> list[Event]:
        B = self._bucket(self.batch, len(rows), "batch")
        C = self._bucket(self.context, max(start + n for _, start, n in rows), "context")
        T, BS = self.program_tokens(mode, C), self.block_size
        self.counters_by_bucket[(mode, B, C)] = self.counters_by_bucket.get((mode, B, C), 0) + 1
        a = {"token_ids": np.zeros((B, T), np.int32), "positions": np.zeros((B, T), np.int32),
             "block_tables": np.zeros((B, C // BS), np.int32), "seq_lens": np.ones((B,), np.int32),
             "slot_mapping": np.full((B, T), -1, np.int32), "temperature": np.zeros((B,), np.float32),
             "top_k": np.zeros((B,), np.int32), "top_p": np.ones((B,), np.float32),
             "uniforms": np.zeros((B,), np.float32)}
        produces = []
        for r, (req, start, n) in enumerate(rows):
            while len(req.pages) < pages_for(start + n, BS):
                req.pages.append(self.pages.allocate())
                req.reserved -= 1
            pos = np.arange(start, start + n)
            a["token_ids"][r, :n] = req.tokens[start:start + n]
            a["positions"][r, :n] = pos
            a["slot_mapping"][r, :n] = np.asarray(req.pages, np.int64)[pos // BS] * BS + pos % BS
            a["block_tables"][r, :len(req.pages)] = req.pages
            a["seq_lens"][r] = start + n
            final = start + n >= len(req.tokens)          # this row's last token is the sequence's last
            produces.append(final)
            if final and req.temperature > 0:
                a["temperature"][r], a["top_k"][r], a["top_p"][r] = req.temperature, req.top_k, req.top_p
                a["uniforms"][r] = req.rng.random()
        try:
            ids = np.asarray(self.runner(mode, B, C, a))
        except Exception as e:                                   # the program failed: fail these rows, keep serving
            log.exception("serving: %s program (batch %d, context %d) failed", mode, B, C)
            events = []
            for req, _, _ in rows:
                events.append(self._end(req, "error", error=f"{type(e).__name__}: {e}", report=False))
            if self.on_failure is not None:
                events.extend(self.on_failure())
            return events
        events = []
        for r, (req, start, n) in enumerate(rows):
            req.computed = start + n
            self._register(req)
            if not produces[r]:
                continue
            token = int(ids[r])
            req.generated.append(token)
            self.counters["tokens_out"] += 1
            if token in req.stop_ids:
                events.append(self._end(req, "stop", [token], report=False))
            elif len(req.generated) >= req.max_new_tokens:
                events.append(self._end(req, "length", [token], report=False))
            else:
                events.append(Event(req.id, [token]))
        return events

    def _register(self, req: Request) -> None:
        full = min(req.computed, len(req.prompt)) // self.block_size
        for i in range(req.registered, full):
            self.pages.register(req.pages[i], req.hashes[i])
        req.registered = max(req.registered, full)

    def _end(self, req: Request, reason: str, tokens=(), error=None, report=True) -> Event:
        if req in self.running:
            self.running.remove(req)
        for page in req.pages:
            self.pages.release(page)
        req.pages, req.reserved = [], 0
        key = {"cancelled": "requests_cancelled", "error": "requests_failed"}.get(reason, "requests_finished")
        self.counters[key] += 1
        event = Event(req.id, list(tokens), True, reason, error)
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


def _sampling(temperature, top_k, top_p):
    try:
        temperature = float(temperature)
    except (TypeError, ValueError):
        raise ArgumentError(f"temperature must be a number >= 0, got {temperature!r}") from None
    if not temperature >= 0 or temperature == float("inf"):
        raise ArgumentError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is None:
        top_k = 0
    elif isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 0:
        raise ArgumentError(f"top_k must be a positive integer or None, got {top_k!r}")
    if top_p is None:
        top_p = 1.0
    else:
        try:
            top_p = float(top_p)
        except (TypeError, ValueError):
            raise ArgumentError(f"top_p must be a number in (0, 1] or None, got {top_p!r}") from None
        if not 0.0 < top_p <= 1.0:
            raise ArgumentError(f"top_p must be in (0, 1] or None, got {top_p!r}")
    return temperature, int(top_k), top_p


__all__ = ["Scheduler", "Event", "Request"]
