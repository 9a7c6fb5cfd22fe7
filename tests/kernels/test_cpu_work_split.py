"""How the CPU kernels split a call's work between threads (``run_and_steal`` in
src/tlaloc/kernels/cpu/common.h): every item once, whatever the thread count and however late
each pool task starts.

The kernels' own tests run on XLA's pool, whose thread count is the machine's: this builds
tests/kernels/work_split_check.cc against common.h with a pool of 1 to 8 real threads whose
tasks start after random delays (some only after the call has returned) and checks the claims.
Oracle: a count per item, which must be exactly 1. Negative control (in the C++ program): the
count check rejects an item claimed twice and one never claimed.
"""
import os
import shlex
import shutil
import subprocess

import pytest

from tlaloc._runtime import cpu_kernels

HERE = os.path.dirname(os.path.abspath(__file__))


def test_every_item_is_computed_once_for_any_thread_count_and_task_delay(tmp_path):
    words = shlex.split(os.environ.get("CXX") or "g++")
    if not words or shutil.which(words[0]) is None:
        pytest.skip("no C++ compiler (g++ or $CXX) to build the work-split check")
    exe = str(tmp_path / "work_split_check")
    build = subprocess.run([*words, "-O1", "-std=c++17", "-pthread", "-w", f"-I{cpu_kernels._DIR}",
                            f"-I{cpu_kernels._include_dir()}", os.path.join(HERE, "work_split_check.cc"), "-o", exe],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    done = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stdout + done.stderr
    assert int(done.stdout.split()[1]) == 6 * 7 * 4 * 2
