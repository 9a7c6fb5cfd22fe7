"""Engine's Python API takes its arguments as documented and refuses what it cannot read.

Oracles: greedy ids (a top_p that keeps one token samples the argmax), the server's answer for
the same request (stop strings and the EOS ids), and the scheduler's page arithmetic.
"""
import numpy as np
import pytest

from tlaloc.serving.errors import ArgumentError, CapacityError

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


# -- input checks refuse instead of coercing ---------------------------------------------------------
@pytest.mark.parametrize("prompt", [[1.9, 2.7], ["12"], [True, 3], {7: 1, 9: 2}, {5, 6}, "12", 12,
                                    np.array([1.0, 2.0])])
def test_submit_refuses_prompts_that_are_not_integer_token_ids(engine, prompt):
    eng = engine("llama")
    with pytest.raises(ArgumentError, match="prompt_ids"):
        eng.submit(prompt, max_new_tokens=2)
    assert not eng.has_work()


@pytest.mark.parametrize("kwargs,name", [
    ({"stop_ids": "12"}, "stop_ids"), ({"stop_ids": [1.0]}, "stop_ids"), ({"stop_ids": [True]}, "stop_ids"),
    ({"stop_ids": [-1]}, "stop_ids"), ({"temperature": "0.5"}, "temperature"), ({"temperature": True}, "temperature"),
    ({"top_p": "0.5"}, "top_p"), ({"top_p": True}, "top_p"), ({"seed": 1.9}, "seed"), ({"seed": "abc"}, "seed"),
])
def test_submit_refuses_values_of_the_wrong_type_naming_them(engine, kwargs, name):
    eng = engine("llama")
    with pytest.raises(ArgumentError, match=name) as info:
        eng.submit(PROMPTS[1], max_new_tokens=2, **kwargs)
    assert info.value.param == name
    assert not eng.has_work()


def test_numpy_integers_are_accepted_for_ids_and_seeds(engine):
    eng = engine("llama")
    kwargs = dict(max_new_tokens=4, temperature=1.0, stop=[])
    want = eng.generate([PROMPTS[1]], seed=3, **kwargs)[0]
    assert eng.generate([np.array(PROMPTS[1], np.int64)], seed=np.int32(3), **kwargs)[0] == want
    rid = eng.submit(np.array(PROMPTS[1], np.int32), max_new_tokens=2, seed=np.uint8(3),
                     stop_ids=np.array([7], np.int64))
    while eng.has_work():
        eng.step()
    assert rid
    assert eng.decode(np.array(want.token_ids)) == want.text


def test_decode_and_the_queue_bound_refuse_bad_values(engine, artifact):
    from tlaloc.serving import Engine
    eng = engine("llama")
    for ids in ([-1], [256], [1.5], "ab"):
        with pytest.raises(ArgumentError, match="ids") as info:
            eng.decode(ids)
        assert info.value.param == "ids"
    for bad in (-1, 0, 1.5, True):
        with pytest.raises(ArgumentError, match="max_waiting"):
            Engine(artifact("llama"), fast_compile=True, max_waiting=bad)
