"""The training examples run end to end (``--quick``) and report what they learn."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(script, *args, timeout=600):
    env = {k: v for k, v in os.environ.items() if k != "TLALOC_CHECK_RENDER"}   # a user's run, no cross-check
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script), "--quick", *args],
                       capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    out = r.stdout.replace("\r", "\n")
    assert r.returncode == 0, f"{script} failed:\n{out[-3000:]}\n{r.stderr[-3000:]}"
    return out


def test_train_digits_quick():
    pytest.importorskip("sklearn")
    pytest.importorskip("tqdm")
    out = _run("train_digits.py")
    acc = dict(re.findall(r"^(MLP|CNN): test accuracy ([0-9.]+)", out, re.M))
    assert set(acc) == {"MLP", "CNN"}, out[-2000:]
    assert float(acc["MLP"]) >= 0.85 and float(acc["CNN"]) >= 0.6, acc   # after only 3 epochs each
    assert "epoch" in out                                                  # the tqdm progress bar


@pytest.mark.parametrize("backend", ["default", "interpreter"])
def test_train_charlm_quick(backend):
    out = _run("train_charlm.py", *([] if backend == "default" else ["--backend", backend]))
    first, last = map(float, re.search(r"val loss fell from ([0-9.]+) to ([0-9.]+)", out).groups())
    assert last < first - 1.0, out[-2000:]
    assert "sample:" in out
