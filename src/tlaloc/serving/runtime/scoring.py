"""Scoring text with an artifact: per-token log-probabilities, perplexity, and greedy agreement.

    engine = Engine("smol-art")                     # exported with score=True (`tlaloc export --score`)
    s = engine.score("The capital of France is Paris.")
    s.logprobs            # (n-1,) float32, nats: log p(ids[i+1] | ids[:i+1])
    s.prompt_logprobs     # vLLM's layout: [None, lp_1, ..., lp_{n-1}]
    perplexity(engine, text)                        # exp(mean negative log-likelihood per token)
    greedy_agreement(f32_ids, int8_ids)             # how far two greedy continuations agree

Scores come from the artifact's ``score`` programs (batch 1, one per context), which
run a whole sequence causally from position 0 with the served weights (f32, bf16 or
int8) and keys and values rounded to the KV pools' dtype, and return the log-softmax
of the next token at every position. A text longer than the largest context is
scored in overlapping windows (:func:`token_logprobs`), as transformers' perplexity
guide does. Runtime side: numpy only, no compiler module.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import ArgumentError, CapacityError


@dataclasses.dataclass(frozen=True)
class ScoreResult:
    """The log-probabilities of a token sequence under the model.

    token_ids: the n scored ids (the prompt, tokenized by the artifact's tokenizer if it was text).
    logprobs: (n-1,) float32, nats; ``logprobs[i] = log p(token_ids[i+1] | token_ids[:i+1])``.
      The first token has no prediction (nothing before it).
    greedy_ids: (n-1,) int32; ``greedy_ids[i]`` is the model's most likely token after
      ``token_ids[:i+1]`` (teacher-forced greedy prediction for position i+1).
    """
    token_ids: list
    logprobs: np.ndarray
    greedy_ids: np.ndarray

    @property
    def prompt_logprobs(self) -> list:
        """vLLM's ``prompt_logprobs`` layout: one entry per token, ``None`` for the first."""
        return [None] + [float(x) for x in self.logprobs]

    @property
    def nll(self) -> float:
        """Mean negative log-likelihood, nats per predicted token (nan when n < 2)."""
        return float(-np.mean(self.logprobs, dtype=np.float64)) if len(self.logprobs) else math.nan


def _is_int(t) -> bool:
    return isinstance(t, (int, np.integer)) and not isinstance(t, (bool, np.bool_))


def _ids(engine, prompt) -> list:
    if isinstance(prompt, str):
        ids = engine.encode(prompt)
    else:
        arr = prompt if isinstance(prompt, np.ndarray) else None
        ok = (arr.ndim == 1 and np.issubdtype(arr.dtype, np.integer)) if arr is not None else (
            isinstance(prompt, (list, tuple)) and all(_is_int(t) for t in prompt))
        if not ok:
            if arr is not None:
                what = f"an array of dtype {arr.dtype} and shape {arr.shape}"
            elif isinstance(prompt, (list, tuple)):
                bad = next(t for t in prompt if not _is_int(t))
                what = f"a {type(prompt).__name__} holding {bad!r} ({type(bad).__name__})"
            else:
                what = type(prompt).__name__
            raise ArgumentError(f"score: prompt must be a string or a list (or 1-D int array) of int token ids, "
                                f"got {what}; decode bytes to str first, and round float ids with care")
        ids = [int(t) for t in prompt]
    if not ids:
        raise ArgumentError("score: the prompt is empty; pass at least one token")
    bad = [t for t in ids if not 0 <= t < engine.vocab_size]
    if bad:
        raise ArgumentError(f"score: token id {bad[0]} is out of range 0..{engine.vocab_size - 1}")
    return ids


def score_contexts(engine) -> list:
    """The context lengths of the artifact's score programs, ascending (empty if it has none)."""
    return sorted(C for (mode, B, C, _) in engine.executor.programs if mode == "score" and B == 1)


def score(engine, prompt) -> ScoreResult:
    """Score one sequence (a string, or a list of token ids) in a single score program call.

    Runs ``score_b1_c<C>`` for the smallest exported C >= len(ids). Returns a ScoreResult.
    Raises ArgumentError (encoder artifact, no score programs, empty prompt, id out of
    range) and CapacityError (longer than the largest score context: use
    :func:`token_logprobs`, which scores in windows).
    """
    if engine.kind != "decoder":
        raise ArgumentError(f"score: {engine.path} is an encoder artifact; score needs a decoder")
    contexts = score_contexts(engine)
    if not contexts:
        raise ArgumentError(f"score: {engine.path} has no score programs; re-export it with "
                            f"`tlaloc export --score` (export(..., score=True))")
    ids = _ids(engine, prompt)
    n = len(ids)
    if n > contexts[-1]:
        raise CapacityError(f"score: {n} tokens is over the artifact's largest context {contexts[-1]}; use "
                            f"tlaloc.serving.token_logprobs (windows) or export with a larger --context")
    C = next(c for c in contexts if c >= n)
    token_ids = np.zeros((1, C), np.int32)                              # (1, C), padded with token 0
    token_ids[0, :n] = ids
    request = {"token_ids": token_ids, "seq_lens": np.array([n], np.int32)}
    outs = engine.call_program("score", 1, C, request)
    logprobs = np.asarray(outs[0])[0, :n - 1].astype(np.float32)      # (n-1,) nats
    greedy = np.asarray(outs[1])[0, :n - 1].astype(np.int32)          # (n-1,)
    return ScoreResult(ids, logprobs, greedy)


def token_logprobs(engine, prompt, *, window: int | None = None, stride: int | None = None) -> ScoreResult:
    """Score a sequence of any length in windows of at most ``window`` tokens.

    The first window scores tokens 1..window-1 from position 0; each later one scores the
    next ``stride`` tokens, conditioned on the ``window - stride`` tokens before them
    (every token is scored once, with at least ``window - stride`` tokens of context
    once past the first window). window: default the largest score context; stride:
    default ``window // 2``; need ``2 <= window <= largest context`` and
    ``1 <= stride < window`` (ArgumentError otherwise).
    """
    contexts = score_contexts(engine) if engine.kind == "decoder" else []
    if not contexts:
        return score(engine, prompt)                                    # raises, naming why
    for label, v in (("window", window), ("stride", stride)):
        if v is not None and not _is_int(v):
            raise ArgumentError(f"token_logprobs: {label} must be an int or None, got {v!r} "
                                f"({type(v).__name__})")
    ids = _ids(engine, prompt)
    W = contexts[-1] if window is None else int(window)
    S = W // 2 if stride is None else int(stride)
    if not 2 <= W <= contexts[-1]:
        raise ArgumentError(f"token_logprobs: window={W}; use 2..{contexts[-1]} (the largest score context)")
    if not 1 <= S < W:
        raise ArgumentError(f"token_logprobs: stride={S}; use 1..{W - 1} (less than window={W})")
    n = len(ids)
    logprobs, greedy = np.zeros(max(n - 1, 0), np.float32), np.zeros(max(n - 1, 0), np.int32)
    a, b, lo = 1, min(W, n), 0                                          # score targets a..b-1 from ids[lo:b]
    while a < n:
        r = score(engine, ids[lo:b])
        logprobs[a - 1:b - 1] = r.logprobs[a - lo - 1:]
        greedy[a - 1:b - 1] = r.greedy_ids[a - lo - 1:]
        a, b = b, min(b + S, n)
        lo = max(0, b - W)
    return ScoreResult(ids, logprobs, greedy)


def perplexity(engine, text, *, window: int | None = None, stride: int | None = None) -> float:
    """exp(mean negative log-likelihood, nats per token) of ``text`` (a string or token ids).

    The text is tokenized by the artifact's tokenizer (its default special tokens); every
    token after the first is predicted once (:func:`token_logprobs`, same ``window`` and
    ``stride``). Raises ArgumentError for fewer than 2 tokens, and as ``token_logprobs``.
    """
    r = token_logprobs(engine, text, window=window, stride=stride)
    if len(r.logprobs) == 0:
        raise ArgumentError("perplexity: the text has one token; nothing to predict")
    return float(math.exp(r.nll))


@dataclasses.dataclass(frozen=True)
class Agreement:
    """How a candidate id sequence agrees with a reference, position by position.

    total: positions compared (the shorter length); matching: positions with equal ids;
    prefix: equal ids before the first difference; first_divergence: that index, or
    None when all ``total`` agree.
    """
    total: int
    matching: int
    prefix: int
    first_divergence: int | None


def greedy_agreement(reference, candidate) -> Agreement:
    """Compare two token-id sequences (e.g. greedy continuations of f32 and int8 artifacts)."""
    ref, got = [int(t) for t in reference], [int(t) for t in candidate]
    total = min(len(ref), len(got))
    diff = [i for i in range(total) if ref[i] != got[i]]
    first = diff[0] if diff else None
    return Agreement(total, total - len(diff), total if first is None else first, first)


__all__ = ["ScoreResult", "Agreement", "score", "score_contexts", "token_logprobs", "perplexity",
           "greedy_agreement"]
