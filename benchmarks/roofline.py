"""The machine's read roofline: how fast 1 and 2 threads can read a large float32 array.

    python benchmarks/roofline.py [--threads 2] [--mb 512]

Builds ``read_bandwidth.c`` with ``gcc -O3 -march=native -ffast-math -fopenmp`` (into a
temporary directory) and runs it on ``--mb`` MB (default 512: far beyond the caches) with
1 thread and with ``--threads``: the best of 10 passes, GB/s (1e9 bytes per second), once
with the allocator's 4 KiB pages and once with 2 MiB transparent huge pages (as tlaloc's CPU
weights have: ``tlaloc._runtime.host_arena``). A decode step at batch 1 reads every weight
once, so weight bytes per token over the faster figure is the fastest a memory-bound decode
can go (``decode_step.py --roofline`` divides by it).
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


_BUILT: dict = {}


def _executable() -> str | None:
    """read_bandwidth.c built once per process (into a temporary directory); None without gcc."""
    if "exe" not in _BUILT:
        cc = shutil.which(os.environ.get("CC", "gcc"))
        if cc is None:
            _BUILT["exe"] = None
        else:
            _BUILT["dir"] = tempfile.TemporaryDirectory(prefix="tlaloc-roofline-")
            exe = _BUILT["exe"] = os.path.join(_BUILT["dir"].name, "read_bandwidth")
            subprocess.run([cc, "-O3", "-march=native", "-ffast-math", "-fopenmp", SOURCE, "-o", exe], check=True)
    return _BUILT["exe"]


def read_gbps(threads: int, mb: int = 512, huge: bool = True) -> float | None:
    """Best-of-10 read bandwidth in GB/s on ``threads`` threads, on 2 MiB pages (``huge``) or
    4 KiB ones; None without gcc."""
    exe = _executable()
    if exe is None:
        return None
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="spread")
    out = subprocess.run([exe, str(mb << 20)] + (["huge"] if huge else []), capture_output=True, text=True,
                         check=True, env=env).stdout
    return float(out.split()[0])


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv, extra=lambda p: p.add_argument("--mb", type=int, default=512))
    threads = args.threads or 2
    common.print_header("read roofline")
    rows = {n: (read_gbps(n, args.mb, huge=False), read_gbps(n, args.mb, huge=True)) for n in (1, threads)}
    if rows[1][0] is None:
        print("no gcc: the roofline is not measured")
        return 0
    print(f"| threads | GB/s, 4 KiB pages ({args.mb} MB, best of 10) | GB/s, 2 MiB pages |\n|---|---|---|")
    for n, (small, huge) in rows.items():
        print(f"| {n} | {small:.1f} | {huge:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
