"""Exported artifact + Engine against transformers: 32 greedy ids on tiny seeded Llama, Qwen3 and Mistral.

The three prompts (1, 9 and 24 tokens) run batched through the scheduler: prefill in
the (batch 4, context 16) bucket, the long prompt's second chunk in (1, 64), decodes in
contexts 16 and 64. Mistral's window (6) is shorter than the long prompt.
"""
import pytest

from .fixtures import NEW_TOKENS, PROMPTS, perturb

MODELS = ["llama", "qwen3_tied", "qwen3_untied", "mistral_window6"]


def _greedy(engine, prompts=PROMPTS):
    return [r.token_ids for r in engine.generate(prompts, max_new_tokens=NEW_TOKENS, stop=[])]


@pytest.mark.parametrize("name", MODELS)
def test_greedy_ids_equal_transformers(name, engine, oracle):
    eng = engine(name)
    assert _greedy(eng) == oracle(name)
    used = eng.scheduler.counters_by_bucket
    assert {C for (_, _, C) in used} == {16, 64}, used                 # several context buckets
    assert {B for (_, B, _) in used} == {1, 4}, used                   # and batch buckets
    assert eng.stats()["kv_pages_used"] == 0


def test_each_prompt_alone_equals_transformers(engine, oracle):
    eng = engine("llama")
    assert [_greedy(eng, [p])[0] for p in PROMPTS] == oracle("llama")


@pytest.mark.parametrize("name", ["llama", "mistral_window6"])
def test_negative_control_perturbed_weight_changes_ids(name, tiny, oracle, tmp_path):
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    from .fixtures import LADDER
    _, folder = tiny(name)
    bad = perturb(folder, tmp_path / "perturbed")
    export(bad, tmp_path / "art", **LADDER, progress=False)
    got = _greedy(Engine(tmp_path / "art", fast_compile=True))
    assert got != oracle(name)
    assert sum(g != o for g, o in zip(got, oracle(name))) >= 2


def test_mistral_window_is_shorter_than_the_prompt(engine):
    eng = engine("mistral_window6")
    assert eng.config["sliding_windows"] == [6, 6] and max(map(len, PROMPTS)) > 6


def test_text_and_chat_template(engine):
    eng = engine("llama")
    assert eng.tokenizer.decode(eng.tokenizer.encode("héllo").ids) == "héllo"
    chat = eng.apply_chat_template([{"role": "user", "content": "hi"}])
    assert chat == "<user>hi</s><assistant>"
    [r] = eng.generate([chat], max_new_tokens=5, stop=[])
    assert r.text == eng.tokenizer.decode(r.token_ids) and len(r.token_ids) == 5
