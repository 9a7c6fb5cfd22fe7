"""The prefill token ladder: a short prompt runs in a small prefill program, not a full chunk of padding.

The artifact (contexts 16 and 64, chunk 64) has prefill programs of 16 and 64 tokens per
row. The 1- and 9-token prompts then prefill in the 16-token programs, the 24-token one
in the 64-token program, and the greedy ids still equal transformers' (the oracle). The
control is the single-rung artifact (``prefill_tokens=[64]``), where every prefill pads
to 64 tokens: the same ids, through other programs.
"""
import pytest

from .fixtures import NEW_TOKENS, PROMPTS


def _greedy(engine, prompts):
    return [r.token_ids for r in engine.generate(prompts, max_new_tokens=NEW_TOKENS, stop=[])]


def _prefill_buckets(engine) -> set:
    """(context, tokens per row) of every prefill program the engine ran."""
    return {(C, T) for mode, _, C, T in engine.programs_used if mode == "prefill"}


@pytest.mark.parametrize("name", ["llama", "qwen3_tied"])
def test_short_prompts_take_small_prefill_programs(name, engine, oracle):
    eng = engine(name, prefill_chunk=64)
    assert eng.manifest["buckets"]["prefill_tokens"] == [16, 64]
    names = {p["name"] for p in eng.manifest["programs"] if p["mode"] == "prefill"}
    assert names == {f"prefill_b{b}_c16" for b in (1, 4)} | {f"prefill_b{b}_c64{t}" for b in (1, 4)
                                                            for t in ("_t16", "")}
    assert [_greedy(eng, [p])[0] for p in PROMPTS] == oracle(name)      # alone: 1, 9, 24 tokens
    assert _prefill_buckets(eng) == {(16, 16), (64, 64)}
    assert _greedy(eng, PROMPTS) == oracle(name)                         # batched: the longest row decides
    # 16-token chunks: the 24-token prompt's second chunk (8 tokens, context 64) takes the 16-token program
    chunked = engine(name, engine_options={"prefill_chunk": 16}, prefill_chunk=64)
    assert [_greedy(chunked, [p])[0] for p in PROMPTS] == oracle(name)
    assert _prefill_buckets(chunked) == {(16, 16), (64, 16)}


def test_single_rung_control(engine, oracle):
    eng = engine("llama", engine_options={"prefill_chunk": 16}, prefill_chunk=64, prefill_tokens="64")
    assert eng.manifest["buckets"]["prefill_tokens"] == [64]
    assert [_greedy(eng, [p])[0] for p in PROMPTS] == oracle("llama")
    assert _prefill_buckets(eng) == {(16, 16), (64, 64)}                 # the second chunk padded to 64


def test_ladder_defaults_and_refusals():
    from tlaloc.errors import ArgumentError
    from tlaloc.serving.export.artifact import prefill_token_ladder
    assert prefill_token_ladder(256) == [16, 64, 256]
    assert prefill_token_ladder(16) == [16]
    assert prefill_token_ladder(8) == [8]
    assert prefill_token_ladder(1000) == [16, 64, 256, 1000]
    assert prefill_token_ladder(256, "32, 8") == [8, 32, 256]
    with pytest.raises(ArgumentError, match=r"prefill_tokens \[512\] exceed the prefill chunk \(256"):
        prefill_token_ladder(256, [16, 512])
    with pytest.raises(ArgumentError, match="prefill_tokens must be a list of positive integers"):
        prefill_token_ladder(256, "16,x")
