"""The machine's read roofline: how fast 1 and 2 threads can read a large float32 array.

    python benchmarks/roofline.py [--threads 2] [--mb 512]

Builds ``read_bandwidth.c`` with ``gcc -O3 -march=native -ffast-math -fopenmp`` (into a
temporary directory) and runs it on ``--mb`` MB (default 512: far beyond the caches) with
1 thread and with ``--threads``: the best of 10 passes, GB/s (1e9 bytes per second). A
decode step at batch 1 reads every weight once, so weight bytes per token over this figure
is the fastest a memory-bound decode can go (``decode_step.py --roofline`` divides by it).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "read_bandwidth.c")


def read_gbps(threads: int, mb: int = 512) -> float | None:
    """Best-of-10 read bandwidth in GB/s on ``threads`` threads; None without gcc."""
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if cc is None:
        return None
    with tempfile.TemporaryDirectory(prefix="tlaloc-roofline-") as tmp:
        exe = os.path.join(tmp, "read_bandwidth")
        subprocess.run([cc, "-O3", "-march=native", "-ffast-math", "-fopenmp", SOURCE, "-o", exe], check=True)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="spread")
        out = subprocess.run([exe, str(mb << 20)], capture_output=True, text=True, check=True, env=env).stdout
    return float(out.split()[0])


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv, extra=lambda p: p.add_argument("--mb", type=int, default=512))
    threads = args.threads or 2
    common.print_header("read roofline")
    one, many = read_gbps(1, args.mb), read_gbps(threads, args.mb)
    if one is None:
        print("no gcc: the roofline is not measured")
        return 0
    print(f"| threads | GB/s ({args.mb} MB, best of 10) |\n|---|---|\n| 1 | {one:.1f} |\n| {threads} | {many:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
