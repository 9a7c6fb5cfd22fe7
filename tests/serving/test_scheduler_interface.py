"""The scheduler's vLLM-v1 interface without a device: schedule() -> Batch, the inputs built from it, update().

Oracle: the slot of token ``p`` is ``pages[p // BS] * BS + p % BS`` and its block table
lists the request's pages, written out per token here (the runtime computes them
vectorised); the sampled ids handed to ``update`` come back as the requests' events.
"""
import numpy as np

from tlaloc.serving.runtime.batch import row_inputs, stack_rows
from tlaloc.serving.runtime.scheduler import Scheduler

BS = 4


def _scheduler(**kwargs):
    options = dict(batch=[1, 2, 4], context=[16, 32], block_size=BS, num_pages=16, prefill_chunk=8, vocab_size=100,
                   program_tokens=lambda mode, C: [1] if mode == "decode" else [8])
    return Scheduler(**{**options, **kwargs})


def _expected_slots(pages, start, n):
    return [pages[p // BS] * BS + p % BS for p in range(start, start + n)]


def test_schedule_builds_update_and_pages_come_back():
    s = _scheduler()
    a = s.submit(list(range(10, 20)), max_new_tokens=3)                # 10 tokens: two prefill chunks
    b = s.submit([5, 6, 7], max_new_tokens=2, stop_ids=[42])
    assert s.begin_step() == [] and [r.id for r in s.running] == [a, b]
    assert s.schedule("decode") is None                                 # both still read their prompts
    batch = s.schedule("prefill")
    assert (batch.mode, batch.size, batch.context, batch.tokens) == ("prefill", 2, 16, 8)
    assert [(r.request.id, r.start, r.n, r.samples) for r in batch.rows] == [(a, 0, 8, False), (b, 0, 3, True)]
    inputs = stack_rows([row_inputs(r, batch.tokens, batch.context, BS) for r in batch.rows], batch.size)
    for k, row in enumerate(batch.rows):
        pages = row.request.pages
        assert inputs["slot_mapping"][k, :row.n].tolist() == _expected_slots(pages, row.start, row.n)
        assert (inputs["slot_mapping"][k, row.n:] == -1).all()           # padding tokens write nowhere
        assert inputs["block_tables"][k, :len(pages)].tolist() == pages and inputs["seq_lens"][k] == row.end
    assert inputs["token_ids"][1, :3].tolist() == [5, 6, 7] and inputs["want_logprobs"].tolist() == [0, 0]
    events = s.update(batch, {"next_token_ids": np.array([99, 8])})     # a's 99 is not a next token
    assert [(e.request_id, e.token_ids, e.finished) for e in events] == [(b, [8], False)]

    s.begin_step()
    decode = s.schedule("decode")
    assert [(r.request.id, r.start, r.n) for r in decode.rows] == [(b, 3, 1)] and decode.size == 1
    assert s.update(decode, {"next_token_ids": np.array([42])})[0].finish_reason == "stop"
    prefill = s.schedule("prefill")                                     # scheduled after the decode call ran
    assert [(r.request.id, r.start, r.n, r.samples) for r in prefill.rows] == [(a, 8, 2, True)]
    assert s.update(prefill, {"next_token_ids": np.array([3])})[0].token_ids == [3]
    assert s.stats()["kv_pages_used"] == 3 and s.stats()["requests_finished"] == 1
    assert s.cancel(a) and s.stats()["kv_pages_used"] == 0
    assert [(e.request_id, e.finish_reason) for e in s.begin_step()] == [(a, "cancelled")]
    assert not s.has_work()


def test_a_sampling_row_draws_its_uniform_when_scheduled():
    s = _scheduler()
    rid = s.submit([1, 2, 3], max_new_tokens=2, temperature=0.8, top_k=5, seed=7)
    s.begin_step()
    [row] = s.schedule("prefill").rows
    assert row.uniform == np.random.default_rng([7, 0]).random()       # the request's own generator
    inputs = row_inputs(row, 8, 16, BS)
    assert inputs["uniforms"][0] == np.float32(row.uniform) and inputs["top_k"][0] == 5 and rid
    greedy = _scheduler()
    greedy.submit([1, 2, 3], max_new_tokens=2, seed=7)                  # negative control: greedy rows draw none
    greedy.begin_step()
    [row] = greedy.schedule("prefill").rows
    assert row.uniform == 0.0 and row_inputs(row, 8, 16, BS)["temperature"][0] == 0.0
