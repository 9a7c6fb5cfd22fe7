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
#: the kernel of the layer products and of the tied head, per format (the tied table's head is
#: an exact (D, V) copy in the layers' kernel: weights_format.head_copy)
TARGETS = {"q4_1": ["tlaloc_cpu_matmul_q4_1_p64", "tlaloc_cpu_matmul_q8_0_p64"],
           "q8_0": ["tlaloc_cpu_matmul_q8_0_p64"],
           "int8": ["tlaloc_cpu_matmul_i8ch_p64"],
           "bf16": ["tlaloc_cpu_matmul_bf16_p64"],
           "f32": ["tlaloc_cpu_matmul_f32_p64"]}
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
        pa = ATTENTION.get(fmt, "tlaloc_cpu_paged_attention_f32")
        # float32 pools stack the layers (layer 0, then page_offset l * P); bf16 pools are one per layer
        attention = ([pa] if fmt == "bf16" else [pa, pa + "_at"]) if p["mode"] == "decode" else []
        attention += ["tlaloc_cpu_kv_write_" + ("bf16" if fmt == "bf16" else "f32")]     # every program writes
        assert sorted(p["cpu_kernels"]["targets"]) == sorted(TARGETS[fmt] + attention), p["name"]
        assert p["cpu_kernels"]["file"] in m["files"] and p["cpu_kernels"]["cache_key"] != p["cache_key"]
        # the layers' weights go to the panel-order kernels; the tied table (head and embedding) does not
        packed = p["cpu_kernels"]["panel64"]
        assert packed and set(packed) <= set(p["inputs"]) and not [n for n in packed if "embed" in n], p["name"]
    with_kernels, portable = Engine(path, fast_compile=True, cpu_kernels=True), Engine(path, fast_compile=True, cpu_kernels=False)
    assert with_kernels.executor.cpu_kernels and not portable.executor.cpu_kernels
    # each packed weight is on the device once, packed (every program runs a kernel text)
    for name in m["programs"][0]["cpu_kernels"]["panel64"]:
        assert (name, "panel64") in with_kernels.executor.weights and name not in with_kernels.executor.weights
        assert name in portable.executor.weights and (name, "panel64") not in portable.executor.weights
    got = _greedy(with_kernels)
    assert got == _greedy(portable)
    assert all(len(ids) == NEW_TOKENS for ids in got)


def test_float32_artifacts_take_the_f32_kernels_and_cpu_kernels_false_none(tiny, artifact, tmp_path):
    from tlaloc.serving.errors import ArgumentError
    from tlaloc.serving.export import export
    from tlaloc.serving.manifest import read_manifest
    for p in read_manifest(artifact("llama"))["programs"]:                # untied head: (D, V), f32
        attention = ["tlaloc_cpu_paged_attention_f32", "tlaloc_cpu_paged_attention_f32_at"] if p["mode"] == "decode" else []
        attention += ["tlaloc_cpu_kv_write_f32"]
        assert p["cpu_kernels"]["targets"] == sorted(["tlaloc_cpu_matmul_f32_p64"] + attention), p["name"]
    for p in read_manifest(artifact("qwen3_tied"))["programs"]:           # tied head: the table's (D, V) copy
        assert "tlaloc_cpu_matmul_f32_p64" in p["cpu_kernels"]["targets"]
    _, tied = tiny("qwen3_tied")
    export(tied, tmp_path / "rows", **LADDER, cpu_kernels=("f32_t",), progress=False)   # no (in, out) kernel
    m = read_manifest(tmp_path / "rows")
    assert "lm_head" not in {s["name"] for s in m["weights"]["slots"]}
    assert {t for p in m["programs"] for t in p["cpu_kernels"]["targets"]} == {"tlaloc_cpu_matmul_f32_t"}
    _, folder = tiny("llama")
    export(folder, tmp_path / "off", **LADDER, weights="q4_1", cpu_kernels=False, progress=False)
    m = read_manifest(tmp_path / "off")
    assert not any(p.get("cpu_kernels") for p in m["programs"])
    assert not [f for f in m["files"] if f.endswith(".cpu.mlir")]
    export(folder, tmp_path / "f32k", **LADDER, cpu_kernels=("f32", "f32_t"), progress=False)
    targets = {t for p in read_manifest(tmp_path / "f32k")["programs"] for t in p["cpu_kernels"]["targets"]}
    assert targets == {"tlaloc_cpu_matmul_f32_p64"}                # no attention kernel asked for
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
    target.write_text(target.read_text().replace("tlaloc_cpu_matmul_q8_0_p64", "tlaloc_cpu_matmul_q4_1_p64", 1))
    with pytest.raises(ArtifactError, match=r"programs/decode_b1_c16\.cpu\.mlir: sha256 mismatch"):
        Engine(copy, fast_compile=True)


def test_kernel_programs_of_another_tlaloc_run_portable(tiny, artifact, tmp_path, caplog):
    """An artifact whose kernel texts call targets this build lacks (an older export: row-layout
    targets without ``_p64``) runs its portable programs, with a warning, never the wrong kernels."""
    import json
    import logging
    import shutil

    from tlaloc.serving import Engine
    _kernels_or_skip()
    copy = tmp_path / "old"
    shutil.copytree(artifact("llama", weights="q8_0"), copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    for p in manifest["programs"]:
        p["cpu_kernels"]["targets"] = [t.replace("_p64", "") for t in p["cpu_kernels"]["targets"]]
        del p["cpu_kernels"]["panel64"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING, logger="tlaloc.serving"):
        old = Engine(copy, fast_compile=True, cpu_kernels=True)
    assert not old.executor.cpu_kernels
    assert "tlaloc_cpu_matmul_q8_0, which this tlaloc does not have" in caplog.text
    want = Engine(artifact("llama", weights="q8_0"), fast_compile=True, cpu_kernels=False)
    assert _greedy(old) == _greedy(want)


def test_auto_runs_the_kernels_where_they_pay_on_this_cpu(tiny, artifact, monkeypatch):
    """The default, cpu_kernels="auto": with AVX-512 (cpu_kernels.pays) every kernel text; without
    it (the kernels' portable loops), the decode steps of at most PORTABLE_DECODE_ROWS rows (q8_0
    and float32 weights here), the portable texts for prefill; the mixed engine gives the portable
    engine's greedy ids. With int8 activations, every program whose products all have int8 kernels
    (X8_DECODE_ROWS rows for decode steps with a float32 product). A value not
    True/False/"auto" is refused by name."""
    from tlaloc._runtime import cpu_kernels
    from tlaloc.serving import Engine
    from tlaloc.errors import ArgumentError
    if not cpu_kernels.load():
        pytest.skip(f"the CPU kernels do not build here: {cpu_kernels.reason()}")
    flags = cpu_kernels._cpu_signature().split()
    assert cpu_kernels.pays() == ("avx512f" in flags and "avx512bw" in flags)
    path = artifact("llama", weights="q8_0")

    def kernel_programs(engine):
        ex = engine.executor
        return {(p["mode"], p["batch"]) for p in ex.manifest["programs"] if ex._variant(p) is p.get("cpu_kernels")}
    everything = kernel_programs(Engine(path, fast_compile=True, cpu_kernels=True))
    assert {("decode", 1), ("decode", 4), ("prefill", 1), ("prefill", 4)} <= everything
    for avx512 in (True, False):
        monkeypatch.setattr(cpu_kernels, "pays", lambda: avx512)
        auto = Engine(path, fast_compile=True)
        chosen = kernel_programs(auto)
        if avx512:
            assert chosen == everything
        else:
            assert chosen == {(m, b) for m, b in everything if m == "decode" and b <= cpu_kernels.PORTABLE_DECODE_ROWS}
            assert _greedy(auto) == _greedy(Engine(path, fast_compile=True, cpu_kernels=False))
            f32 = Engine(artifact("llama"), fast_compile=True)      # float32 weights: the loops pay too,
            dense = {(p["mode"], p["batch"]) for p in f32.executor.manifest["programs"]   # and with AVX2 up to
                     if p["batch"] * p.get("tokens", 1) <= cpu_kernels.DENSE_ROWS}      # DENSE_ROWS rows
            avx2 = "avx2" in flags
            assert kernel_programs(f32) == (dense if avx2 else {("decode", 1), ("decode", 4)}) and f32.executor.cpu_kernels
            assert ("prefill", 1) in dense or not avx2
            f32_p64, bf16_p64 = "tlaloc_cpu_matmul_f32_p64", "tlaloc_cpu_matmul_bf16_p64"
            assert cpu_kernels.pays_for("prefill", 1, [f32_p64, bf16_p64], tokens=16) == avx2
            assert not cpu_kernels.pays_for("prefill", 1, [f32_p64], tokens=64)
            rows = cpu_kernels.DENSE_ROWS
            assert cpu_kernels.pays_for("decode", rows, [f32_p64]) == avx2 and not cpu_kernels.pays_for("decode", rows + 1, [f32_p64])
            # a program with the float32 _t (rows) product keeps XLA's dots: its loop was not measured
            assert not cpu_kernels.pays_for("decode", 1, ["tlaloc_cpu_matmul_f32_t", "tlaloc_cpu_matmul_q8_0_p64"])
            assert not cpu_kernels.pays_for("decode", 1, ["tlaloc_cpu_kv_write_f32"])     # no product at all
            # int8 activations: every program whose products all have int8 kernels (q8_0 here), prefill
            # included, whatever X8_DECODE_ROWS; that limit holds for decode steps with float32 products
            monkeypatch.setattr(cpu_kernels, "X8_DECODE_ROWS", 1)
            a8 = Engine(path, fast_compile=True, activations="int8")
            assert kernel_programs(a8) == everything and a8.executor.activations == "int8"
            assert _greedy(a8) == _greedy(Engine(path, fast_compile=True, activations="int8", cpu_kernels=True))
            q8, f32, q4 = (f"tlaloc_cpu_matmul_{f}_p64" for f in ("q8_0", "f32", "q4_1"))
            assert cpu_kernels.pays_for("prefill", 4, [q4, q8], "int8") and cpu_kernels.pays_for("score", 1, [q8], "int8")
            assert not cpu_kernels.pays_for("prefill", 4, [q4, q8])                       # float32 activations
            assert not cpu_kernels.pays_for("prefill", 1, [q8, f32], "int8")              # a float32 product
            assert cpu_kernels.pays_for("decode", 1, [q8, f32], "int8") and not cpu_kernels.pays_for("decode", 4, [q8, f32], "int8")
            monkeypatch.setattr(cpu_kernels, "X8_DECODE_ROWS", 16)
            assert cpu_kernels.pays_for("decode", 16, [q8, f32], "int8") and not cpu_kernels.pays_for("decode", 17, [q8, f32], "int8")
        assert auto.executor.cpu_kernels
    with pytest.raises(ArgumentError, match="cpu_kernels must be True, False or 'auto'"):
        Engine(path, fast_compile=True, cpu_kernels="yes")


def test_a_weight_shared_by_a_panel_kernel_and_another_op_is_refused():
    from tlaloc.serving.errors import ArtifactError
    from tlaloc.serving.export.artifact import _panel_weights
    call = "%0 = stablehlo.custom_call @tlaloc_cpu_matmul_q8_0_p64(%arg0, %arg1, %arg2) {api_version = 4 : i32}"
    head = "func.func public @main(%arg0: tensor<1x64xf32>, %arg1: tensor<64x64xi8>, %arg2: tensor<2x64xf16>)"
    assert _panel_weights(f"{head}\n{call}\n", ["x", "w", "s"], "p") == ["s", "w"]
    shared = f"{head}\n{call}\n%1 = stablehlo.convert %arg1 : (tensor<64x64xi8>) -> tensor<64x64xf32>\n"
    with pytest.raises(ArtifactError, match="weight w feeds a panel-order CPU kernel and 1 other op"):
        _panel_weights(shared, ["x", "w", "s"], "p")
    row_kernel = call.replace("_q8_0_p64", "_q8_0_t")                  # the row kernels read the plain layout
    assert _panel_weights(f"{head}\n{row_kernel}\n", ["x", "w", "s"], "p") == []


def test_the_kernels_can_be_switched_off_by_environment(tmp_path):
    code = ("from tlaloc._runtime import cpu_kernels as k; ok = k.load(); "
            "print(ok, k.reason())")
    env = dict(os.environ, TLALOC_CPU_KERNELS="0", TLALOC_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "False disabled by TLALOC_CPU_KERNELS=0"


def test_head_copy_is_the_tied_table_transposed_exactly():
    import numpy as np

    from tlaloc.models.quantized import block_quantize
    from tlaloc.serving.export.weights_format import head_copy, quantize_int8
    rng = np.random.default_rng(0)
    table = rng.standard_normal((128, 64)).astype(np.float32)             # (V, D)
    q, scale = block_quantize(table, axis=1)                               # Q8_0 blocks along D
    stored = {"embed": q, "embed.scale": scale, "norm": np.ones(64, np.float32)}
    out = head_copy(stored, ("q8_0",))
    rows = (q.astype(np.float64).reshape(128, 2, 32) * scale.astype(np.float64)[:, :, None]).reshape(128, 64)
    head = out["lm_head"].astype(np.float64).reshape(2, 32, 128) * out["lm_head.scale"].astype(np.float64)[:, None, :]
    assert out["lm_head"].shape == (64, 128) and out["lm_head.scale"].shape == (2, 128)
    np.testing.assert_array_equal(head.reshape(64, 128), rows.T)         # W (D, V) = table.T, blocks along D
    assert out["embed"] is q and "lm_head" not in stored                   # the table stays for the lookup
    assert head_copy(stored, ("q8_0_t",)) is stored                        # no (in, out) kernel asked for
    qi, si = quantize_int8("embed", table)                                 # one scale per row
    out = head_copy({"embed": qi, "embed.scale": si}, ("i8ch",))
    np.testing.assert_array_equal(out["lm_head"], qi.T)
    np.testing.assert_array_equal(out["lm_head.scale"], si)
    out = head_copy({"embed": table}, ("f32",))                            # float32: the table transposed
    np.testing.assert_array_equal(out["lm_head"], table.T)
    assert "lm_head.scale" not in out and head_copy({"embed": table}, ("q8_0", "f32_t")) == {"embed": table}


def test_score_programs_run_the_kernels_and_the_weights_are_held_once(tiny, artifact):
    """score=True: the score programs have kernel texts too, so every program reads the packed
    weights and the executor holds no plain copy of them; scores equal the portable programs'."""
    import numpy as np

    from tlaloc.serving import Engine
    from tlaloc.serving.manifest import read_manifest
    _kernels_or_skip()
    path = artifact("qwen3_tied", score=True, weights="q8_0")
    m = read_manifest(path)
    scores = [p for p in m["programs"] if p["mode"] == "score"]
    assert scores and all(p.get("cpu_kernels", {}).get("panel64") for p in scores)
    kernels, portable = Engine(path, fast_compile=True, cpu_kernels=True), Engine(path, fast_compile=True, cpu_kernels=False)
    packed = set(scores[0]["cpu_kernels"]["panel64"])
    assert not packed & {n for n in kernels.executor.weights if isinstance(n, str)}
    ids = list(range(3, 40))
    a, b = kernels.score(ids), portable.score(ids)
    np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=0, atol=2e-4)
    assert a.greedy_ids.tolist() == b.greedy_ids.tolist()


def test_int8_activations_run_the_x8_kernels_on_k4_weights(tiny, artifact):
    """activations="int8": the kernel texts call the int8-activation targets (cpu_kernels.X8_TARGETS),
    whose integer weights (here Q4_1's uint8 nibbles and the head's Q8_0 int8) are uploaded in k4
    order; the kernels themselves are held to their
    definition in tests/kernels/test_cpu_matmul_x8.py. Greedy ids are reported against float32
    activations, not asserted equal: the activations' rounding may change a close argmax."""
    _kernels_or_skip()
    import numpy as np
    from tlaloc._runtime.cpu_kernels import X8_TARGETS, pack_k4
    from tlaloc.serving import Engine
    fmt = "q4_1"
    path = artifact("qwen3_tied", **FORMATS[fmt])
    exact = Engine(path, fast_compile=True, cpu_kernels=True)
    a8 = Engine(path, fast_compile=True, cpu_kernels=True, activations="int8")
    assert (exact.executor.activations, a8.executor.activations) == ("float32", "int8")
    with pytest.raises(AttributeError):         # regression: fixed at load, as the weights are packed for it
        a8.executor.activations = "float32"
    program = a8.executor.programs[("decode", 1, 16, 1)]
    assert a8.executor._x8(program) and not exact.executor._x8(program)
    assert set(program["cpu_kernels"]["targets"]) & set(X8_TARGETS)
    from safetensors.numpy import load_file
    stored = load_file(os.path.join(path, "weights.safetensors"))
    integer = [n for n in program["cpu_kernels"]["panel64"] if stored[n].dtype in (np.int8, np.uint8)]
    assert {stored[n].dtype for n in integer} == {np.dtype(np.int8), np.dtype(np.uint8)}
    for n in integer:
        assert np.array_equal(np.asarray(a8.executor.weights[n, "panel64"]), pack_k4(stored[n]))
    got, want = _greedy(a8), _greedy(exact)
    assert all(len(ids) == NEW_TOKENS for ids in got)
    agree = [next((k for k in range(NEW_TOKENS) if a[k] != b[k]), NEW_TOKENS) for a, b in zip(got, want)]
    print(f"\n{fmt}: greedy ids equal to float32 activations' for the first {agree} of {NEW_TOKENS} tokens")
    assert got != want          # the activations' rounding shows: the int8-activation kernels ran


def test_activations_other_than_float32_and_int8_are_refused_and_int8_needs_the_kernels(tiny, artifact):
    from tlaloc.serving import Engine
    from tlaloc.serving.errors import ArgumentError
    path = artifact("qwen3_tied", weights="q4_1")
    import numpy as np
    for bad in ("int4", np.array(["int8"]), np.array(["int8", "int8"]), None):   # arrays: regression (got through)
        with pytest.raises(ArgumentError, match="activations must be one of"):
            Engine(path, fast_compile=True, activations=bad)
    assert Engine(path, fast_compile=True, cpu_kernels=False, activations="int8").executor.activations == "float32"
    _kernels_or_skip()
    # float32 weights: no product takes int8 activations, and the engine says so
    assert Engine(artifact("qwen3_tied"), fast_compile=True, cpu_kernels=True,
                  activations="int8").executor.activations == "float32"
