"""The engine's batch input builder against the per-row path it replaced, without a device.

The engine writes each scheduled row into batch-sized arrays (``empty_inputs`` then
``fill_row`` per row, ``clear_row`` for a row that fails, ``take_row`` for a retry alone).
Oracle: the earlier runtime's per-row builder, kept here verbatim (``_old_row_inputs``, built
with NumPy from one FILL row per request) and its ``stack_rows``, which concatenated the rows
and padded them with FILL rows. Every array must come out identical (values, dtype, shape)
for prefill chunks (one not the last, one the last), decode rows, greedy and sampling rows,
rows that want log-probabilities, and padding rows.
"""
import numpy as np
import pytest

from tlaloc.serving.runtime.batch import (FILL, clear_row, empty_inputs, fill_row, row_inputs, stack_rows,
                                          take_row)
from tlaloc.serving.runtime.scheduler import Scheduler

BS = 4


def _old_row_inputs(row, tokens, context, block_size):
    """The per-row builder the engine used before (verbatim but for ``empty_inputs``, inlined)."""
    req, start, n = row.request, row.start, row.n
    shapes = {"token_ids": (1, tokens), "positions": (1, tokens), "slot_mapping": (1, tokens),
              "block_tables": (1, context // block_size)}
    dtypes = {"temperature": np.float32, "top_p": np.float32, "uniforms": np.float32}
    a = {name: np.full(shapes.get(name, (1,)), fill, dtypes.get(name, np.int32)) for name, fill in FILL.items()}
    pos = np.arange(start, start + n)
    a["token_ids"][0, :n] = req.tokens[start:start + n]
    a["positions"][0, :n] = pos
    a["slot_mapping"][0, :n] = np.asarray(req.pages, np.int64)[pos // block_size] * block_size + pos % block_size
    a["block_tables"][0, :len(req.pages)] = req.pages
    a["seq_lens"][0] = start + n
    if row.end >= len(req.tokens) and req.temperature > 0:
        a["temperature"][0], a["top_k"][0], a["top_p"][0] = req.temperature, req.top_k, req.top_p
        a["uniforms"][0] = row.uniform
    if row.end >= len(req.tokens) and req.logprobs is not None:
        a["want_logprobs"][0] = 1
    return a


def _scheduler():
    return Scheduler(batch=[1, 2, 4, 8], context=[16, 32], block_size=BS, num_pages=32, prefill_chunk=8,
                     vocab_size=100, max_logprobs=3,
                     program_tokens=lambda mode, C: [1] if mode == "decode" else [8])


def _submit_mix(s):
    """Requests of every kind of row: long greedy (two chunks), short sampling with logprobs, greedy with
    logprobs, sampling without."""
    s.submit(list(range(10, 20)), max_new_tokens=5)
    s.submit([5, 6, 7], max_new_tokens=5, temperature=0.8, top_k=7, top_p=0.9, seed=3, logprobs=2)
    s.submit([1, 2, 3, 4, 5], max_new_tokens=5, logprobs=0)
    s.submit([9] * 9, max_new_tokens=5, temperature=1.3, seed=4)


def _built(batch, rows, size):
    inputs = empty_inputs(size, batch.tokens, batch.context // BS)
    for k, row in enumerate(rows):
        fill_row(inputs, k, row, BS)
    return inputs


def _assert_same(got, want):
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def _steps():
    """Every batch of a few steps of the mixed requests (prefill chunks, then decodes), each handed to
    the test before its update, with made-up sampled ids."""
    s = _scheduler()
    _submit_mix(s)
    for step in range(4):
        s.begin_step()
        for mode in ("decode", "prefill"):
            batch = s.schedule(mode)
            if batch is None:
                continue
            yield batch
            n = batch.size
            s.update(batch, {"next_token_ids": np.arange(n) + 40, "token_logprob": np.zeros(n, np.float32),
                             "top_ids": np.zeros((n, 3), np.int32), "top_logprobs": np.zeros((n, 3), np.float32)})


def test_batch_arrays_equal_the_stacked_per_row_inputs():
    modes = set()
    for batch in _steps():
        modes.add((batch.mode, any(not r.samples for r in batch.rows)))
        want_logprobs = [r.request.logprobs is not None and r.samples for r in batch.rows]
        for size in {batch.size, 8}:                                         # and with more padding rows
            old = stack_rows([_old_row_inputs(r, batch.tokens, batch.context, BS) for r in batch.rows], size)
            new = _built(batch, batch.rows, size)
            _assert_same(new, old)
            _assert_same(row_inputs(batch.rows[0], batch.tokens, batch.context, BS),
                         _old_row_inputs(batch.rows[0], batch.tokens, batch.context, BS))
            assert new["want_logprobs"][:len(batch.rows)].tolist() == [int(w) for w in want_logprobs]
    # the mix covered a prefill call with a chunk that is not the last, and decode calls
    assert ("prefill", True) in modes and ("decode", False) in modes


def test_sampling_and_padding_rows_hold_their_values():
    batch = next(b for b in _steps() if b.mode == "decode")          # before its update: rows still sample
    new = _built(batch, batch.rows, 8)
    sampling = [k for k, r in enumerate(batch.rows) if r.request.temperature > 0]
    assert sampling and (new["temperature"][sampling] > 0).all() and (new["uniforms"][sampling] > 0).all()
    assert new["top_k"][sampling].tolist() == [r.request.top_k for r in batch.rows if r.request.temperature > 0]
    for name, fill in FILL.items():                                          # rows past the scheduled ones
        assert (new[name][len(batch.rows):] == fill).all(), name


def test_a_row_that_fails_half_written_is_cleared_and_the_next_row_takes_its_place():
    batch = next(b for b in _steps() if b.mode == "prefill")
    rows = list(batch.rows)
    bad = rows[1]                                                            # samples: writes temperature first
    assert bad.samples and bad.request.temperature > 0
    bad.request.top_k = 2 ** 40                                              # over int32: fails mid-row
    inputs = empty_inputs(batch.size, batch.tokens, batch.context // BS)
    kept = []
    for row in rows:
        k = len(kept)
        try:
            fill_row(inputs, k, row, BS)
            kept.append(row)
        except OverflowError:
            assert inputs["temperature"][k] > 0                             # it did write part of row k
            clear_row(inputs, k)
    assert kept == [r for r in rows if r is not bad]
    old = stack_rows([_old_row_inputs(r, batch.tokens, batch.context, BS) for r in kept], batch.size)
    _assert_same(inputs, old)


def test_take_row_is_the_row_alone_padded():
    for batch in _steps():
        inputs = _built(batch, batch.rows, batch.size)
        for k, row in enumerate(batch.rows):
            for size in (1, 2):
                _assert_same(take_row(inputs, k, size),
                             stack_rows([_old_row_inputs(row, batch.tokens, batch.context, BS)], size))


def test_empty_inputs_are_fresh_arrays_every_call():
    """A transfer may alias a host array (zero copy): no two calls may share one, nor write the template."""
    a = empty_inputs(2, 8, 4)
    for x in a.values():
        x[...] = 7
    b = empty_inputs(2, 8, 4)
    for name, fill in FILL.items():
        assert (b[name] == fill).all() and b[name].flags.writeable and not np.shares_memory(a[name], b[name])
    with pytest.raises(ValueError):                                          # the cached template is read-only
        from tlaloc.serving.runtime.batch import _template
        _template(2, 8, 4)["token_ids"][0, 0] = 1
