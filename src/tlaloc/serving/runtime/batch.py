"""One program call: the rows the scheduler chose, and the padded program inputs built from them.

A :class:`Batch` is the scheduler's decision for one call, as vLLM v1's ``SchedulerOutput``:
which requests run, which of their tokens, and the (batch, context) bucket.
:func:`fill_row` writes each of its rows into the batch-sized arrays of :func:`empty_inputs`,
the arrays the exported program takes (vLLM's ``_prepare_inputs``); :func:`row_logprobs`
reads a row of its outputs back. (:func:`row_inputs` and :func:`stack_rows` build the same
arrays one row at a time and stack them.)

Program inputs for B rows of T tokens over C context:

- ``token_ids``, ``positions`` (B, T) int32; ``slot_mapping`` (B, T) int32: the KV slot
  ``page * block_size + position % block_size`` each token is written to (-1: padding);
- ``block_tables`` (B, C / block_size) int32: each row's pages, in order;
- ``seq_lens`` (B,) int32: keys valid after this call's writes;
- ``temperature``, ``top_p``, ``uniforms`` (B,) float32 and ``top_k``, ``want_logprobs``
  (B,) int32: the sampling of a row whose next token is kept (zeros: greedy).

Padding rows write to the scratch page 0 through slot -1 and are never read back.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .requests import Request, TokenLogprobs

MODES = ("decode", "prefill")       # the order of a step's calls: a failed decode may end some prefills
FILL = {"token_ids": 0, "positions": 0, "block_tables": 0, "seq_lens": 1, "slot_mapping": -1, "temperature": 0.0,
        "top_k": 0, "top_p": 1.0, "uniforms": 0.0, "want_logprobs": 0}
_DTYPES = {"temperature": np.float32, "top_p": np.float32, "uniforms": np.float32}


@dataclasses.dataclass(frozen=True)
class Row:
    """Tokens ``start .. start + n - 1`` of ``request`` in one call (decode: n = 1; prefill: a chunk)."""
    request: Request
    start: int
    n: int
    uniform: float = 0.0          # the uniform draw that samples this row's next token (temperature > 0)
    drawn_from: object = None     # the request generator's state before ``uniform`` was drawn (None: no draw)

    @property
    def end(self) -> int:
        return self.start + self.n

    @property
    def samples(self) -> bool:
        """Whether the call's next token for this row is the request's next token (a decode, or the
        last chunk of a prompt); False for a prefill chunk that is not the last."""
        return self.end >= self.request.n_tokens


@dataclasses.dataclass(frozen=True)
class Batch:
    """One program call: ``mode`` ("decode" or "prefill"), the bucket (``size`` rows of ``tokens``
    tokens over ``context`` positions) and the scheduled rows (at most ``size``)."""
    mode: str
    size: int
    context: int
    tokens: int
    rows: tuple

    def with_rows(self, rows, size: int) -> Batch:
        """The same call over ``rows`` only, padded to ``size`` rows (a retry, or rows that failed dropped)."""
        return dataclasses.replace(self, rows=tuple(rows), size=size)


def empty_inputs(B: int, T: int, pages: int) -> dict:
    """Program inputs for B padding rows (see the module docstring for the shapes): fresh arrays,
    copied from a cached FILL template of their shape (a copy is cheaper than ``np.full``)."""
    return {name: a.copy() for name, a in _template(B, T, pages).items()}


@functools.lru_cache(maxsize=64)
def _template(B: int, T: int, pages: int) -> dict:
    """The FILL arrays of :func:`empty_inputs`. Never handed out: a transfer to the device may alias
    a host array (zero copy on CPU), so every call gets copies it may write and give away."""
    shapes = {"token_ids": (B, T), "positions": (B, T), "slot_mapping": (B, T), "block_tables": (B, pages)}
    arrays = {name: np.full(shapes.get(name, (B,)), fill, _DTYPES.get(name, np.int32)) for name, fill in FILL.items()}
    for a in arrays.values():
        a.flags.writeable = False
    return arrays


def fill_row(inputs: dict, k: int, row: Row, block_size: int, tokens: bool = True) -> None:
    """Write ``row``'s inputs into row ``k`` of the batch arrays ``inputs`` (from :func:`empty_inputs`,
    row ``k`` still FILL); the row's pages must already be taken. On an exception row ``k`` may be
    half written: :func:`clear_row` puts its FILL values back. ``tokens=False`` leaves ``token_ids``
    alone (a decode row whose token is an earlier call's output, not yet on the host)."""
    req, start, n = row.request, row.start, row.n
    end, pages = start + n, req.pages
    if tokens:
        inputs["token_ids"][k, :n] = req.token_span(start, end)
    inputs["positions"][k, :n] = range(start, end)
    # the KV slot of position p: page pages[p // block_size], offset p % block_size
    inputs["slot_mapping"][k, :n] = [pages[p // block_size] * block_size + p % block_size for p in range(start, end)]
    used = pages[:-(-end // block_size)]       # a page taken ahead for a call that failed in flight is not read
    inputs["block_tables"][k, :len(used)] = used
    inputs["seq_lens"][k] = end
    if row.samples and req.temperature > 0:                  # this row samples the next token
        inputs["temperature"][k], inputs["top_k"][k], inputs["top_p"][k] = req.temperature, req.top_k, req.top_p
        inputs["uniforms"][k] = row.uniform
    if row.samples and req.logprobs is not None:
        inputs["want_logprobs"][k] = 1


def clear_row(inputs: dict, k: int) -> None:
    """Put the FILL values back in row ``k`` of the batch arrays ``inputs`` (a padding row again)."""
    for name, fill in FILL.items():
        inputs[name][k] = fill


def take_row(inputs: dict, k: int, size: int) -> dict:
    """Row ``k`` of the batch arrays ``inputs`` alone, padded with FILL rows to ``size`` rows (fresh arrays)."""
    a = inputs["token_ids"]
    out = empty_inputs(size, a.shape[1], inputs["block_tables"].shape[1])
    for name, x in inputs.items():
        out[name][0] = x[k]
    return out


def row_inputs(row: Row, tokens: int, context: int, block_size: int) -> dict:
    """One row of the program inputs (leading axis 1); the row's pages must already be taken."""
    a = empty_inputs(1, tokens, context // block_size)
    fill_row(a, 0, row, block_size)
    return a


def stack_rows(rows: list, size: int) -> dict:
    """The per-row inputs of :func:`row_inputs` stacked and padded with FILL rows to ``size`` rows."""
    first = rows[0]
    return {name: np.concatenate([x[name] for x in rows] +
                                 [np.broadcast_to(FILL[name], (size - len(rows),) + first[name].shape[1:])
                                  .astype(first[name].dtype)]) for name in first}


def row_logprobs(outputs: dict, row: int, token: int, top: int) -> TokenLogprobs:
    """Row ``row`` of a program's log-probability outputs (``token_logprob`` (B,), ``top_ids`` and
    ``top_logprobs`` (B, K)), keeping the ``top`` best entries."""
    ids, values = outputs["top_ids"][row, :top], outputs["top_logprobs"][row, :top]
    return TokenLogprobs(token, float(outputs["token_logprob"][row]),
                         tuple((int(i), float(v)) for i, v in zip(ids, values)))


__all__ = ["Batch", "FILL", "MODES", "Row", "clear_row", "empty_inputs", "fill_row", "row_inputs", "row_logprobs",
           "stack_rows", "take_row"]
