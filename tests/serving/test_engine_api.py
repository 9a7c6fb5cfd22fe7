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


# -- generate's arguments ----------------------------------------------------------------------------
def test_generate_takes_a_single_string_as_one_prompt(engine):
    eng = engine("llama")
    one = eng.generate("Hi", max_new_tokens=4, stop=[])
    assert len(one) == 1 and one == eng.generate(["Hi"], max_new_tokens=4, stop=[])
    assert len(eng.generate(["H", "i"], max_new_tokens=4, stop=[])) == 2


def _server_text(eng, prompt, stop, n=12):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from tlaloc.serving.server import create_app
    with TestClient(create_app(eng)) as c:
        r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 0, "stop": stop})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        return choice["text"], choice["finish_reason"]


def test_a_stop_string_is_one_stop_string_as_in_the_server(engine):
    eng = engine("llama")
    prompt = PROMPTS[2]
    full = eng.generate([prompt], max_new_tokens=12, stop=[])[0].text
    i = next(i for i in range(1, len(full) - 1) if full[i:i + 2].isprintable() and full[i:i + 2].isascii())
    stop = full[i:i + 2]                                     # two characters the greedy text holds
    [r] = eng.generate([prompt], max_new_tokens=12, stop=stop)
    assert r.finish_reason == "stop" and r.text == full[:full.index(stop)]
    assert eng.generate([prompt], max_new_tokens=12, stop=[stop])[0] == r
    absent = full[i] + "\u2603"                             # its first character is said, the string never
    [a] = eng.generate([prompt], max_new_tokens=12, stop=absent)
    assert (a.text, a.finish_reason) == (full, "length")
    # the server last: its engine thread may leave a request it was cancelling when it stopped
    assert (r.text, r.finish_reason) == _server_text(eng, prompt, stop)
    assert (a.text, a.finish_reason) == _server_text(eng, prompt, absent)


def test_empty_stop_strings_are_ignored_as_in_the_server(engine):
    eng = engine("llama")
    prompt = PROMPTS[1]
    full = eng.generate([prompt], max_new_tokens=12, stop=[])[0]
    [r] = eng.generate([prompt], max_new_tokens=12, stop=[""])
    assert r == eng.generate([prompt], max_new_tokens=12)[0]
    assert r.text == full.text and len(r.token_ids) == 12           # the tiny model says no EOS in 12 tokens
    assert (r.text, r.finish_reason) == _server_text(eng, prompt, [""])


def test_stop_strings_keep_the_eos_stop_as_in_the_server(engine):
    eng = engine("llama")
    prompt = PROMPTS[1]
    full = eng.generate([prompt], max_new_tokens=12, stop=[])[0]
    eos = full.token_ids[5]
    eng.eos_token_ids = (eos,)                                      # this model's EOS: a token it says
    [r] = eng.generate([prompt], max_new_tokens=12, stop=["never said"])
    assert r.finish_reason == "stop" and r.token_ids == full.token_ids[:full.token_ids.index(eos) + 1]
    assert r == eng.generate([prompt], max_new_tokens=12)[0]
    assert eng.generate([prompt], max_new_tokens=12, stop=[])[0] == full        # [] still never stops early
    assert (r.text, r.finish_reason) == _server_text(eng, prompt, ["never said"])


@pytest.mark.parametrize("stop", [[13.0], [True], [None], ["a", 2.5], 13.0, {"a": 1}, [-1]])
def test_stop_items_that_are_neither_strings_nor_token_ids_are_refused(engine, stop):
    eng = engine("llama")
    with pytest.raises(ArgumentError, match="stop") as info:
        eng.generate([PROMPTS[1]], max_new_tokens=4, stop=stop)
    assert info.value.param == "stop"
    assert not eng.has_work()


# -- generate and submitted requests -----------------------------------------------------------------
def test_generate_refuses_while_submitted_requests_are_live_and_takes_none_of_their_events(engine):
    eng = engine("llama")
    want = eng.generate([PROMPTS[2]], max_new_tokens=6, stop=[])[0].token_ids
    rid = eng.submit(PROMPTS[2], max_new_tokens=6)
    first = eng.step()
    with pytest.raises(ArgumentError, match=rf"submit\(\).*{rid}.*has_work"):
        eng.generate([PROMPTS[1]], max_new_tokens=4)
    got, reason = [], None
    while eng.has_work() or first:
        for ev in first or eng.step():
            assert ev.request_id == rid
            got.extend(ev.token_ids)
            reason = ev.finish_reason or reason
        first = []
    assert reason == "length" and got == want
    assert eng.generate([PROMPTS[2]], max_new_tokens=6, stop=[])[0].token_ids == want    # free again


def test_generate_keeps_a_cancelled_requests_final_event_for_the_next_step(engine):
    eng = engine("llama")
    want = eng.generate([PROMPTS[1]], max_new_tokens=4, stop=[])[0]
    rid = eng.submit(PROMPTS[2], max_new_tokens=6)
    assert eng.cancel(rid)
    assert eng.generate([PROMPTS[1]], max_new_tokens=4, stop=[])[0] == want     # not refused: nothing runs
    events = eng.step()
    assert [(e.request_id, e.finish_reason) for e in events] == [(rid, "cancelled")]
    assert not eng.has_work()


def test_generate_leaves_no_events_behind_after_a_stop_string(engine):
    eng = engine("llama")
    full = eng.generate([PROMPTS[1]], max_new_tokens=12, stop=[])[0].text
    eng.generate([PROMPTS[1]], max_new_tokens=12, stop=full[3:5])            # cancels its request
    assert not eng.has_work()
    eng.generate([PROMPTS[1]], max_new_tokens=2)                            # not refused


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


@pytest.mark.parametrize("kwargs,name", [({"seed": 1.9}, "seed"), ({"seed": "abc"}, "seed"),
                                         ({"temperature": "0.5"}, "temperature")])
def test_generate_refuses_values_of_the_wrong_type(engine, kwargs, name):
    eng = engine("llama")
    with pytest.raises(ArgumentError, match=name):
        eng.generate([PROMPTS[1]], max_new_tokens=2, **kwargs)
    with pytest.raises(ArgumentError, match="prompt_ids"):
        eng.generate([[1.9, 2.7]], max_new_tokens=2)
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
