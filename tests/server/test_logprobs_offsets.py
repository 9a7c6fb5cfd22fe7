"""``/v1/completions`` logprobs ``text_offset`` indexes the completion's ``text``, also when a
character is split over several byte-level tokens or its bytes are invalid UTF-8.

Oracle: the tokenizer's own decode. Token ``i`` starts at ``len(decode(ids[:i]))``, less the one
U+FFFD that decode writes for a character ``ids[:i]`` leave unfinished when token ``i`` goes on
with it (then ``decode(ids[:i + 1])`` is no longer: that character is not text yet, and token
``i`` starts at it). The session tokenizer maps id i < 256 to byte i.
"""
import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tlaloc.serving.runtime.requests import TokenLogprobs
from tlaloc.serving.server import create_app
from tlaloc.serving.server.logprobs import TokenText, completion_logprobs

from .fake_engine import byte_level_tokenizer
from .test_real_engine import real_engine  # noqa: F401 - the module-scoped fixture

TOKENIZER = byte_level_tokenizer()


def _oracle(ids) -> list:
    """Each token's start in decode(ids), from the decodes of the prefixes that end before and at it."""
    out = []
    for i in range(len(ids)):
        before = TOKENIZER.decode(ids[:i])
        if before.endswith("\ufffd") and len(TOKENIZER.decode(ids[:i + 1])) == len(before):
            before = before[:-1]                    # ids[i] goes on with (or finishes) that character
        out.append(len(before))
    return out


def _offsets(ids, chunks=1) -> list:
    tt, offsets, offset, pending = TokenText(TOKENIZER), [], 0, b""
    for part in np.array_split(np.asarray(ids, dtype=np.int64), chunks):
        out, offset, pending = completion_logprobs([TokenLogprobs(int(t), -1.0) for t in part], tt, offset, pending)
        offsets += out["text_offset"]
    return offsets


def test_a_character_split_over_tokens_points_at_that_character():
    ids = TOKENIZER.encode("pizza = \U0001F355\ntree = \U0001F333 ok").ids
    text = TOKENIZER.decode(ids)
    assert len(ids) > len(text)                                    # the emoji are split: 4 byte tokens each
    offsets = _offsets(ids)
    assert [text[o] for o, t in zip(offsets, ids) if t >= 0x80] == ["\U0001F355"] * 4 + ["\U0001F333"] * 4
    assert text[offsets[-2]:] == "ok"
    assert _offsets(ids, chunks=5) == offsets                      # a stream's chunks carry the unfinished bytes


@pytest.mark.parametrize("seed", range(4))
def test_offsets_of_random_bytes_equal_the_tokenizers_decode(seed):
    rng = np.random.default_rng(seed)
    for _ in range(300):
        ids = [int(t) for t in rng.choice([*range(0x20, 0x7F), *range(0x80, 0x100)], rng.integers(1, 12))]
        assert _offsets(ids) == _oracle(ids), ids
        assert _offsets(ids, chunks=3) == _oracle(ids), ids


def test_served_offsets_index_the_text(real_engine):  # noqa: F811
    """The real tiny engine samples bytes, many of them not UTF-8: the answer's and the stream's offsets
    equal the oracle's for the ids Engine.generate gives (run before the server's engine thread starts)."""
    prompt, seeds = [3, 17, 99, 5, 200, 7], range(4)
    want = [real_engine.generate([prompt], max_new_tokens=20, temperature=1.0, seed=s)[0].token_ids for s in seeds]
    assert any(t >= 0x80 for ids in want for t in ids)             # some answer holds non-ASCII bytes
    with TestClient(create_app(real_engine)) as c:
        for seed, ids in zip(seeds, want):
            body = {"prompt": prompt, "max_tokens": 20, "temperature": 1.0, "seed": seed, "logprobs": 1}
            r = c.post("/v1/completions", json=body)
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            assert choice["text"] == TOKENIZER.decode(ids)
            assert choice["logprobs"]["text_offset"] == _oracle(ids)
            with c.stream("POST", "/v1/completions", json={**body, "stream": True}) as s:
                s.read()
            chunks = [json.loads(line[6:]) for line in s.text.split("\n") if line.startswith("data: {")]
            assert [o for ch in chunks for o in (ch["choices"][0]["logprobs"] or {}).get("text_offset", [])] == \
                _oracle(ids)
