"""OpenAI-style log-probabilities from the decoder programs, against transformers in float64.

The programs output the chosen token's log-probability and the top-K (K = the export's
``top_logprobs``) of the model's full-vocabulary log-softmax. The oracle is transformers'
``log_softmax`` of its own logits, computed in float64 on the same token sequence.
"""
import copy

import numpy as np
import pytest

from tlaloc.errors import ArgumentError

from .fixtures import PROMPTS

torch = pytest.importorskip("torch")

ATOL = 2e-4


def _run(eng, prompt, **options):
    rid = eng.submit(prompt, request_id="lp", **options)
    tokens, logprobs = [], []
    while eng.has_work():
        for ev in eng.step():
            if ev.request_id == rid:
                assert ev.error is None
                tokens += ev.token_ids
                if ev.logprobs is not None:
                    assert len(ev.logprobs) == len(ev.token_ids)
                    logprobs += ev.logprobs
    return tokens, logprobs


def _reference(hf, prompt, tokens) -> np.ndarray:
    """(len(tokens), V) float64: transformers' log_softmax of the logits that predicted each token."""
    model = copy.deepcopy(hf).double()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].double()
    return torch.log_softmax(logits, -1)[len(prompt) - 1:len(prompt) - 1 + len(tokens)].numpy()


def _check(ref, tokens, logprobs, top):
    assert [lp.token_id for lp in logprobs] == tokens
    for i, (lp, row) in enumerate(zip(logprobs, ref)):
        assert abs(lp.logprob - row[tokens[i]]) < ATOL, (i, lp.logprob, row[tokens[i]])
        order = np.argsort(-row, kind="stable")[:top]
        assert len(lp.top) == top
        got_ids, got_vals = [t for t, _ in lp.top], np.array([v for _, v in lp.top])
        np.testing.assert_allclose(got_vals, row[order], atol=ATOL)        # the true top values, in order
        assert np.all(np.diff(got_vals) <= 0)
        clear = np.abs(np.diff(row[order])) > 1e-3                         # neighbours f32 cannot swap
        for j in range(top):
            if (j == 0 or clear[j - 1]) and (j == top - 1 or clear[j]):
                assert got_ids[j] == order[j], (i, j, got_ids, list(order))


def test_greedy_logprobs_equal_transformers_log_softmax(tiny, engine):
    hf, _ = tiny("llama")
    eng = engine("llama")
    assert eng.max_logprobs == 20 and eng.manifest["logprobs"] == {"top": 20, "dtype": "float32"}
    prompt = PROMPTS[2]                                   # 24 tokens: two prefill chunks, then decodes
    tokens, logprobs = _run(eng, prompt, max_new_tokens=10, logprobs=5)
    ref = _reference(hf, prompt, tokens)
    assert tokens == [int(np.argmax(r)) for r in ref]    # greedy: the reference's argmax
    _check(ref, tokens, logprobs, 5)
    # negative control: the previous position's distribution is not within the tolerance
    assert max(abs(lp.logprob - ref[i - 1][tokens[i]]) for i, lp in enumerate(logprobs) if i) > 100 * ATOL


def test_sampled_tokens_logprobs_and_full_top(tiny, engine):
    hf, _ = tiny("llama")
    eng = engine("llama")
    prompt = PROMPTS[1]
    tokens, logprobs = _run(eng, prompt, max_new_tokens=8, temperature=1.5, top_k=50, seed=3, logprobs=20)
    ref = _reference(hf, prompt, tokens)
    assert tokens != [int(np.argmax(r)) for r in ref]    # it sampled: some token is not the argmax
    _check(ref, tokens, logprobs, 20)


def test_logprobs_zero_and_none(engine):
    eng = engine("llama")
    tokens, logprobs = _run(eng, PROMPTS[0], max_new_tokens=3, logprobs=0)
    assert len(logprobs) == 3 and all(lp.top == () for lp in logprobs)
    tokens2, logprobs2 = _run(eng, PROMPTS[0], max_new_tokens=3)
    assert tokens2 == tokens and logprobs2 == []


def test_logprobs_out_of_range_is_refused(engine):
    eng = engine("llama")
    for bad in (21, -1, True, 2.0):
        with pytest.raises(ArgumentError) as info:
            eng.submit(PROMPTS[0], max_new_tokens=2, logprobs=bad)
        assert info.value.param == "logprobs"


def test_artifact_without_logprobs_serves_and_refuses_them(engine):
    eng = engine("llama", top_logprobs=0)
    assert eng.max_logprobs == 0 and eng.manifest["logprobs"] is None
    assert all(len(p["outputs"]) == 1 + len(eng.manifest["kv"]["slots"]) for p in eng.manifest["programs"])
    with pytest.raises(ArgumentError, match="re-export") as info:
        eng.submit(PROMPTS[0], max_new_tokens=2, logprobs=1)
    assert info.value.param == "logprobs"
    [r] = eng.generate([PROMPTS[1]], max_new_tokens=4)
    with_lp = engine("llama")
    [r2] = with_lp.generate([PROMPTS[1]], max_new_tokens=4)
    assert r.token_ids == r2.token_ids


def test_manifest_of_an_older_tlaloc_loads_and_refuses_logprobs(artifact, tmp_path):
    """A manifest written before log-probabilities existed has no "logprobs" key (and 9 request inputs)."""
    import json
    import shutil
    from tlaloc.serving import Engine
    old = tmp_path / "old"
    shutil.copytree(artifact("llama", top_logprobs=0), old)
    m = json.loads((old / "manifest.json").read_text())
    del m["logprobs"]
    (old / "manifest.json").write_text(json.dumps(m))
    eng = Engine(str(old), fast_compile=True)
    assert eng.max_logprobs == 0
    with pytest.raises(ArgumentError, match="re-export"):
        eng.submit(PROMPTS[0], max_new_tokens=2, logprobs=0)
    assert len(eng.generate([PROMPTS[0]], max_new_tokens=3)[0].token_ids) == 3
