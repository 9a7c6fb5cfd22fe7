"""200 requests of prompt lengths 1..512 run through a few bucketed programs, not one per length.

The artifact's ladders bound the sequence axes: each request is padded to the smallest context
bucket that holds it (prompt + new tokens), and each prefill call to the smallest rung of the
prefill token ladder that holds its longest chunk, so the engine runs at most
|batch| x |context| x (1 + |prefill tokens|) programs however many lengths it sees.
"""
import numpy as np
import pytest


def test_200_prompt_lengths_use_at_most_12_programs(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from models.helpers import torch_threads
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    from .fixtures import make_tiny, write_byte_tokenizer
    folder = str(tmp_path / "hf")
    with torch_threads(1):
        make_tiny("llama", {"max_position_embeddings": 1024}, folder)          # a tiny random Llama, in-process
    write_byte_tokenizer(folder)
    out = tmp_path / "art"
    export(folder, out, batch=(1,), context=(64, 128, 256, 520), block_size=8, prefill_chunk=64, progress=False)
    engine = Engine(out, fast_compile=True)
    lengths = np.linspace(1, 512, 200).round().astype(int)
    assert len(set(lengths.tolist())) == 200 and lengths.min() == 1 and lengths.max() == 512
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 256, n).tolist() for n in lengths]
    results = engine.generate(prompts, max_new_tokens=2, stop=[])
    assert [len(r.token_ids) for r in results] == [2] * 200
    used = sorted(engine.programs_used)
    assert engine.manifest["buckets"]["prefill_tokens"] == [16, 64]
    assert len(used) <= 4 * (1 + 2), used
    assert engine.stats()["programs_used"] == len(used)
    assert {c for _, _, c, _ in used} == {64, 128, 256, 520}        # every bucket served, none per length
    assert {t for mode, _, _, t in used if mode == "prefill"} == {16, 64}
