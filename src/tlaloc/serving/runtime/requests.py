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


def is_int(value) -> bool:
    """True for a Python or NumPy integer (bools excluded: True is not a token id or a seed)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value) -> bool:
    """True for a Python or NumPy int or float (bools and strings excluded)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_token_ids(ids, vocab_size: int | None, name: str, param: str | None = None) -> list:
    """``ids`` (a list, tuple, range or 1-D array of integers) as a list of ints, each in
    ``0..vocab_size-1`` (``vocab_size`` None: any non-negative id).

    Nothing is coerced: a float (1.9), a string ("12") or a bool is refused, as is a mapping or a
    set (no order), naming ``name`` (and with ``param`` set on the error); NumPy integers are accepted."""
    def refuse(message):
        return arg_error(param, message) if param else ArgumentError(message)
    if isinstance(ids, (str, bytes)):
        raise refuse(f"{name} must be a list of integer token ids, not the string {ids!r:.80}; tokenize text "
                     f"first (engine.encode)")
    if isinstance(ids, np.ndarray) and ids.ndim != 1:
        raise refuse(f"{name} must be a 1-D list of token ids, got an array of shape {ids.shape}")
    if not isinstance(ids, (list, tuple, range, np.ndarray)):
        raise refuse(f"{name} must be a list of integer token ids, got a {type(ids).__name__}: {ids!r:.80}")
    bad = [t for t in ids if not is_int(t)]
    if bad:
        raise refuse(f"{name} must hold integer token ids only, got {bad[0]!r} ({type(bad[0]).__name__}); "
                     f"convert the ids to int first")
    out = [int(t) for t in ids]
    bad = [t for t in out if t < 0 or (vocab_size is not None and t >= vocab_size)]
    if bad:
        span = f"0..{vocab_size - 1}" if vocab_size is not None else "0 and up"
        raise refuse(f"{name}: token id {bad[0]} is out of range: this model's vocabulary has ids {span}")
    return out


def check_prompt(prompt_ids, vocab_size: int) -> list:
    """``prompt_ids`` as a non-empty list of ints in ``0..vocab_size-1``; ArgumentError otherwise."""
    prompt = check_token_ids(prompt_ids, vocab_size, "prompt_ids")
    if not prompt:
        raise ArgumentError("the prompt is empty; give at least one token id")
    return prompt


def check_stop_ids(stop_ids) -> frozenset:
    """``stop_ids`` (token ids that end a request: non-negative ints; one outside the vocabulary
    never matches) as a frozenset; ArgumentError (``param`` stop_ids) otherwise."""
    if isinstance(stop_ids, (set, frozenset)):
        stop_ids = list(stop_ids)
    return frozenset(check_token_ids(stop_ids, None, "stop_ids", param="stop_ids"))


def check_max_new_tokens(max_new_tokens) -> int:
    if not is_int(max_new_tokens) or max_new_tokens < 1:
        raise arg_error("max_new_tokens", f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    return int(max_new_tokens)


def check_logprobs(logprobs, max_logprobs: int):
    """None, or the number of top entries per token (0..``max_logprobs``); ArgumentError otherwise."""
    if logprobs is None:
        return None
    if not is_int(logprobs) or logprobs < 0:
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
    if not is_number(temperature):
        raise arg_error("temperature", f"temperature must be a number >= 0 (0: greedy), got {temperature!r} "
                                       f"({type(temperature).__name__})")
    temperature = float(temperature)
    if not 0 <= temperature <= _F32_MAX:
        raise arg_error("temperature", f"temperature must be a finite number >= 0 (a float32), got {temperature!r}")
    if top_k is None:
        top_k = 0
    elif not is_int(top_k) or top_k < 0:
        raise arg_error("top_k", f"top_k must be a positive integer or None, got {top_k!r}")
    if top_p is None:
        top_p = 1.0
    else:
        if not is_number(top_p):
            raise arg_error("top_p", f"top_p must be a number in (0, 1] or None, got {top_p!r} "
                                     f"({type(top_p).__name__})")
        top_p = float(top_p)
        if not 0.0 < top_p <= 1.0:
            raise arg_error("top_p", f"top_p must be in (0, 1] or None, got {top_p!r}")
        top_p = max(top_p, _F32_TINY)
    return temperature, min(int(top_k), int(vocab_size)), top_p


def check_seed(seed):
    """The entropy for ``np.random.default_rng``: None (fresh), or non-negative ints (an int s is ``[s, 0]``)."""
    if seed is None:
        return None
    parts = list(seed) if isinstance(seed, (tuple, list)) else [seed, 0]
    if not parts or any(not is_int(p) or p < 0 for p in parts):
        raise arg_error("seed", f"seed must be a non-negative integer (or a tuple of them), got {seed!r}")
    return [int(p) for p in parts]


__all__ = ["Event", "Request", "TokenLogprobs", "arg_error", "check_logprobs", "check_max_new_tokens",
           "check_prompt", "check_sampling", "check_seed", "check_stop_ids", "check_token_ids", "is_int", "is_number",
           "pages_for"]
