"""Smoke test of the benchmark scripts, run by default: each section of ``benchmarks/run_all.py``
runs end to end as its own script in its smallest configuration (``--quick --repeats 1
--threads 1``), exits 0 and prints its table with a measured tlaloc time (and a ratio to
each peer) on every row; ``run_all.py`` itself runs two cheap sections.

No timing is asserted: speed is measured and recorded in benchmarks/RESULTS.md, never
tested. Sections 1-3 take 1-3 s each on 2 cores; 4 (training), 5-6 (decode and prefill)
and 7 (serving) about 15 s each, so they are marked ``slow`` (started first under xdist).
A section whose peers are not installed skips, naming the package.
"""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
TABLE_HEADER = "| workload | tlaloc |"           # benchmarks/common.py: TABLE_HEADER
SMALLEST = ["--quick", "--repeats", "1", "--threads", "1"]

# run_all.py's section name -> (script, title printed, packages its peers need, slow)
SECTIONS = {
    "eager": ("eager_grad.py", "1. eager gradient", ("autograd",), False),
    "jit": ("jit_grad.py", "2. compiled gradient", ("jax",), False),
    "definition": ("definition_time.py", "3. definition-time cost", ("jax",), False),
    "training": ("training_step.py", "4. training step", ("jax", "torch"), True),
    "llm": ("llm_inference.py", "5-6. decode and prefill", ("torch", "transformers"), True),
    "serving": ("serving.py", "7. serving throughput", ("httpx", "torch", "transformers"), True),
}


def _run(args):
    env = {k: v for k, v in os.environ.items() if k != "TLALOC_CHECK_RENDER"}   # a user's run, no cross-check
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    tail = f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"{' '.join(args)} exited {proc.returncode}\n{tail}"
    return proc.stdout


def table_problems(out: str) -> list:
    """What is wrong with the tables in a benchmark's output: none printed, or a row whose
    tlaloc cell is not a time (skipped, ``n/a (why)``) or whose ratio to a peer is missing."""
    problems, header = [], None
    if TABLE_HEADER not in out:
        return ["no table printed"]
    for line in out.splitlines():
        if line.startswith(TABLE_HEADER):
            header = [c.strip() for c in line.strip("|").split("|")]
            continue
        if header is None or not line.startswith("| "):
            header = None if not line.startswith("|") else header
            continue
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        if not re.fullmatch(r"[\d.]+ [nµm]?s ±.*", cells.get("tlaloc", "")):
            problems.append(f"tlaloc did not run: {line}")
        for col, cell in cells.items():
            if col.startswith("tlaloc/") and not re.fullmatch(r"\d+\.\d\d×", cell):
                problems.append(f"no {col} ratio: {line}")
    return problems


def test_the_sections_are_run_alls():
    tree = ast.parse((BENCH / "run_all.py").read_text())
    assigned = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    assert ast.literal_eval(assigned["SECTIONS"]) == list(SECTIONS)
    modules = ast.literal_eval(assigned["MODULES"])
    assert {name: modules[name] + ".py" for name in SECTIONS} == {n: s[0] for n, s in SECTIONS.items()}


def test_table_check_catches_a_skipped_row_and_a_missing_ratio():
    ok = (f"{TABLE_HEADER} jax | tlaloc/jax | note |\n|---|---|---|---|---|\n"
          f"| mlp | 1.20 ms ±3 µs | 2.40 ms ±0 ns | 0.50× | |\n")
    assert table_problems(ok) == []
    assert table_problems(ok.replace("1.20 ms ±3 µs", "n/a (export: Error)"))      # negative controls
    assert table_problems(ok.replace("0.50×", "—"))
    assert table_problems("skipped: torch missing\n") == ["no table printed"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if s[3] else []) for n, s in
                                  SECTIONS.items()])
def test_script_runs_smallest_and_prints_its_table(name):
    script, title, needs, _ = SECTIONS[name]
    for package in needs:
        pytest.importorskip(package, reason=f"benchmarks/{script} compares against {package}, not installed")
    out = _run([str(BENCH / script), *SMALLEST])
    assert title in out, f"section title {title!r} missing\n{out[-4000:]}"
    assert table_problems(out) == [], out[-4000:]


def test_run_all_runs_the_named_sections():
    out = _run([str(BENCH / "run_all.py"), *SMALLEST, "--only", "eager", "definition"])
    for name in ("eager", "definition"):
        assert SECTIONS[name][1] in out and f"[{name}: " in out, out[-4000:]
    assert "2. compiled gradient" not in out
    assert "versions:" in out and "machine:" in out and "all sections:" in out
    assert table_problems(out) == [], out[-4000:]
