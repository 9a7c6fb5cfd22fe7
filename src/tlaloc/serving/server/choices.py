"""One HTTP generation request: its choices, submitted to the engine, streamed back as text.

A request with P prompts and ``n`` choices submits P*n engine requests, named
``{request_id}-{choice}``; choice ``i`` of prompt ``p`` has OpenAI index ``p*n + i``.
With a ``seed``, sample 0 of prompt ``p`` is seeded ``(seed, p)``, exactly as
``Engine.generate(prompts, seed=seed)`` seeds prompt ``p`` (so the server's answers equal
``generate``'s), and sample ``i > 0`` is seeded ``(seed, p, i)``: the ``n`` samples differ,
and each replays. All choices share one
asyncio queue that the engine thread feeds. :meth:`Generation.deltas` turns events into
``(choice, text, finish_reason)`` as text becomes final; :meth:`Generation.close`
cancels whatever is unfinished, which frees its KV pages (a client that went away, a
stop string, an error).
"""
from __future__ import annotations

import asyncio
import dataclasses
import time

from ..errors import QueueFullError
from ..runtime.detok import TextStream
from .openai_schema import OpenAIError

_FINISH_REASONS = {"stop": "stop", "eos": "stop", "stop_token": "stop", "length": "length",
                   "max_tokens": "length"}


def _choice_seed(seed: int, prompt: int, sample: int) -> tuple:
    """``(seed, prompt)`` as ``Engine.generate`` seeds prompt ``prompt``; extra samples add their number."""
    return (seed, prompt) if sample == 0 else (seed, prompt, sample)


class ClientGone(Exception):
    """The client disconnected while its answer was being generated."""


@dataclasses.dataclass
class Choice:
    index: int
    request_id: str
    text: TextStream
    tokens: int = 0
    finish_reason: str | None = None
    submitted: bool = False
    logprobs: list = dataclasses.field(default_factory=list)   # TokenLogprobs of every token, when asked
    logprobs_taken: int = 0                                     # how many a stream has sent
    text_offset: int = 0                                        # where the next token's text starts
    text_pending: bytes = b""                                   # the bytes of a character not yet finished

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def take_logprobs(self) -> list:
        """The TokenLogprobs received since the last call (a stream sends each token's once)."""
        new = self.logprobs[self.logprobs_taken:]
        self.logprobs_taken = len(self.logprobs)
        return new


class Generation:
    """Choices of one request. Use as ``await gen.start()``, iterate ``gen.deltas()``, ``gen.close()``.

    Arguments:
        runner: the server's :class:`~tlaloc.serving.runtime.engine_thread.EngineRunner`.
        tokenizer: the engine's ``tokenizers.Tokenizer``.
        request_id: the response id; engine requests are ``{request_id}-{choice}``.
        prompts: token ids per prompt.
        n: choices per prompt.
        sampling: ``max_new_tokens``, ``temperature``, ``top_k``, ``top_p``, ``seed``, ``stop_ids``,
            and ``logprobs`` (top entries per token) when the client asked for log-probabilities.
        stop: stop strings (the text ends before the first one).
    """

    def __init__(self, runner, tokenizer, *, request_id: str, prompts: list[list[int]], n: int,
                 sampling: dict, stop: list[str]):
        self.runner, self.request_id, self.prompts = runner, request_id, prompts
        self.sampling, self.n = sampling, n
        self.queue: asyncio.Queue = asyncio.Queue()
        self.choices = [Choice(i, f"{request_id}-{i}", TextStream(tokenizer, stop))
                        for i in range(len(prompts) * n)]
        self._by_id = {c.request_id: c for c in self.choices}
        self._next_check = 0.0

    async def start(self, is_disconnected=None, check_every: int = 4) -> None:
        """Submit every choice; a refusal cancels the ones already taken and raises a 400.

        ``is_disconnected`` (an async callable) is asked every ``check_every`` submissions:
        a client that went away stops the submitting, what was taken is cancelled, and
        :class:`ClientGone` is raised (so 10,000 prompts never run for nobody).
        """
        for choice in self.choices:
            if is_disconnected is not None and choice.index % check_every == 0 and await is_disconnected():
                self.close()
                raise ClientGone()
            sampling = dict(self.sampling)
            if sampling.get("seed") is not None:
                sampling["seed"] = _choice_seed(sampling["seed"], choice.index // self.n, choice.index % self.n)
            choice.submitted = True              # before the await: a cancel then still reaches it
            try:
                await self.runner.submit(list(self.prompts[choice.index // self.n]), self.queue,
                                         request_id=choice.request_id, **sampling)
            except QueueFullError as exc:         # back-pressure: the client may retry later
                self.close()
                raise OpenAIError(429, str(exc), type="server_error", code="queue_full") from None
            except ValueError as exc:             # over capacity, bad ids or values: the engine's refusal
                self.close()
                raise OpenAIError(400, str(exc), param=getattr(exc, "param", None) or "prompt",
                                  code="invalid_prompt") from None
            except RuntimeError as exc:          # the engine thread is shutting down or died
                self.close()
                raise OpenAIError(503, str(exc), type="server_error", code="engine_unavailable") from None

    async def deltas(self, is_disconnected=None, poll_s: float = 0.25):
        """Yield ``(choice, text, finish_reason)``: new final text, and the reason once a choice ends.

        ``is_disconnected`` (an async callable) is polled while waiting; when it says so,
        :class:`ClientGone` is raised (the caller's ``close()`` then cancels).
        """
        while not all(c.done for c in self.choices):
            event = await self._next_event(is_disconnected, poll_s)
            choice = self._by_id.get(event.request_id)
            if choice is None or choice.done:
                continue
            if event.error:
                raise OpenAIError(500, f"generation failed: {event.error}", type="server_error",
                                  code="engine_error")
            choice.tokens += len(event.token_ids)
            choice.logprobs.extend(getattr(event, "logprobs", None) or ())
            delta = choice.text.push(event.token_ids)
            if choice.text.stopped:
                choice.finish_reason = "stop"
                if not event.finished:
                    self.runner.cancel(choice.request_id)
            elif event.finished:
                delta += choice.text.finish()
                choice.finish_reason = _FINISH_REASONS.get(event.finish_reason or "", event.finish_reason
                                                          or "stop")
            if delta or choice.done:
                yield choice, delta, choice.finish_reason

    async def _next_event(self, is_disconnected, poll_s: float):
        if is_disconnected is None:
            return await self.queue.get()
        while True:                      # events may never pause, so check the clock, not just timeouts
            now = time.monotonic()
            if now >= self._next_check:
                self._next_check = now + poll_s
                if await is_disconnected():
                    raise ClientGone()
            try:
                return await asyncio.wait_for(self.queue.get(), poll_s)
            except asyncio.TimeoutError:
                continue

    def close(self) -> None:
        """Cancel every choice that is still running (frees its pages). Safe to call twice."""
        for choice in self.choices:
            if choice.submitted and not choice.done:
                choice.finish_reason = "cancelled"
                self.runner.cancel(choice.request_id)

    def usage(self) -> dict:
        prompt = sum(len(p) for p in self.prompts)
        completion = sum(c.tokens for c in self.choices)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
