"""Smoke test of the benchmark suite: ``benchmarks/run_all.py --quick`` runs and prints its tables.

No timing is asserted: speed is measured and recorded in benchmarks/RESULTS.md,
never tested.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE_HEADER = "| workload | tlaloc |"           # benchmarks/common.py: TABLE_HEADER


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TLALOC_SLOW_TESTS"),
                    reason="the full `run_all.py --quick` smoke run takes ~4 minutes on 2 cores; set TLALOC_SLOW_TESTS=1 to run it")
def test_run_all_quick_prints_tables():
    env = dict(os.environ)
    env.pop("TLALOC_CHECK_RENDER", None)       # the suite's render check would distort nothing here but time
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--quick", "--threads", "1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    out = proc.stdout
    assert proc.returncode == 0, f"run_all.py --quick exited {proc.returncode}\n{out[-4000:]}\n{proc.stderr[-4000:]}"
    assert TABLE_HEADER in out, out[-4000:]
    for section in ("1. eager gradient", "2. compiled gradient", "3. definition-time cost", "4. training step",
                    "5-6. decode and prefill", "7. serving throughput"):
        assert section in out, f"section {section!r} missing\n{out[-4000:]}"
    assert "versions:" in out and "machine:" in out
