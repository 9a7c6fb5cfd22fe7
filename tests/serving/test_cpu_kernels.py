"""Artifacts with CPU-kernel programs: what export writes, what the runtime picks, same greedy ids.

Oracle for the kernel programs: the portable programs of the same artifact (plain StableHLO,
the reference path that runs on any PJRT backend), whose parity with transformers and with a
float reference of the same weights is held by test_parity.py and test_quantized_weights.py.
"""
import os
import subprocess
import sys

import pytest

from .fixtures import LADDER, NEW_TOKENS, PROMPTS

FORMATS = {"q4_1": dict(weights="q4_1"), "q8_0": dict(weights="q8_0"), "int8": dict(weights="int8"),
           "bf16": dict(dtype="bf16"), "f32": {}}
#: the kernel of the layer products and of the tied head, per format
TARGETS = {"q4_1": ["tlaloc_cpu_matmul_q4_1", "tlaloc_cpu_matmul_q8_0_t"],
           "q8_0": ["tlaloc_cpu_matmul_q8_0", "tlaloc_cpu_matmul_q8_0_t"],
           "int8": ["tlaloc_cpu_matmul_i8ch", "tlaloc_cpu_matmul_i8ch_t"],
           "bf16": ["tlaloc_cpu_matmul_bf16", "tlaloc_cpu_matmul_bf16_t"],
           "f32": ["tlaloc_cpu_matmul_f32", "tlaloc_cpu_matmul_f32_t"]}
#: decode programs also attend with the kernel reading the pages in place (prefill: the reference)
ATTENTION = {"bf16": "tlaloc_cpu_paged_attention_bf16"}


def _kernels_or_skip():
    from tlaloc._runtime import cpu_kernels
    if not cpu_kernels.load():
        pytest.skip(f"the CPU kernels cannot be built here: {cpu_kernels.reason()}")


def _greedy(engine):
    return [r.token_ids for r in engine.generate(PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_kernel_programs_give_the_portable_programs_greedy_ids(fmt, tiny, artifact):
    _kernels_or_skip()
    from tlaloc.serving import Engine
    from tlaloc.serving.manifest import read_manifest
    path = artifact("qwen3_tied", **FORMATS[fmt])
    m = read_manifest(path)
    for p in m["programs"]:
        attention = [ATTENTION.get(fmt, "tlaloc_cpu_paged_attention_f32")] if p["mode"] == "decode" else []
        assert sorted(p["cpu_kernels"]["targets"]) == sorted(TARGETS[fmt] + attention), p["name"]
        assert p["cpu_kernels"]["file"] in m["files"] and p["cpu_kernels"]["cache_key"] != p["cache_key"]
    with_kernels, portable = Engine(path, fast_compile=True), Engine(path, fast_compile=True, cpu_kernels=False)
    assert with_kernels.executor.cpu_kernels and not portable.executor.cpu_kernels
    got = _greedy(with_kernels)
    assert got == _greedy(portable)
    assert all(len(ids) == NEW_TOKENS for ids in got)


def test_float32_artifacts_take_the_f32_kernels_and_cpu_kernels_false_none(tiny, artifact, tmp_path):
    from tlaloc.serving.errors import ArgumentError
    from tlaloc.serving.export import export
    from tlaloc.serving.manifest import read_manifest
    for p in read_manifest(artifact("llama"))["programs"]:                # untied head: (D, V), f32
        attention = ["tlaloc_cpu_paged_attention_f32"] if p["mode"] == "decode" else []
        assert p["cpu_kernels"]["targets"] == sorted(["tlaloc_cpu_matmul_f32"] + attention), p["name"]
    for p in read_manifest(artifact("qwen3_tied"))["programs"]:           # tied head: the (V, D) table
        assert {"tlaloc_cpu_matmul_f32", "tlaloc_cpu_matmul_f32_t"} <= set(p["cpu_kernels"]["targets"])
    _, folder = tiny("llama")
    export(folder, tmp_path / "off", **LADDER, weights="q4_1", cpu_kernels=False, progress=False)
    m = read_manifest(tmp_path / "off")
    assert not any(p.get("cpu_kernels") for p in m["programs"])
    assert not [f for f in m["files"] if f.endswith(".cpu.mlir")]
    export(folder, tmp_path / "f32k", **LADDER, cpu_kernels=("f32", "f32_t"), progress=False)
    targets = {t for p in read_manifest(tmp_path / "f32k")["programs"] for t in p["cpu_kernels"]["targets"]}
    assert targets == {"tlaloc_cpu_matmul_f32"}                    # no attention kernel asked for
    with pytest.raises(ArgumentError, match="cpu_kernels must be True, False or a tuple of formats"):
        export(folder, tmp_path / "bad2", **LADDER, cpu_kernels="q4_1", progress=False)
    with pytest.raises(ArgumentError, match="cpu_kernels must be True, False or a tuple of formats"):
        export(folder, tmp_path / "bad", **LADDER, cpu_kernels=("q5_k",), progress=False)


def test_a_changed_kernel_program_is_refused_by_name(tiny, artifact, tmp_path):
    import shutil

    from tlaloc.serving import Engine
    from tlaloc.serving.errors import ArtifactError
    copy = tmp_path / "art"
    shutil.copytree(artifact("llama", weights="q8_0"), copy)
    target = copy / "programs" / "decode_b1_c16.cpu.mlir"
    target.write_text(target.read_text().replace("tlaloc_cpu_matmul_q8_0", "tlaloc_cpu_matmul_q4_1", 1))
    with pytest.raises(ArtifactError, match=r"programs/decode_b1_c16\.cpu\.mlir: sha256 mismatch"):
        Engine(copy, fast_compile=True)


def test_the_kernels_can_be_switched_off_by_environment(tmp_path):
    code = ("from tlaloc._runtime import cpu_kernels as k; ok = k.load(); "
            "print(ok, k.reason())")
    env = dict(os.environ, TLALOC_CPU_KERNELS="0", TLALOC_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "False disabled by TLALOC_CPU_KERNELS=0"
