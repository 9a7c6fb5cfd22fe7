"""Score programs, Engine.score and perplexity, against transformers and an independent NumPy oracle.

f32 artifacts: per-token log-probabilities equal transformers' log-softmax (fp64) on the
same tiny seeded checkpoints. int8 and bf16 artifacts: they equal the eager model run
in NumPy on the artifact's own weights, dequantized here (q * scale per output channel,
bf16 -> f32), with keys and values rounded to bf16 where the KV pools are bf16.
"""
import math
import os

import ml_dtypes
import numpy as np
import pytest

from tlaloc.serving import greedy_agreement, perplexity
from tlaloc.serving.errors import ArgumentError, CapacityError
from tlaloc.serving.runtime.scoring import token_logprobs

from .fixtures import NEW_TOKENS, PROMPTS, perturb

IDS = [int(x) for x in np.random.default_rng(3).integers(3, 250, 40)]       # context 64
SHORT = IDS[:11]                                                             # context 16
FORMATS = {"f32": {}, "int8": {"weights": "int8"}, "bf16": {"dtype": "bf16"}}


def _hf_logprobs(hf, ids):
    """transformers' log p(ids[i+1] | ids[:i+1]) (n-1,) float64 and argmax (n-1,)."""
    import torch
    with torch.no_grad():
        logits = hf(torch.tensor([ids])).logits[0].double()                 # (n, V)
    lp = torch.log_softmax(logits, -1)[:-1]                                  # (n-1, V)
    return lp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0].numpy(), lp.argmax(-1).numpy()


def _numpy_logprobs(art, folder, ids):
    """The eager model on the artifact's stored weights, dequantized independently: (n-1,) float64."""
    from safetensors.numpy import load_file
    import tlaloc.models as tm
    from tlaloc.models.kv_cache import NoCache
    from tlaloc.serving.manifest import read_manifest
    from tlaloc.serving.export.weights_format import unflatten
    stored = load_file(os.path.join(art, "weights.safetensors"))
    flat = {}
    for name, q in stored.items():
        if name.endswith(".scale"):
            continue
        w = q.astype(np.float32)
        if name + ".scale" in stored:
            s = stored[name + ".scale"]
            w = w * (s[:, None] if name == "embed" else s[None, :])          # rows of the table, columns of (in, out)
        flat[name] = w
    m = read_manifest(art)
    kv_bf16 = m["kv"]["dtype"] == "bfloat16"

    class Backend(NoCache):
        def attend(self, layer, q, k, v, positions, window):
            if kv_bf16:
                k, v = (np.asarray(a).astype(ml_dtypes.bfloat16).astype(np.float32) for a in (k, v))
            return super().attend(layer, q, k, v, positions, window)
    cfg = tm.load(folder).config
    logits = np.asarray(tm.decoder_forward(cfg, unflatten(flat), np.array([ids]), np.arange(len(ids))[None],
                                           Backend()), np.float64)[0]      # (n, V)
    logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    return (logits[np.arange(len(ids) - 1), ids[1:]] - logz[:-1])


@pytest.mark.parametrize("name", ["llama", "qwen3_tied", "mistral_window6"])
def test_f32_score_equals_transformers(name, tiny, engine):
    hf, _ = tiny(name)
    eng = engine(name, score=True)
    for ids in (IDS, SHORT):
        r = eng.score(ids)
        want, argmax = _hf_logprobs(hf, ids)
        assert r.token_ids == ids and r.logprobs.shape == (len(ids) - 1,) and r.logprobs.dtype == np.float32
        np.testing.assert_allclose(r.logprobs, want, rtol=0, atol=2e-4)
        assert r.greedy_ids.tolist() == argmax.tolist()
        assert r.prompt_logprobs[0] is None and len(r.prompt_logprobs) == len(ids)
    assert math.isclose(perplexity(eng, IDS), math.exp(-_hf_logprobs(hf, IDS)[0].mean()), rel_tol=1e-4)


@pytest.mark.parametrize("fmt", ["int8", "bf16"])
def test_quantized_score_equals_the_numpy_model_on_the_stored_weights(fmt, tiny, artifact, engine):
    art = artifact("llama", score=True, **FORMATS[fmt])
    r = engine("llama", score=True, **FORMATS[fmt]).score(IDS)
    # bf16 KV: a last-bit f32 difference can flip one rounding; int8: the programs split each
    # activation row into two int8 terms (models.lowp, resolution max|x| / 64516), ~5e-4 nats here
    atol = 1e-3
    np.testing.assert_allclose(r.logprobs, _numpy_logprobs(art, tiny("llama")[1], IDS), rtol=0, atol=atol)


def test_windows_equal_transformers_on_each_window(tiny, engine):
    hf, _ = tiny("llama")
    eng = engine("llama", score=True)
    ids = IDS + IDS[:20]                                                     # 60 tokens, windows of 16
    r = token_logprobs(eng, ids, window=16, stride=5)
    want = np.zeros(len(ids) - 1)
    want[:15] = _hf_logprobs(hf, ids[:16])[0]
    a, b = 16, 21
    while a < len(ids):
        lo = b - 16
        want[a - 1:b - 1] = _hf_logprobs(hf, ids[lo:b])[0][a - lo - 1:]
        a, b = b, min(b + 5, len(ids))
    np.testing.assert_allclose(r.logprobs, want, rtol=0, atol=2e-4)
    assert r.nll != eng.score(ids).nll                                      # less context: another number


@pytest.mark.parametrize("fmt", ["f32", "int8", "bf16"])
def test_score_greedy_ids_match_the_served_first_token(fmt, engine):
    eng = engine("llama", score=True, **FORMATS[fmt])
    for p in PROMPTS[1:]:
        first = eng.generate([p], max_new_tokens=1, stop=[])[0].token_ids[0]
        assert eng.score(p + [0]).greedy_ids[-1] == first                  # the prediction after all of p


def test_quality_report_tiny(artifact, engine, record_property):
    """int8 weights ~4x smaller on matrices, bf16 2x; perplexity and greedy agreement reported against f32."""
    from tlaloc.serving.manifest import read_manifest
    f32 = engine("llama", score=True)
    ref_ppl = perplexity(f32, IDS)
    ref_ids = [r.token_ids for r in f32.generate(PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])]
    slots = {fmt: {s["name"]: s for s in read_manifest(artifact("llama", score=True, **o))["weights"]["slots"]}
             for fmt, o in FORMATS.items()}
    nbytes = {"float32": 4, "bfloat16": 2, "int8": 1}

    def matrix_bytes(fmt):
        mats = [n for n, s in slots["f32"].items() if len(s["shape"]) == 2]
        names = mats + [n + ".scale" for n in mats if n + ".scale" in slots[fmt]]
        return sum(nbytes[slots[fmt][n]["dtype"]] * math.prod(slots[fmt][n]["shape"]) for n in names)
    report = {}
    for fmt in ("int8", "bf16"):
        eng = engine("llama", score=True, **FORMATS[fmt])
        ppl = perplexity(eng, IDS)
        got = [r.token_ids for r in eng.generate(PROMPTS, max_new_tokens=NEW_TOKENS, stop=[])]
        agree = [greedy_agreement(w, g) for w, g in zip(ref_ids, got)]
        report[fmt] = {"matrix_bytes_ratio": round(matrix_bytes(fmt) / matrix_bytes("f32"), 4),
                       "ppl": round(ppl, 3), "ppl_f32": round(ref_ppl, 3),
                       "greedy_prefix": [a.prefix for a in agree], "first_divergence": [a.first_divergence
                                                                                         for a in agree]}
        assert all(a.total == NEW_TOKENS for a in agree)
        assert abs(ppl / ref_ppl - 1) < 0.05, report
        assert ppl != ref_ppl                                                # quantized: not the same numbers
    assert 0.25 < report["int8"]["matrix_bytes_ratio"] < 0.27, report       # 1/4 + one f32 scale per column of 64
    assert report["bf16"]["matrix_bytes_ratio"] == 0.5, report
    record_property("quality", report)
    print("\nquality vs f32 (tiny llama):", report)


def test_negative_control_perturbed_weights_change_perplexity(tiny, engine, tmp_path):
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    from .fixtures import LADDER
    hf, folder = tiny("llama")
    export(perturb(folder, tmp_path / "perturbed"), tmp_path / "art", **LADDER, score=True, progress=False)
    bad = Engine(tmp_path / "art", fast_compile=True).score(IDS)
    want = _hf_logprobs(hf, IDS)[0]
    assert np.max(np.abs(bad.logprobs - want)) > 0.1
    assert abs(math.exp(bad.nll) / perplexity(engine("llama", score=True), IDS) - 1) > 0.05


def test_greedy_agreement():
    a = greedy_agreement([1, 2, 3, 4], [1, 2, 9, 4, 5])
    assert (a.total, a.matching, a.prefix, a.first_divergence) == (4, 3, 2, 2)
    same = greedy_agreement([1, 2], [1, 2])
    assert (same.prefix, same.first_divergence) == (2, None)


def test_score_refusals(engine):
    with pytest.raises(ArgumentError, match="no score programs.*--score"):
        engine("llama").score(IDS)
    eng = engine("llama", score=True)
    with pytest.raises(CapacityError, match="65 tokens is over the artifact's largest context 64"):
        eng.score(IDS + IDS[:25])
    with pytest.raises(ArgumentError, match="empty"):
        eng.score([])
    with pytest.raises(ArgumentError, match="token id 256 is out of range"):
        eng.score([1, 256])
    with pytest.raises(ArgumentError, match="stride=16; use 1..15"):
        token_logprobs(eng, IDS, window=16, stride=16)
    with pytest.raises(ArgumentError, match="one token"):
        perplexity(eng, [5])
    assert eng.score([5]).logprobs.shape == (0,)
    # regression: floats, strings and bytes were read as ids (int(1.7) == 1, b"ab" -> [97, 98])
    for bad in ([1.7, 2.2], ["5", "6"], b"ab", [True, False], np.array([1.5, 2.5]), np.array([[1, 2]]), None, 5):
        with pytest.raises(ArgumentError, match="prompt must be a string or a list"):
            eng.score(bad)
    assert eng.score(np.array([1, 2, 3])).token_ids == [1, 2, 3]
    for kw in ({"window": 16.5}, {"window": "16"}, {"stride": 4.9}):
        with pytest.raises(ArgumentError, match="must be an int or None"):
            token_logprobs(eng, IDS, **kw)


def test_score_manifest_entries(artifact):
    from tlaloc.serving.manifest import ROLES, read_manifest
    m = read_manifest(artifact("llama", score=True))
    score = [p for p in m["programs"] if p["mode"] == "score"]
    assert [p["name"] for p in score] == ["score_b1_c16", "score_b1_c64"]
    for p in score:
        assert [s["role"] for s in p["request_slots"]] == ["token_ids", "seq_lens"]
        assert [s["role"] for s in p["outputs"]] == ["token_logprobs", "greedy_ids"]
        assert p["outputs"][0]["shape"] == [1, p["context"]] and p["donate"] == []
        assert {s["role"] for s in p["request_slots"] + p["outputs"]} <= set(ROLES)
    assert len(m["programs"]) == len(read_manifest(artifact("llama"))["programs"]) + 2


def test_score_runs_under_the_runtime_import_guard(artifact, engine):
    import json
    import subprocess
    import sys
    from .test_runtime_imports import CHILD, FORBIDDEN
    art = artifact("llama", score=True)
    code = CHILD.split("from tlaloc.serving import Engine")[0].format(forbidden=FORBIDDEN) + (
        "from tlaloc.serving import Engine, perplexity\n"
        f"engine = Engine({art!r}, fast_compile=True)\n"
        f"lp = engine.score({IDS!r}).logprobs.tolist()\n"
        f"ppl = perplexity(engine, {IDS!r}, window=16, stride=8)\n"
        "bad = sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.') for f in FORBIDDEN))\n"
        "print(json.dumps({'lp': lp, 'ppl': ppl, 'bad': bad}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    eng = engine("llama", score=True)
    assert out["bad"] == [] and out["lp"] == eng.score(IDS).logprobs.tolist()
    assert out["ppl"] == perplexity(eng, IDS, window=16, stride=8)
