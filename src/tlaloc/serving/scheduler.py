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

One request's fault fails only that request: every value is validated (and top_k clamped
to the vocabulary) at :meth:`Scheduler.submit`; a row whose inputs cannot be built fails
alone; and when a program call fails with the KV pools intact, its rows are re-run one at
a time so that only the row at fault fails (re-running writes the same keys and values and
reuses the drawn uniforms). Only a failure that consumed the donated pools ends every
running request (``on_failure``).
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
class TokenLogprobs:
    """One generated token's log-probabilities (nats, float32, from the model's full-vocabulary
    log-softmax before temperature or truncation): its own, and the ``top`` most likely
    ``(token id, logprob)`` pairs, most likely first."""
    token_id: int
    logprob: float
    top: tuple = ()


@dataclasses.dataclass(frozen=True)
class Event:
    """What one step did for one request: new token ids, and whether (and why) it finished.

    finish_reason: "stop" (a stop id was produced; it is included in token_ids), "length"
    (max_new_tokens reached), "cancelled", or "error" (then ``error`` holds the message).
    logprobs: for a request submitted with ``logprobs``, one :class:`TokenLogprobs` per token
    of ``token_ids``; otherwise None.
    """
    request_id: str
    token_ids: list
    finished: bool = False
    finish_reason: str | None = None
    error: str | None = None
    logprobs: list | None = None


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
    logprobs: int | None = None  # top entries wanted per token (None: no log-probabilities)

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

    runner(mode, B, C, arrays) runs the (mode, B, C) program on the request arrays (token_ids,
    positions, block_tables, seq_lens, slot_mapping, temperature, top_k, top_p, uniforms,
    want_logprobs) and returns the next token ids (B,), or its outputs by role: a dict with
    ``next_token_ids`` and, when ``max_logprobs`` > 0, ``token_logprob`` (B,), ``top_logprobs``
    and ``top_ids`` (B, max_logprobs).
    """

    def __init__(self, *, batch: list, context: list, program_tokens: Callable, block_size: int, num_pages: int,
                 prefill_chunk: int, vocab_size: int, runner: Callable, max_waiting: int = 1024,
                 on_failure: Callable | None = None, max_logprobs: int = 0):
        self.batch, self.context = list(batch), list(context)
        self.program_tokens = program_tokens
        self.block_size, self.prefill_chunk = block_size, prefill_chunk
        self.vocab_size = vocab_size
        self.runner, self.on_failure = runner, on_failure
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
        prompt = self._check_prompt(prompt_ids)
        logprobs = self._check_logprobs(logprobs)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
            raise _arg_error("max_new_tokens", f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        max_new_tokens = int(max_new_tokens)
        temperature, top_k, top_p = _sampling(temperature, top_k, top_p, self.vocab_size)
        seed = _seed(seed)
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
        rng = np.random.default_rng(seed)
        stops = frozenset(int(s) for s in stop_ids)
        self.waiting.append(Request(rid, prompt, max_new_tokens, temperature, top_k, top_p, rng, stops,
                                    page_hashes(prompt, self.block_size), logprobs=logprobs))
        return rid

    def _check_logprobs(self, logprobs):
        if logprobs is None:
            return None
        if isinstance(logprobs, bool) or not isinstance(logprobs, (int, np.integer)) or logprobs < 0:
            raise _arg_error("logprobs", f"logprobs must be None or a non-negative integer (top entries per "
                                         f"token), got {logprobs!r}")
        if not self.max_logprobs:
            raise _arg_error("logprobs", "logprobs: this artifact's programs do not output log-probabilities (it "
                                         "was exported with top_logprobs=0 or by an older tlaloc); re-export it "
                                         "with `tlaloc export --top-logprobs 20`")
        if logprobs > self.max_logprobs:
            raise _arg_error("logprobs", f"logprobs={logprobs}: this artifact returns at most {self.max_logprobs} "
                                         f"top log-probabilities per token; ask for fewer or re-export with a "
                                         f"larger --top-logprobs")
        return int(logprobs)

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

    def fail(self, request_id: str, message: str) -> bool:
        """End a waiting or running request with an error (counted as failed, not cancelled)."""
        for req in itertools.chain(list(self.waiting), list(self.running)):
            if req.id == request_id:
                if req in self.waiting:
                    self.waiting.remove(req)
                self._end(req, "error", error=message)
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
        """Run ``rows`` [(request, start, n)] through one program; a row that fails fails alone."""
        events, prepared = [], []
        C = self._bucket(self.context, max(start + n for _, start, n in rows), "context")
        T = self.program_tokens(mode, C)
        for row in rows:
            try:
                prepared.append((row, self._row_arrays(row, T, C)))
            except Exception as e:  # noqa: BLE001 - this request's values; never the batch's problem
                log.warning("serving: request %s failed while its inputs were built: %s: %s", row[0].id,
                            type(e).__name__, e)
                events.append(self._end(row[0], "error", error=f"{type(e).__name__}: {e}", report=False))
        if prepared:
            events.extend(self._call(mode, prepared, C))
        return events

    def _row_arrays(self, row, T: int, C: int) -> dict:
        """One request's row of the program inputs (takes the pages the row needs)."""
        req, start, n = row
        BS = self.block_size
        while len(req.pages) < pages_for(start + n, BS):
            req.pages.append(self.pages.allocate())
            req.reserved -= 1
        a = _empty_inputs(1, T, C // BS)
        pos = np.arange(start, start + n)
        a["token_ids"][0, :n] = req.tokens[start:start + n]
        a["positions"][0, :n] = pos
        a["slot_mapping"][0, :n] = np.asarray(req.pages, np.int64)[pos // BS] * BS + pos % BS
        a["block_tables"][0, :len(req.pages)] = req.pages
        a["seq_lens"][0] = start + n
        if start + n >= len(req.tokens) and req.temperature > 0:      # this row samples the next token
            a["temperature"][0], a["top_k"][0], a["top_p"][0] = req.temperature, req.top_k, req.top_p
            a["uniforms"][0] = req.rng.random()
        if start + n >= len(req.tokens) and req.logprobs is not None:
            a["want_logprobs"][0] = 1
        return a

    def _call(self, mode: str, prepared: list, C: int) -> list[Event]:
        """One program call over the prepared rows. If it fails and the KV pools survived, each row is
        re-run alone so that only the row at fault fails (re-running writes the same keys and values)."""
        B = self._bucket(self.batch, len(prepared), "batch")
        first = prepared[0][1]
        a = {name: np.concatenate([x[name] for _, x in prepared] +
                                  [np.broadcast_to(_FILL[name], (B - len(prepared),) + first[name].shape[1:])
                                   .astype(first[name].dtype)]) for name in first}
        self.counters_by_bucket[(mode, B, C)] = self.counters_by_bucket.get((mode, B, C), 0) + 1
        try:
            out = self.runner(mode, B, C, a)
            out = out if isinstance(out, dict) else {"next_token_ids": out}
            ids = np.asarray(out["next_token_ids"])
        except Exception as e:                                   # the program failed: keep serving
            log.warning("serving: %s program (batch %d, context %d, %d rows) failed: %s: %s", mode, B, C,
                        len(prepared), type(e).__name__, e)
            lost = self.on_failure() if self.on_failure is not None else []
            if lost:
                return lost                                     # the KV pools are gone: every request ended
            if len(prepared) > 1:
                return [ev for item in prepared for ev in self._call(mode, [item], C)]
            return [self._end(prepared[0][0][0], "error", error=f"{type(e).__name__}: {e}", report=False)]
        events = []
        for r, ((req, start, n), _) in enumerate(prepared):
            req.computed = start + n
            self._register(req)
            if start + n < len(req.tokens):
                continue                                          # a prefill chunk that is not the last
            token = int(ids[r])
            req.generated.append(token)
            self.counters["tokens_out"] += 1
            lp = None if req.logprobs is None else [_token_logprobs(out, r, token, req.logprobs)]
            if token in req.stop_ids:
                events.append(self._end(req, "stop", [token], report=False, logprobs=lp))
            elif len(req.generated) >= req.max_new_tokens:
                events.append(self._end(req, "length", [token], report=False, logprobs=lp))
            else:
                events.append(Event(req.id, [token], logprobs=lp))
        return events

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


_FILL = {"token_ids": 0, "positions": 0, "block_tables": 0, "seq_lens": 1, "slot_mapping": -1, "temperature": 0.0,
         "top_k": 0, "top_p": 1.0, "uniforms": 0.0, "want_logprobs": 0}
_DTYPES = {"temperature": np.float32, "top_p": np.float32, "uniforms": np.float32}
_F32_MAX = float(np.finfo(np.float32).max)


def _token_logprobs(out: dict, row: int, token: int, top: int) -> TokenLogprobs:
    """Row ``row`` of a program's log-probability outputs (see :class:`Scheduler`)."""
    ids, values = out["top_ids"][row, :top], out["top_logprobs"][row, :top]
    return TokenLogprobs(token, float(out["token_logprob"][row]),
                         tuple((int(i), float(v)) for i, v in zip(ids, values)))


def _empty_inputs(B: int, T: int, pages: int) -> dict:
    """Program inputs for B padding rows: (B, T) token_ids/positions/slot_mapping, (B, pages)
    block_tables, (B,) seq_lens/temperature/top_k/top_p/uniforms/want_logprobs (an engine
    passes a program only the inputs it has)."""
    shapes = {"token_ids": (B, T), "positions": (B, T), "slot_mapping": (B, T), "block_tables": (B, pages)}
    return {name: np.full(shapes.get(name, (B,)), fill, _DTYPES.get(name, np.int32)) for name, fill in _FILL.items()}


def _arg_error(param: str, message: str) -> ArgumentError:
    """An ArgumentError that names the request field (the server reports it as the 400's ``param``)."""
    error = ArgumentError(message)
    error.param = param
    return error


def _sampling(temperature, top_k, top_p, vocab_size: int):
    """Validated sampling values, clamped to what the int32/float32 program inputs hold.

    top_k >= vocab_size keeps every token, so it is clamped to vocab_size (the same samples).
    """
    try:
        temperature = float(temperature)
    except (TypeError, ValueError):
        raise _arg_error("temperature", f"temperature must be a number >= 0, got {temperature!r}") from None
    if not 0 <= temperature <= _F32_MAX:
        raise _arg_error("temperature", f"temperature must be a finite number >= 0 (a float32), got {temperature!r}")
    if top_k is None:
        top_k = 0
    elif isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 0:
        raise _arg_error("top_k", f"top_k must be a positive integer or None, got {top_k!r}")
    if top_p is None:
        top_p = 1.0
    else:
        try:
            top_p = float(top_p)
        except (TypeError, ValueError):
            raise _arg_error("top_p", f"top_p must be a number in (0, 1] or None, got {top_p!r}") from None
        if not 0.0 < top_p <= 1.0:
            raise _arg_error("top_p", f"top_p must be in (0, 1] or None, got {top_p!r}")
    return temperature, min(int(top_k), int(vocab_size)), top_p


def _seed(seed):
    """The entropy for ``np.random.default_rng``: None (fresh), or non-negative ints (an int s is ``[s, 0]``)."""
    if seed is None:
        return None
    parts = list(seed) if isinstance(seed, (tuple, list)) else [seed, 0]
    if not parts or any(isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 0 for p in parts):
        raise _arg_error("seed", f"seed must be a non-negative integer (or a tuple of them), got {seed!r}")
    return [int(p) for p in parts]


__all__ = ["Scheduler", "Event", "Request", "TokenLogprobs"]
