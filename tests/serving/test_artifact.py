"""The artifact: manifest schema, byte-identical exports, atomic writes, and refusals on load."""
import json
import os
import shutil

import pytest

from tlaloc.serving import ArtifactError, Engine
from tlaloc.serving.errors import ArgumentError
from tlaloc.serving.export import export
from tlaloc.serving.manifest import MANIFEST, ROLES, SCHEMA_VERSION, read_manifest

from .fixtures import LADDER


def _files(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            with open(os.path.join(d, n), "rb") as f:
                out[os.path.relpath(os.path.join(d, n), root)] = f.read()
    return out


def test_manifest_schema(artifact):
    m = read_manifest(artifact("llama"))
    assert m["schema_version"] == SCHEMA_VERSION and m["kind"] == "decoder"
    assert m["buckets"] == {"batch": [1, 4], "context": [16, 64], "prefill_chunk": 16, "prefill_tokens": [16]}
    assert m["kv"]["block_size"] == 8 and m["kv"]["num_pages"] == 1 + 4 * 64 // 8 and m["kv"]["scratch_page"] == 0
    assert [s["name"] for s in m["kv"]["slots"]] == ["kv.k", "kv.v"]                 # every layer's pages in one pool
    assert m["kv"]["layout"] == ["layers", "pages", "block_size", "kv_heads", "head_dim"]
    assert [s["shape"] for s in m["kv"]["slots"]] == [[2, m["kv"]["num_pages"], 8, 2, 16]] * 2
    assert {p["name"] for p in m["programs"]} == {f"{mode}_b{b}_c{c}" for mode in ("prefill", "decode")
                                                  for b in (1, 4) for c in (16, 64)}
    weights = {s["name"] for s in m["weights"]["slots"]}
    assert {"embed", "norm", "lm_head", "layers.0.wqkv", "layers.1.w_gate_up", "layers.1.w_down"} <= weights
    assert not {"layers.0.wq", "layers.0.wk", "layers.0.wv", "layers.0.w_gate", "layers.0.w_up"} & weights
    # the manifest says which columns of each fused tensor hold which checkpoint tensor (D 64, H 4, K 2, E 16, F 128)
    assert m["weights"]["fused"]["layers.1.wqkv"] == {
        "axis": -1, "parts": [["layers.1.wq", 0, 64], ["layers.1.wk", 64, 96], ["layers.1.wv", 96, 128]]}
    assert m["weights"]["fused"]["layers.0.w_gate_up"] == {
        "axis": -1, "parts": [["layers.0.w_gate", 0, 128], ["layers.0.w_up", 128, 256]]}
    for p in m["programs"]:
        roles = [s["role"] for s in p["request_slots"]]
        assert roles == ["token_ids", "positions", "block_tables", "seq_lens", "slot_mapping", "temperature",
                         "top_k", "top_p", "uniforms", "want_logprobs"]
        assert set(roles) <= set(ROLES)
        assert p["inputs"][:10] == roles and p["inputs"][10:12] == ["kv.k", "kv.v"] and set(p["inputs"][12:]) == weights
        assert p["donate"] == [[10 + k, 1 + k] for k in range(2)]             # both pools, in place
        assert [(s["role"], s["shape"]) for s in p["outputs"][3:]] == [
            ("token_logprob", [p["batch"]]), ("top_logprobs", [p["batch"], 20]), ("top_ids", [p["batch"], 20])]
        assert p["tokens"] == (1 if p["mode"] == "decode" else 16)
        assert p["request_slots"][2]["shape"] == [p["batch"], p["context"] // 8]
        assert len(p["cache_key"]) == 64 and p["file"] in m["files"]
        text = open(os.path.join(artifact("llama"), p["file"])).read()
        assert text.count("tf.aliasing_output") == 2
    assert set(m["files"]) == set(_files(artifact("llama"))) - {MANIFEST}
    assert m["tokenizer"]["file"] == "tokenizer.json" and "<assistant>" in m["tokenizer"]["chat_template"]


def test_two_exports_are_byte_identical(tiny, artifact, tmp_path):
    """Another process (another hash seed) exports the same model to the same bytes."""
    import subprocess
    import sys
    _, folder = tiny("llama")
    code = (f"from tlaloc.serving.export import export; "
            f"export({folder!r}, {str(tmp_path / 'again')!r}, **{LADDER!r}, progress=False)")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True, timeout=600)
    assert _files(tmp_path / "again") == _files(artifact("llama"))


def test_export_refuses_an_existing_directory_and_bad_options(tiny, tmp_path):
    _, folder = tiny("llama")
    (tmp_path / "taken").mkdir()
    with pytest.raises(ArgumentError, match="exists"):
        export(folder, tmp_path / "taken", **LADDER)
    with pytest.raises(ArgumentError, match="multiple of block_size=16"):
        export(folder, tmp_path / "a", batch=(1,), context=(24,), block_size=16)
    with pytest.raises(ArgumentError, match="max_position_embeddings=256"):
        export(folder, tmp_path / "b", batch=(1,), context=(512,))
    with pytest.raises(ArgumentError, match="dtype='f16'"):
        export(folder, tmp_path / "c", batch=(1,), context=(16,), dtype="f16")
    assert sorted(os.listdir(tmp_path)) == ["taken"]                        # nothing half-written left behind


def _copy(artifact, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(artifact, dst)
    return dst


def test_tampered_weight_is_refused_by_hash(artifact, tmp_path):
    art = _copy(artifact("llama"), tmp_path)
    path = art / "weights.safetensors"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01                                                         # one bit of one weight
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="artifact file weights.safetensors: sha256 mismatch"):
        Engine(art)


def test_tampered_program_is_refused_by_hash(artifact, tmp_path, monkeypatch):
    import tlaloc.serving.runtime.executor as executor_module
    monkeypatch.setattr(executor_module, "_COMPILED", {})    # not compiled by an earlier test in this process
    art = _copy(artifact("llama"), tmp_path)
    path = art / "programs" / "decode_b1_c16.mlir"
    path.write_text(path.read_text().replace("stablehlo.add", "stablehlo.subtract", 1))
    with pytest.raises(ArtifactError, match=r"programs/decode_b1_c16.mlir: sha256 mismatch"):
        Engine(art)
    # lazily compiled: checked again (the portable text; the CPU-kernel one is another file)
    eng = Engine(art, verify=False, fast_compile=True, cpu_kernels=False)
    with pytest.raises(ArtifactError, match=r"programs/decode_b1_c16.mlir: sha256 mismatch"):
        eng.executor.executable("decode", 1, 16)
    kernel_text = art / "programs" / "decode_b1_c16.cpu.mlir"
    if kernel_text.exists():
        kernel_text.write_text(kernel_text.read_text().replace("stablehlo.add", "stablehlo.subtract", 1))
        eng = Engine(art, verify=False, fast_compile=True, cpu_kernels=True)
        if eng.executor.cpu_kernels:
            with pytest.raises(ArtifactError, match=r"programs/decode_b1_c16.cpu.mlir: sha256 mismatch"):
                eng.executor.executable("decode", 1, 16)


def test_unknown_schema_version_is_refused(artifact, tmp_path):
    art = _copy(artifact("llama"), tmp_path)
    m = json.loads((art / MANIFEST).read_text())
    m["schema_version"] = SCHEMA_VERSION + 1
    (art / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match=f"unknown schema_version={SCHEMA_VERSION + 1}"):
        Engine(art)
    with pytest.raises(ArtifactError, match="has no manifest.json"):
        Engine(tmp_path)


def test_int8_and_bf16_weights(artifact, engine, oracle, record_property):
    from .fixtures import NEW_TOKENS, PROMPTS
    f32 = os.path.getsize(os.path.join(artifact("llama"), "weights.safetensors"))
    report = {}
    for fmt, options in (("int8", {"weights": "int8"}), ("bf16", {"dtype": "bf16"})):
        m = read_manifest(artifact("llama", **options))
        size = m["files"]["weights.safetensors"]["bytes"]
        assert size < (0.35 if fmt == "int8" else 0.55) * f32
        slots = {s["name"]: s for s in m["weights"]["slots"]}
        if fmt == "int8":
            assert slots["layers.0.wqkv"]["dtype"] == "int8" and slots["layers.0.wqkv.scale"]["shape"] == [128]
            assert slots["embed.scale"]["shape"] == [256] and slots["norm"]["dtype"] == "float32"
        else:
            assert m["kv"]["dtype"] == "bfloat16" and slots["layers.0.wqkv"]["dtype"] == "bfloat16"
            # bf16 pools stay one per layer (programs.stacked_kv): its scatters would pass over every layer's
            assert [s["name"] for s in m["kv"]["slots"]] == ["kv.0.k", "kv.0.v", "kv.1.k", "kv.1.v"]
        got = [r.token_ids for r in engine("llama", **options).generate(PROMPTS, max_new_tokens=NEW_TOKENS,
                                                                         stop=[])]
        want = oracle("llama")
        same = [sum(1 for _ in _prefix(g, w)) for g, w in zip(got, want)]
        agree = sum(int(a == b) for g, w in zip(got, want) for a, b in zip(g, w)) / (len(want) * NEW_TOKENS)
        report[fmt] = {"bytes": size, "f32_bytes": f32, "greedy_prefix_kept": same, "agreement": round(agree, 3)}
        assert min(same) >= 4, report                                         # close: the first ids agree
    record_property("quantization", report)
    print("\nweights vs f32 (tiny llama):", report)


def _prefix(a, b):
    for x, y in zip(a, b):
        if x != y:
            return
        yield x


def test_an_artifact_of_one_kv_pool_per_layer_still_runs(tiny, engine, tmp_path, monkeypatch):
    """Artifacts exported before the stacked pools (``kv.<l>.k``/``kv.<l>.v`` (P, BS, K, E)) load and
    give the stacked artifact's greedy ids bit for bit: the runtime makes whatever pools the
    manifest lists."""
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export, programs
    from .fixtures import LADDER, NEW_TOKENS, PROMPTS
    monkeypatch.setattr(programs, "STACKED_KV", False)
    out = tmp_path / "per_layer"
    export(tiny("llama")[1], out, **LADDER, progress=False)
    m = read_manifest(str(out))
    assert [s["name"] for s in m["kv"]["slots"]] == ["kv.0.k", "kv.0.v", "kv.1.k", "kv.1.v"]
    assert m["kv"]["layout"] == ["pages", "block_size", "kv_heads", "head_dim"]
    kernel_texts = [p["cpu_kernels"]["file"] for p in m["programs"] if p["mode"] == "decode" and p.get("cpu_kernels")]
    assert kernel_texts and all("@tlaloc_cpu_paged_attention_" in (out / f).read_text() for f in kernel_texts)
    old = Engine(str(out), fast_compile=True).generate(PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])
    new = engine("llama").generate(PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])
    assert [r.token_ids for r in old] == [r.token_ids for r in new]
