"""Engine's Python API takes its arguments as documented and refuses what it cannot read.

Oracles: greedy ids (a top_p that keeps one token samples the argmax), the server's answer for
the same request (stop strings and the EOS ids), and the scheduler's page arithmetic.
"""
import numpy as np
import pytest

from tlaloc.serving.errors import CapacityError

from .fixtures import PROMPTS


def _ids(results):
    return [r.token_ids for r in results]


# -- a tiny top_p ------------------------------------------------------------------------------------
def test_a_top_p_below_the_smallest_normal_float32_keeps_the_best_token(engine):
    """top_p=1e-40 is 0 (or subnormal, flushed) in float32: it must still keep the argmax, as 1e-9 does."""
    eng = engine("llama")
    kwargs = dict(max_new_tokens=8, temperature=1.0, seed=3, stop=[])
    greedy = _ids(eng.generate(PROMPTS, max_new_tokens=8, stop=[]))
    tiny = _ids(eng.generate(PROMPTS, top_p=1e-40, **kwargs))
    assert tiny == _ids(eng.generate(PROMPTS, top_p=1e-9, **kwargs)) == greedy
    assert any(t != 0 for row in tiny for t in row)                         # not the id-0 failure
    assert _ids(eng.generate(PROMPTS, **kwargs)) != greedy                  # negative control: it samples


@pytest.mark.parametrize("top_p", [1e-300, 1e-40, 1e-39, float(np.finfo(np.float32).tiny)])
def test_check_sampling_raises_a_tiny_top_p_to_the_smallest_normal_float32(top_p):
    from tlaloc.serving.runtime.requests import check_sampling
    tiny = np.float32(np.finfo(np.float32).tiny)
    assert check_sampling(1.0, None, top_p, 256)[2] == tiny
    assert check_sampling(1.0, None, 1e-9, 256)[2] == 1e-9                  # a normal top_p is untouched


def test_the_sampling_program_keeps_the_best_token_for_a_zero_top_p():
    from tlaloc.serving.export.sampling import sample_tokens
    rng = np.random.default_rng(0)
    logits = (3 * rng.standard_normal((4, 300))).astype(np.float32)
    ones = np.ones(4, np.float32)
    got = np.asarray(sample_tokens(logits, ones, np.zeros(4, np.int32), np.zeros(4, np.float32),
                                   np.array([0.0, 0.3, 0.7, 0.999], np.float32)))
    assert got.tolist() == np.argmax(logits, -1).tolist()


# -- the token budget --------------------------------------------------------------------------------
def test_max_sequence_tokens_is_what_the_usable_pages_hold(engine):
    eng = engine("llama", num_pages=4)              # page 0 is scratch: 3 pages of 8 tokens, context 64
    assert eng.max_sequence_tokens == 3 * 8 + 1
    prompt = PROMPTS[1]
    eng.submit(prompt, max_new_tokens=eng.max_sequence_tokens - len(prompt))
    with pytest.raises(CapacityError, match="KV pages"):
        eng.submit(prompt, max_new_tokens=eng.max_sequence_tokens - len(prompt) + 1)
    while eng.has_work():
        eng.step()


def test_the_servers_default_budget_fits_a_small_page_pool(engine):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from tlaloc.serving.server import create_app
    eng = engine("llama", num_pages=4)
    with TestClient(create_app(eng)) as c:
        r = c.post("/v1/completions", json={"prompt": PROMPTS[1], "max_tokens": None, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] <= 25 - len(PROMPTS[1])
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "temperature": 0})
        assert r.status_code == 200, r.text
