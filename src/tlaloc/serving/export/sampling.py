"""Token sampling inside the serving programs, written with ``tlaloc.numpy`` (traced into each program).

Per row, the same recipe as the eager reference (:func:`tlaloc.serving.export.reference.sample_next`):
``temperature == 0`` is greedy (argmax; the lowest id wins a tie). Otherwise the logits
are divided by the temperature, sorted largest first, cut to the ``top_k`` largest
(``0`` keeps all), then to the smallest set whose probability reaches ``top_p``
(``>= 1`` keeps all; the best token is always kept), renormalised, and the token whose
cumulative probability first exceeds the row's uniform draw ``u`` in [0, 1) is taken.

The uniform draws come in as an input: the runtime draws them on the host from each
request's own seeded generator (``numpy.random.default_rng``), so a request's samples
depend on its seed only, never on which other requests share its batch.

Positions along the sorted axis come from a prefix sum of ones, not an ``arange``
constant, so no vocabulary-sized literal is written into the program text. The sort
runs only when some row samples (a ``tl.cond`` on ``any(temperature > 0)``);
an all-greedy batch pays for one argmax.
"""
from __future__ import annotations

import numpy as np

from ... import numpy as tnp
from ..._frontend.tracing import cond
from ..._prims.serving import sort_descending


_BLOCK = 32
_UPPER = np.triu(np.ones((_BLOCK, _BLOCK), np.float32))                 # U[i, j] = 1 where i <= j


def prefix_sum(x):
    """Inclusive prefix sum along the last axis of x (B, n) float32 -> (B, n).

    Blocked: sums within blocks of 32 are one matmul with a triangular matrix, and the
    block totals' exclusive prefix sum (the same function, recursively) is added back.
    A ``reduce_window`` cumsum is O(n^2) on XLA's CPU back end (n is the vocabulary
    here) and a log-step scan costs many ops to compile; this is a few ops a level.
    """
    B, n = x.shape
    nb = -(-n // _BLOCK)
    if nb * _BLOCK != n:
        x = tnp.concatenate([x, tnp.zeros((B, nb * _BLOCK - n), x.dtype)], axis=-1)      # (B, nb*32)
    within = tnp.reshape(tnp.matmul(tnp.reshape(x, (B * nb, _BLOCK)), _UPPER), (B, nb, _BLOCK))  # (B, nb, 32)
    if nb > 1:
        totals = within[:, :, _BLOCK - 1]                                                # (B, nb)
        within = within + (prefix_sum(totals) - totals)[:, :, None]                      # + mass of earlier blocks
    return tnp.reshape(within, (B, nb * _BLOCK))[:, :n]                                  # (B, n)


def _draw(logits, temperature, top_k, top_p, uniforms, greedy):
    B, V = logits.shape
    t = tnp.where(temperature > 0, temperature, np.float32(1.0))                 # (B,)
    vals, order = sort_descending(logits / t[:, None])                            # (B, V) each, best first
    rank = prefix_sum(tnp.ones_like(vals)) - np.float32(1.0)                      # (B, V) 0, 1, ... (exact)
    k = tnp.astype(tnp.where(top_k > 0, tnp.minimum(top_k, V), V), tnp.float32)  # (B,)
    in_k = tnp.less(rank, k[:, None])                                             # (B, V)
    e = tnp.where(in_k, tnp.exp(vals - vals[:, :1]), np.float32(0.0))             # (B, V)
    probs = e / tnp.sum(e, axis=-1, keepdims=True)                                # (B, V)
    before = prefix_sum(probs) - probs                                            # (B, V) mass ahead
    in_p = tnp.logical_or(tnp.less(before, top_p[:, None]), (top_p >= 1.0)[:, None])
    in_p = tnp.logical_or(in_p, tnp.less(rank, np.float32(1.0)))                 # the best token, always:
    # a top_p that is 0 in float32 (or subnormal, flushed to 0 on XLA CPU) would keep no token
    kept = tnp.logical_and(in_k, in_p)                                            # (B, V)
    p = tnp.where(kept, probs, np.float32(0.0))
    p = p / tnp.sum(p, axis=-1, keepdims=True)                                    # (B, V)
    n_kept = tnp.sum(tnp.astype(kept, tnp.float32), axis=-1)                      # (B,)
    below = tnp.less_equal(prefix_sum(p), uniforms[:, None])                      # (B, V)
    choice = tnp.minimum(tnp.sum(tnp.astype(below, tnp.float32), axis=-1), n_kept - 1)  # (B,)
    picked = tnp.where(tnp.equal(rank, choice[:, None]), order, 0)                # (B, V)
    sampled = tnp.sum(picked, axis=-1)                                            # (B,) int32
    return tnp.where(temperature > 0, tnp.astype(sampled, tnp.int32), greedy)


def _keep(logits, temperature, top_k, top_p, uniforms, greedy):
    return greedy


def _top_logprobs(logits, ids, k: int):
    B, V = logits.shape
    logp = logits - tnp.logsumexp(logits, axis=-1, keepdims=True)                # (B, V) float32, nats
    hit = tnp.equal(prefix_sum(tnp.ones_like(logp)) - np.float32(1.0),
                    tnp.astype(ids, tnp.float32)[:, None])                        # (B, V) the sampled id
    chosen = tnp.sum(tnp.where(hit, logp, np.float32(0.0)), axis=-1)              # (B,)
    vals, order = sort_descending(logp)                                           # (B, V) best first
    return [chosen, vals[:, :k], order[:, :k]]


def _no_logprobs(logits, ids, k: int):
    B = logits.shape[0]
    return [tnp.zeros((B,), tnp.float32), tnp.zeros((B, k), tnp.float32), tnp.zeros((B, k), tnp.int32)]


def token_logprobs(logits, ids, want, k: int):
    """Log-probabilities for the OpenAI ``logprobs`` fields, computed in the program.

    logits (B, V) float32 (the model's, before temperature or truncation); ids (B,) int32
    the tokens chosen; want (B,) int32, nonzero where a row asked for log-probabilities;
    k the export-time maximum of top entries. Returns ``[chosen (B,) f32, top_values (B, k)
    f32, top_ids (B, k) i32]``: ``log_softmax(logits)[b, ids[b]]`` and the k largest
    entries of ``log_softmax(logits)[b]``, largest first (ties: lower id first), all in
    nats. The log-softmax is over the full vocabulary in float32 (OpenAI's and vLLM's
    convention: the model's distribution, not the sampling one). All zeros when no row
    wants them (a ``tl.cond``: a batch without logprobs pays for no sort).
    """
    return cond(tnp.any(want > 0), lambda lg, i: _top_logprobs(lg, i, k), lambda lg, i: _no_logprobs(lg, i, k),
                logits, ids)


def greedy_ids(logits):
    """``argmax(logits, axis=-1)`` as int32 (..., ): the lowest id wins a tie, and a row holding a
    NaN gives its first NaN's id, as NumPy's argmax does.

    Written as two plain reductions (the largest value, then the lowest id holding it) rather
    than one reduction of (value, id) pairs: XLA CPU runs the paired reduction element by
    element, 0.96 ms for (8, 49152) logits against 0.23 ms for these two (jaxlib 0.10.2, 2 cores).
    """
    V = logits.shape[-1]
    top = tnp.max(logits, axis=-1, keepdims=True)                                  # (..., 1); NaN if any
    ids = np.arange(V, dtype=np.int32)                                             # (V,)
    hit = tnp.logical_or(tnp.equal(logits, top), tnp.isnan(logits))               # (..., V)
    return tnp.min(tnp.where(hit, ids, np.int32(V)), axis=-1)                       # (...,) int32


def sample_tokens(logits, temperature, top_k, top_p, uniforms):
    """Token ids (B,) int32 from logits (B, V) float32.

    temperature (B,) float32 (0: greedy); top_k (B,) int32 (0: off); top_p (B,) float32
    (1: off); uniforms (B,) float32 in [0, 1), one draw per sampling row.
    """
    greedy = greedy_ids(logits)                                                   # (B,) int32
    return cond(tnp.any(temperature > 0), _draw, _keep, logits, temperature, top_k, top_p, uniforms, greedy)
