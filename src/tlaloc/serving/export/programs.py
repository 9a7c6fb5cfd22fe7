"""The serving programs: their slots, and the functions the tracing front end turns into StableHLO.

A decoder program serves one (mode, batch B, context C) bucket. Prefill programs take
``T = min(C, prefill_chunk)`` tokens per row, decode programs one; both are the same
traced function (:func:`decoder_step`) at different shapes. Inputs, in order::

    token_ids (B, T) i32     positions (B, T) i32     block_tables (B, C/BS) i32
    seq_lens (B,) i32        slot_mapping (B, T) i32  temperature (B,) f32
    top_k (B,) i32           top_p (B,) f32           uniforms (B,) f32
    kv.k, kv.v (L, P, BS, K, E), float32 pools         (donated)
    or kv.<l>.k, kv.<l>.v (P, BS, K, E) per layer, bfloat16 pools
    weights, by slot name (see weights_format)

Float32 pools: one key pool and one value pool hold every layer's pages (layer ``l``'s are
``[l]``), so a call donates two pools, not two per layer: on XLA CPU each donated buffer
costs the call ~6 us to create and destroy (60 per-layer pools 280 us a step against 40
for 2 stacked ones of the same bytes, ``benchmarks/donated_pools.py``). Bfloat16 pools stay
one per layer (``kv.<l>.k``, ``kv.<l>.v`` (P, BS, K, E)): XLA CPU writes a bfloat16 row into
a pool by a fusion that converts the whole pool to float32 and back (in place, but every
element), so a stacked pool made each write 30x dearer (SmolLM2 bf16 batch 1: 11.2 against
8.8 ms of device time a step). The CPU-kernel programs write in place with a kernel of their
own (``kv_write.cc``), but the portable programs of the same artifact share its layout.
Artifacts exported before the stacked pools run unchanged: the runtime makes whatever pools
the manifest lists.

Outputs: ``next_token_ids`` (B,) i32, then every pool (aliased to its input), then, when
exported with ``top_logprobs`` = K > 0 (an extra input ``want_logprobs`` (B,) i32 after
``uniforms``), ``token_logprob`` (B,) f32, ``top_logprobs`` (B, K) f32 and ``top_ids``
(B, K) i32 (see :func:`logprob_slots`). A row's
sampled token comes from its last real token (the last one with ``slot_mapping >= 0``).
Padding: token 0, position 0, slot -1; a padding row has seq_len 1 and a block table of
zeros (page 0, the scratch page).

A score program (mode ``score``, batch 1, exported with ``score=True``) runs a whole
row causally from position 0, without the KV pools: ``token_ids`` (1, C) and
``seq_lens`` (1,) i32 and the weights in; ``token_logprobs`` (1, C) f32 (nats) and
``greedy_ids`` (1, C) i32 out, see :func:`decoder_score`.

An encoder program (mode ``embed``) takes ``token_ids`` and ``attention_mask`` (B, C) i32
and the weights, and returns ``embeddings`` (B, D) float32.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ... import numpy as tnp
from ..._core.aval import AbstractValue
from ..._core.specialize import specialize
from ..._frontend.tracing import trace_region
from ..._render import stablehlo_serving  # noqa: F401  (registers the paged primitives' lowerings)
from ..._render.stablehlo import emit_module
from ..._prims.stored_matmul import kernel_call_wanted
from ...models import DecoderConfig, decoder_hidden, encode, lm_head, lowp
from ...models.quantized import StoredProduct
from ...models.kv_cache import NoCache
from .paged_backend import PagedBackend
from .sampling import greedy_ids, sample_tokens, token_logprobs
from .weights_format import SIDE, channel_axis, dequantize, dequantize_channels

I32, F32 = np.dtype(np.int32), np.dtype(np.float32)

#: vocabulary ids per dot of an output head stored in bf16 or int8 (see :func:`head_parts`)
HEAD_CHUNK = 1024
#: one key and one value pool for all layers when the pools are float32 (False: one of each per
#: layer, the layout of the artifacts before; for benchmarks and the tests that old artifacts
#: still load). Bfloat16 pools are always one per layer: see the module docstring.
STACKED_KV = True


def stacked_kv(kv_dtype) -> bool:
    """Whether the KV pools of ``kv_dtype`` stack every layer's pages (see the module docstring)."""
    return STACKED_KV and np.dtype(kv_dtype) == F32


@dataclasses.dataclass(frozen=True)
class Slot:
    """One program input or output: its name, role (manifest.ROLES), dtype and shape."""
    name: str
    role: str
    dtype: np.dtype
    shape: tuple

    def to_json(self) -> dict:
        return {"name": self.name, "role": self.role, "dtype": np.dtype(self.dtype).name, "shape": list(self.shape)}

    @property
    def aval(self) -> AbstractValue:
        return AbstractValue(np.dtype(self.dtype), tuple(self.shape))


class _Proto:
    """A stand-in argument carrying only an aval: the tracing front end makes it an input."""

    def __init__(self, aval):
        self.aval = aval


def request_slots(B: int, T: int, M: int, top_logprobs: int = 0) -> list[Slot]:
    """The per-step inputs of a decoder program (see the module docstring); with ``top_logprobs``,
    a tenth, ``want_logprobs`` (B,) i32 (nonzero: the row asks for log-probabilities)."""
    return [Slot("token_ids", "token_ids", I32, (B, T)), Slot("positions", "positions", I32, (B, T)),
            Slot("block_tables", "block_tables", I32, (B, M)), Slot("seq_lens", "seq_lens", I32, (B,)),
            Slot("slot_mapping", "slot_mapping", I32, (B, T)), Slot("temperature", "temperature", F32, (B,)),
            Slot("top_k", "top_k", I32, (B,)), Slot("top_p", "top_p", F32, (B,)),
            Slot("uniforms", "uniforms", F32, (B,))] + \
        ([Slot("want_logprobs", "want_logprobs", I32, (B,))] if top_logprobs else [])


def logprob_slots(B: int, top_logprobs: int) -> list[Slot]:
    """The log-probability outputs of a decoder program exported with ``top_logprobs`` = K > 0
    (after the pools; see :func:`tlaloc.serving.export.sampling.token_logprobs`)."""
    if not top_logprobs:
        return []
    K = top_logprobs
    return [Slot("token_logprob", "token_logprob", F32, (B,)), Slot("top_logprobs", "top_logprobs", F32, (B, K)),
            Slot("top_ids", "top_ids", I32, (B, K))]


def kv_slots(cfg: DecoderConfig, num_pages: int, block_size: int, kv_dtype) -> list[Slot]:
    """The KV pools: ``kv.k``, ``kv.v`` (L, P, BS, K, E) (:func:`stacked_kv`), else ``kv.<l>.k``,
    ``kv.<l>.v`` (P, BS, K, E) per layer."""
    page = (block_size, cfg.num_kv_heads, cfg.head_dim)
    if stacked_kv(kv_dtype):
        return [Slot(f"kv.{kind}", "kv_pool", np.dtype(kv_dtype), (cfg.num_layers, num_pages) + page)
                for kind in ("k", "v")]
    return [Slot(f"kv.{layer}.{kind}", "kv_pool", np.dtype(kv_dtype), (num_pages,) + page)
            for layer in range(cfg.num_layers) for kind in ("k", "v")]


def kv_layout(kv_dtype) -> list:
    """The manifest's ``kv.layout``: the axes of a pool (see :func:`kv_slots`)."""
    return (["layers"] if stacked_kv(kv_dtype) else []) + ["pages", "block_size", "kv_heads", "head_dim"]


def weight_slots(stored: dict) -> list[Slot]:
    return [Slot(name, "weight_scale" if name.endswith(SIDE) else "weight", np.dtype(a.dtype), tuple(a.shape))
            for name, a in stored.items()]


def head_parts(cfg: DecoderConfig, stored: dict, chunk: int | None = None):
    """The output head for :func:`~tlaloc.models.lm_head`: None (the whole float32 table); one
    :class:`~tlaloc.models.lowp.LowpMatrix` when it is stored in bf16 or per-channel int8 (a
    low-precision dot, nothing converted); else (``lowp.ENABLED = False``, or blocks) float32
    slices of ``chunk`` (default :data:`HEAD_CHUNK`) vocabulary ids.

    XLA CPU has no bf16 or int8 matrix-vector dot: it converts the weight to float32 first.
    A whole head (49152 x 576 for SmolLM2-135M, 113 MB in float32) would be converted into a
    fresh temporary at every step; slice by slice, each part is converted just before its
    dot. Each logit is the same dot product either way.
    """
    name = "embed" if cfg.tie_word_embeddings else "lm_head"
    if cfg.tie_word_embeddings and "lm_head" in stored:
        # the table's exact (D, V) copy (weights_format.head_copy), for the kernel of (in, out)
        # matrices; without the kernels the table serves as before
        kernel = _head_kernel(stored, "lm_head")
    else:
        kernel = _head_kernel(stored, name)
    if kernel is not None:
        return [kernel]
    if np.dtype(stored[name].dtype) == F32:
        return None
    scale = stored.get(name + ".scale")
    if lowp.ENABLED and (scale is None or len(scale.shape) == 1):           # bf16, or int8 per channel
        return [lowp.LowpMatrix(stored[name], scale, axis=1 - channel_axis(name))]
    chunk = HEAD_CHUNK if chunk is None else chunk
    V = stored[name].shape[channel_axis(name)]
    return [dequantize_channels(stored, name, a, min(a + chunk, V)) for a in range(0, V, chunk)]


def _head_kernel(stored: dict, name: str):
    """The head as one :class:`~tlaloc.models.quantized.StoredProduct` (the CPU kernel of its
    stored format) when the program is traced for the kernels and they take it, else None."""
    v, scale = stored[name], stored.get(name + ".scale")
    dt = np.dtype(v.dtype)
    if scale is None:
        fmt = {F32: "f32", np.dtype(tnp.bfloat16): "bf16"}.get(dt)
    elif dt == np.int8:
        fmt = "i8ch" if len(scale.shape) == 1 else "q8_0"
    else:
        fmt = None
    if fmt is None:
        return None
    table = channel_axis(name) == 0                                     # (V, D), else (D, V)
    fmt = fmt + "_t" if table else fmt
    n_in, n_out = (v.shape[1], v.shape[0]) if table else (v.shape[0], v.shape[1])
    if not kernel_call_wanted(fmt, n_out, n_in):
        return None
    return StoredProduct(fmt, v) if scale is None else StoredProduct(fmt, v, scale)


def decoder_step(cfg: DecoderConfig, weight_names: list, n_layers: int, top_logprobs: int = 0, stacked: bool = True):
    """The function traced into every decoder program: flat inputs -> [next ids, pools..., log-probs...]
    (the log-probability outputs of :func:`logprob_slots` only when ``top_logprobs`` > 0).
    ``stacked``: the two pools of :func:`kv_slots` hold every layer's pages (:func:`stacked_kv`)."""
    n_req = 10 if top_logprobs else 9
    n_pools = 2 if stacked else 2 * n_layers

    def step(*flat):
        token_ids, positions, block_tables, seq_lens, slot_mapping, temperature, top_k, top_p, uniforms = flat[:9]
        pools = flat[n_req:n_req + n_pools]
        stored = dict(zip(weight_names, flat[n_req + n_pools:]))
        weights = dequantize(stored)
        if stacked:
            backend = PagedBackend.stacked(pools[0], pools[1], block_tables, seq_lens, slot_mapping)
        else:
            backend = PagedBackend(pools[0::2], pools[1::2], block_tables, seq_lens, slot_mapping)
        h = decoder_hidden(cfg, weights, token_ids, positions, backend)           # (B, T, D)
        B, T = token_ids.shape
        real = tnp.sum(tnp.astype(slot_mapping >= 0, tnp.int32), axis=1)          # (B,) real tokens per row
        last = tnp.maximum(real - 1, 0)                                           # (B,)
        pick = tnp.equal(np.arange(T, dtype=np.int32)[None, :], last[:, None])    # (B, T)
        h_last = tnp.sum(tnp.where(pick[:, :, None], h, np.float32(0.0)), axis=1)  # (B, D)
        logits = lm_head(cfg, weights, h_last, head_parts(cfg, stored))           # (B, V)
        ids = sample_tokens(logits, temperature, top_k, top_p, uniforms)          # (B,)
        outs = [ids] + backend.pools()
        if top_logprobs:
            outs += token_logprobs(logits, ids, flat[9], top_logprobs)
        return outs
    return step


def score_slots(C: int) -> tuple[list[Slot], list[Slot]]:
    """The request inputs and the outputs of a score program over C tokens (see :func:`decoder_score`)."""
    inputs = [Slot("token_ids", "token_ids", I32, (1, C)), Slot("seq_lens", "seq_lens", I32, (1,))]
    outputs = [Slot("token_logprobs", "token_logprobs", F32, (1, C)), Slot("greedy_ids", "greedy_ids", I32, (1, C))]
    return inputs, outputs


class _RoundedNoCache(NoCache):
    """Attention within the call, keys and values first rounded to the KV pools' dtype (as prefill stores them)."""

    def __init__(self, kv_dtype):
        self.kv_dtype = np.dtype(kv_dtype)

    def attend(self, layer: int, q, k, v, positions, window: int | None):
        if self.kv_dtype != F32:
            k = tnp.astype(tnp.astype(k, self.kv_dtype), tnp.float32)                # (B, T, K, E)
            v = tnp.astype(tnp.astype(v, self.kv_dtype), tnp.float32)                # (B, T, K, E)
        return super().attend(layer, q, k, v, positions, window)


def decoder_score(cfg: DecoderConfig, weight_names: list, kv_dtype):
    """The function traced into every score program: (token_ids, seq_lens, *weights) -> [logprobs, greedy ids].

    token_ids (B, C) int32, left-aligned, padded with anything; seq_lens (B,) int32 real tokens
    per row. Outputs, both (B, C): ``token_logprobs`` float32, where ``[b, t]`` is
    log p(token_ids[b, t+1] | token_ids[b, :t+1]) in nats, and ``greedy_ids`` int32, the
    argmax of that same next-token distribution; both are 0 where ``t + 1 >= seq_lens[b]``.
    The whole row is one causal forward pass from position 0 (no KV pool), with keys and
    values rounded to ``kv_dtype`` as the prefill programs store them.
    """
    def score(token_ids, seq_lens, *ws):
        stored = dict(zip(weight_names, ws))
        weights = dequantize(stored)
        B, C = token_ids.shape
        t = np.arange(C, dtype=np.int32)                                          # (C,)
        positions = token_ids * 0 + t[None, :]                                    # (B, C) traced, not a literal
        h = decoder_hidden(cfg, weights, token_ids, positions, _RoundedNoCache(kv_dtype))  # (B, C, D)
        logits = lm_head(cfg, weights, h, head_parts(cfg, stored))                # (B, C, V)
        V = logits.shape[-1]
        logz = tnp.logsumexp(logits, axis=-1)                                     # (B, C)
        nxt = tnp.concatenate([token_ids[:, 1:], tnp.zeros((B, 1), tnp.int32)], axis=1)   # (B, C) next token
        rows = np.arange(B * C, dtype=np.int32) * np.int32(V)                     # (B*C,) flat row starts
        flat = tnp.reshape(logits, (B * C * V,))
        picked = tnp.reshape(tnp.take(flat, rows + tnp.reshape(nxt, (B * C,)), axis=0), (B, C))  # (B, C)
        valid = tnp.less(t[None, :] + 1, seq_lens[:, None])                       # (B, C)
        logprobs = tnp.where(valid, picked - logz, np.float32(0.0))               # (B, C) nats
        greedy = tnp.where(valid, greedy_ids(logits), 0)                          # (B, C)
        return [logprobs, greedy]
    return score


def encoder_embed(cfg, weight_names: list):
    """The function traced into every encoder program: (ids, mask, *weights) -> [embeddings]."""
    def embed(token_ids, attention_mask, *ws):
        weights = dequantize(dict(zip(weight_names, ws)))
        return [encode(cfg, weights, token_ids, attention_mask)]                  # (B, D)
    return embed


def lower(fn, inputs: list[Slot], name: str, donate=()):
    """Trace ``fn`` over ``inputs`` with the tracing front end, specialise, emit StableHLO.

    Returns the ``Program`` (text, avals, aliases).
    """
    graph, _, _ = trace_region(fn, [_Proto(s.aval) for s in inputs], name)
    graph = specialize(graph, [s.aval for s in inputs], name=name)
    return emit_module(graph, name=name, donate=list(donate))


__all__ = ["Slot", "HEAD_CHUNK", "head_parts", "request_slots", "logprob_slots", "kv_slots", "kv_layout", "stacked_kv", "weight_slots", "decoder_step",
           "score_slots", "decoder_score", "encoder_embed", "lower"]
