"""A request's state, the events a step reports, and the checks every value passes at submit.

Everything a request may ask for is validated here, before it is queued, so that a bad
value is refused naming its field (``ArgumentError.param``, the 400's ``param`` in the
server) and never reaches a program: sampling values are clamped to what the int32 and
float32 program inputs hold (top_k to the vocabulary), seeds must be non-negative.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ArgumentError

_F32_MAX = float(np.finfo(np.float32).max)
_F32_TINY = float(np.finfo(np.float32).tiny)     # the smallest normal float32, ~1.18e-38


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
    """One sequence the scheduler holds: its prompt, sampling settings, pages and progress."""
    id: str
    prompt: list
    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    rng: np.random.Generator
    stop_ids: frozenset
    hashes: list                 # the chained hash of every full prompt page (prefix cache keys)
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
    def n_tokens(self) -> int:
        """``len(tokens)``, without building ``tokens``."""
        return len(self.prompt) + len(self.generated)

    def token_span(self, start: int, end: int) -> list:
        """``tokens[start:end]`` without building ``tokens`` (a decode step reads only generated ids)."""
        P = len(self.prompt)
        if start >= P:
            return self.generated[start - P:end - P]
        return self.tokens[start:end]

    @property
    def prefilling(self) -> bool:
        return self.computed < len(self.prompt)


def pages_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def arg_error(param: str, message: str) -> ArgumentError:
    """An ArgumentError that names the request field (the server reports it as the 400's ``param``)."""
    error = ArgumentError(message)
    error.param = param
    return error


def check_prompt(prompt_ids, vocab_size: int) -> list:
    """``prompt_ids`` as a non-empty list of ints in ``0..vocab_size-1``; ArgumentError otherwise."""
    if isinstance(prompt_ids, (str, bytes)):
        raise ArgumentError("prompt_ids must be a list of token ids; tokenize text first (engine.tokenizer)")
    try:
        prompt = [int(t) for t in prompt_ids]
    except (TypeError, ValueError):
        raise ArgumentError(f"prompt_ids must be a list of integers, got {prompt_ids!r:.80}") from None
    if not prompt:
        raise ArgumentError("the prompt is empty; give at least one token id")
    bad = [t for t in prompt if not 0 <= t < vocab_size]
    if bad:
        raise ArgumentError(f"token id {bad[0]} is out of range: this model's vocabulary has ids 0.."
                            f"{vocab_size - 1}")
    return prompt


def check_max_new_tokens(max_new_tokens) -> int:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise arg_error("max_new_tokens", f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    return int(max_new_tokens)


def check_logprobs(logprobs, max_logprobs: int):
    """None, or the number of top entries per token (0..``max_logprobs``); ArgumentError otherwise."""
    if logprobs is None:
        return None
    if isinstance(logprobs, bool) or not isinstance(logprobs, (int, np.integer)) or logprobs < 0:
        raise arg_error("logprobs", f"logprobs must be None or a non-negative integer (top entries per "
                                    f"token), got {logprobs!r}")
    if not max_logprobs:
        raise arg_error("logprobs", "logprobs: this artifact's programs do not output log-probabilities (it "
                                    "was exported with top_logprobs=0 or by an older tlaloc); re-export it "
                                    "with `tlaloc export --top-logprobs 20`")
    if logprobs > max_logprobs:
        raise arg_error("logprobs", f"logprobs={logprobs}: this artifact returns at most {max_logprobs} "
                                    f"top log-probabilities per token; ask for fewer or re-export with a "
                                    f"larger --top-logprobs")
    return int(logprobs)


def check_sampling(temperature, top_k, top_p, vocab_size: int) -> tuple:
    """Validated ``(temperature, top_k, top_p)``, clamped to what the int32/float32 program inputs hold.

    top_k >= vocab_size keeps every token, so it is clamped to vocab_size (the same samples);
    None means 0 for top_k (no truncation) and 1.0 for top_p. A top_p below float32's smallest
    normal number (``np.finfo(np.float32).tiny``, ~1.18e-38) is raised to it: in float32 it
    would be 0 or subnormal (which XLA's CPU back end flushes to 0), and the programs of older
    artifacts then keep no token at all. Any top_p that small keeps just the most likely token
    (the smallest set whose probability reaches it), which is what it asks for.
    """
    try:
        temperature = float(temperature)
    except (TypeError, ValueError):
        raise arg_error("temperature", f"temperature must be a number >= 0, got {temperature!r}") from None
    if not 0 <= temperature <= _F32_MAX:
        raise arg_error("temperature", f"temperature must be a finite number >= 0 (a float32), got {temperature!r}")
    if top_k is None:
        top_k = 0
    elif isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 0:
        raise arg_error("top_k", f"top_k must be a positive integer or None, got {top_k!r}")
    if top_p is None:
        top_p = 1.0
    else:
        try:
            top_p = float(top_p)
        except (TypeError, ValueError):
            raise arg_error("top_p", f"top_p must be a number in (0, 1] or None, got {top_p!r}") from None
        if not 0.0 < top_p <= 1.0:
            raise arg_error("top_p", f"top_p must be in (0, 1] or None, got {top_p!r}")
        top_p = max(top_p, _F32_TINY)
    return temperature, min(int(top_k), int(vocab_size)), top_p


def check_seed(seed):
    """The entropy for ``np.random.default_rng``: None (fresh), or non-negative ints (an int s is ``[s, 0]``)."""
    if seed is None:
        return None
    parts = list(seed) if isinstance(seed, (tuple, list)) else [seed, 0]
    if not parts or any(isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 0 for p in parts):
        raise arg_error("seed", f"seed must be a non-negative integer (or a tuple of them), got {seed!r}")
    return [int(p) for p in parts]


__all__ = ["Event", "Request", "TokenLogprobs", "arg_error", "check_logprobs", "check_max_new_tokens",
           "check_prompt", "check_sampling", "check_seed", "pages_for"]
