"""Timing harness shared by the benchmark scripts.

Every workload is timed side by side in one process: the implementations take
turns, one repeat each, so that a change in the machine's load during the run
falls on all of them alike. Each repeat times ``number`` calls in a loop
(calibrated once so that a repeat lasts about ``target_s``) and records the
time per call; the table shows the median over repeats and half the
interquartile range as the spread.

    from common import Bench, print_header      # scripts run from benchmarks/
    print_header("eager gradient")
    bench = Bench(quick=args.quick)
    bench.compare("mlp small", {"tlaloc": f1, "autograd": f2, "numpy": f3})
    bench.print_table(peers=["autograd", "numpy"])

The ratio column is tlaloc's median time divided by the peer's: below 1 means
tlaloc is faster.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import os
import platform
import statistics
import sys
import time
from typing import Callable, Optional

TABLE_HEADER = "| workload | tlaloc |"      # every table starts with this (the smoke test looks for it)


# -- machine and versions ------------------------------------------------------------------

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory() -> str:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "?"


def _version(name: str) -> Optional[str]:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


def _blas() -> str:
    try:
        from threadpoolctl import threadpool_info
        import numpy  # noqa: F401  (loads the BLAS)
        infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        return "; ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} "
                         f"{i.get('num_threads')} threads" for i in infos) or "?"
    except Exception as e:                                    # pragma: no cover
        return f"? ({type(e).__name__})"


def machine_info() -> dict:
    cores = os.cpu_count()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:                                    # pragma: no cover
        usable = cores
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    versions = {n: _version(d) for n, d in [
        ("python", None), ("tlaloc", "tlaloc-py"), ("numpy", "numpy"), ("autograd", "autograd"),
        ("jax", "jax"), ("jaxlib", "jaxlib"), ("torch", "torch"), ("transformers", "transformers")]
        if d is not None}
    versions["python"] = platform.python_version()
    return {
        "cpu": _cpu_model(), "cores": cores, "usable_cores": usable, "memory": _memory(),
        "os": f"{platform.system()} {platform.release()}",
        "load_average": "{:.2f} {:.2f} {:.2f}".format(*load),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "<unset>"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE", "<unset>"),
        "blas": _blas(),
        "versions": versions,
    }


_PRINTED = False


def print_header(title: str) -> None:
    """Print the machine and versions once per process, then the section title."""
    global _PRINTED
    if not _PRINTED:
        info = machine_info()
        print(f"machine: {info['cpu']}; {info['cores']} cores ({info['usable_cores']} usable); "
              f"{info['memory']}; {info['os']}")
        print(f"load average (1/5/15 min): {info['load_average']}")
        print(f"clock: {CLOCK_NAME}; threads: {os.environ.get('TLALOC_BENCH_THREADS', 'as configured')}; "
              f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '<unset>')}")
        print(f"OPENBLAS_CORETYPE={info['OPENBLAS_CORETYPE']} OPENBLAS_L2_SIZE={info['OPENBLAS_L2_SIZE']}; "
              f"BLAS: {info['blas']}")
        print("versions: " + ", ".join(f"{k} {v or 'missing'}" for k, v in info["versions"].items()))
        if os.environ.get("TLALOC_CHECK_RENDER"):
            print("WARNING: TLALOC_CHECK_RENDER is set: every tlaloc call also runs the interpreter; "
                  "tlaloc timings are not representative")
        _PRINTED = True
    print(f"\n## {title}\n", flush=True)


# -- timing ------------------------------------------------------------------------------

@dataclasses.dataclass
class Timing:
    """Seconds per call over the repeats."""
    samples: list

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def iqr(self) -> tuple:
        s = sorted(self.samples)
        if len(s) < 4:
            return s[0], s[-1]
        q = statistics.quantiles(s, n=4)
        return q[0], q[2]

    @property
    def spread(self) -> float:
        lo, hi = self.iqr
        return (hi - lo) / 2

    @property
    def min(self) -> float:
        return min(self.samples)


_CLOCK = time.perf_counter
CLOCK_NAME = "wall"
_LIMITS = []


def set_clock(name: str) -> None:
    """``"wall"`` (perf_counter) or ``"cpu"`` (this process's CPU time, all threads:
    excludes the time spent waiting for a core on a loaded machine)."""
    global _CLOCK, CLOCK_NAME
    if name not in ("wall", "cpu"):
        raise ValueError(f"clock must be 'wall' or 'cpu', got {name!r}")
    _CLOCK = time.perf_counter if name == "wall" else time.process_time
    CLOCK_NAME = name


def limit_threads(n: Optional[int]) -> None:
    """Run BLAS, XLA's CPU client and torch on ``n`` threads (None: leave them as they are).

    Must run before the first jax computation (XLA reads XLA_FLAGS when its client starts)."""
    if not n:
        return
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)                  # for BLAS libraries loaded from now on
    import numpy  # noqa: F401  (loads NumPy's BLAS, so that threadpoolctl below can limit it)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen="
                               + ("false" if n == 1 else "true")
                               + f" intra_op_parallelism_threads={n}").strip()
    try:
        from threadpoolctl import threadpool_limits
        _LIMITS.append(threadpool_limits(n))
    except Exception:                                         # pragma: no cover
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    os.environ["TLALOC_BENCH_THREADS"] = str(n)


def now() -> float:
    """The clock chosen with ``--clock`` (seconds)."""
    return _CLOCK()


def torch_threads(torch) -> None:
    """Apply ``--threads`` to torch, imported after ``limit_threads`` ran."""
    n = os.environ.get("TLALOC_BENCH_THREADS")
    if n:
        torch.set_num_threads(int(n))


def _calibrate(fn: Callable, target_s: float) -> int:
    """Calls per repeat so that one repeat lasts about ``target_s``."""
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        dt = time.perf_counter() - t0
        if dt >= target_s / 4 or number >= 1 << 20:
            return max(1, int(number * target_s / max(dt, 1e-9)))
        number *= 4


def _time_once(fn: Callable, number: int) -> float:
    clock = _CLOCK
    t0 = clock()
    for _ in range(number):
        fn()
    return (clock() - t0) / number


@dataclasses.dataclass
class Row:
    workload: str
    timings: dict                          # name -> Timing, or a string (why it did not run)
    unit: str = "time"                     # "time": seconds per call
    note: str = ""


class Bench:
    """Side-by-side timing of named implementations of one workload."""

    def __init__(self, quick: bool = False, repeats: Optional[int] = None, warmup: Optional[int] = None,
                 target_s: Optional[float] = None):
        self.quick = quick
        self.repeats = repeats or (5 if quick else 31)
        self.warmup = warmup if warmup is not None else (1 if quick else 3)
        self.target_s = target_s or (0.01 if quick else 0.05)
        self.rows: list[Row] = []

    def compare(self, workload: str, impls: dict, note: str = "", repeats: Optional[int] = None,
                number: Optional[int] = None) -> Row:
        """Time each ``impls[name]()`` (a zero-argument callable that includes the
        call overhead users pay) in interleaved repeats. An entry whose value is a
        string is recorded as not run, with that string as the reason."""
        runnable = {k: f for k, f in impls.items() if callable(f)}
        numbers = {}
        for name, fn in runnable.items():
            for _ in range(self.warmup):
                fn()
            numbers[name] = number or _calibrate(fn, self.target_s)
        samples = {k: [] for k in runnable}
        gc_was = gc.isenabled()
        gc.collect()
        gc.disable()
        try:
            for _ in range(repeats or self.repeats):
                for name, fn in runnable.items():
                    samples[name].append(_time_once(fn, numbers[name]))
        finally:
            if gc_was:
                gc.enable()
        timings = {k: (Timing(samples[k]) if k in samples else v) for k, v in impls.items()}
        row = Row(workload, timings, note=note)
        self.rows.append(row)
        return row

    def record(self, workload: str, timings: dict, unit: str = "time", note: str = "") -> Row:
        """Add a row measured elsewhere (``Timing`` objects or reasons)."""
        row = Row(workload, timings, unit=unit, note=note)
        self.rows.append(row)
        return row

    def print_table(self, peers: list, ratio_to: Optional[list] = None) -> None:
        print_table(self.rows, peers, ratio_to)
        print(f"\n(median ± half the interquartile range over {self.repeats} interleaved repeats, "
              f"{CLOCK_NAME} clock; ratio = tlaloc median / peer median, below 1: tlaloc is faster)", flush=True)


def time_calls(fn: Callable, repeats: int, warmup: int = 1) -> Timing:
    """Time ``fn()`` once per repeat (for calls that last long enough on their own)."""
    for _ in range(warmup):
        fn()
    return Timing([_time_once(fn, 1) for _ in range(repeats)])


# -- printing ------------------------------------------------------------------------------

def fmt_time(s: float) -> str:
    if s < 1e-6:
        return f"{s * 1e9:.0f} ns"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _cell(t) -> str:
    if t is None:
        return "—"
    if isinstance(t, str):
        return f"n/a ({t})"
    return f"{fmt_time(t.median)} ±{fmt_time(t.spread)}"


def _ratio(a, b) -> str:
    if not isinstance(a, Timing) or not isinstance(b, Timing):
        return "—"
    return f"{a.median / b.median:.2f}×"


def print_table(rows: list, peers: list, ratio_to: Optional[list] = None) -> None:
    """``| workload | tlaloc | peer... | tlaloc/peer... | note |`` in Markdown."""
    ratio_to = peers if ratio_to is None else ratio_to
    head = ["workload", "tlaloc"] + list(peers) + [f"tlaloc/{p}" for p in ratio_to] + ["note"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        t = r.timings.get("tlaloc")
        cells = [r.workload, _cell(t)] + [_cell(r.timings.get(p)) for p in peers]
        cells += [_ratio(t, r.timings.get(p)) for p in ratio_to] + [r.note]
        print("| " + " | ".join(cells) + " |")
    sys.stdout.flush()


def print_skipped(title: str, why: str) -> None:
    """A section that cannot run still prints a (one-row) table, and says why."""
    print(f"skipped: {why}")
    print(TABLE_HEADER + " note |")
    print("|---|---|---|")
    print(f"| {title} | skipped | {why} |", flush=True)


# -- helpers -------------------------------------------------------------------------------

def optional_import(name: str):
    """The module, or None when it is not installed (a peer the machine lacks)."""
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def jax_x64():
    """jax with float64 enabled (the eager and compiled workloads are float64), or None."""
    jax = optional_import("jax")
    if jax is not None:
        jax.config.update("jax_enable_x64", True)
    return jax


def parse_args(doc: str, argv=None, extra: Optional[Callable] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes and few repeats (under 30 s; smoke tests)")
    p.add_argument("--repeats", type=int, default=None, help="repeats per implementation (default 31, quick 5)")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall: elapsed time; cpu: process CPU time (steadier on a loaded machine)")
    p.add_argument("--threads", type=int, default=None,
                   help="limit BLAS, XLA and torch to N threads (default: leave them as they are)")
    if extra is not None:
        extra(p)
    args = p.parse_args(argv)
    set_clock(args.clock)
    limit_threads(args.threads)
    return args


def assert_close(name: str, got, want, rtol: float = 1e-6, atol: float = 1e-9) -> None:
    """Refuse to time implementations that disagree (each leaf compared as float64)."""
    import numpy as np
    got_l, want_l = _leaves(got), _leaves(want)
    if len(got_l) != len(want_l):
        raise AssertionError(f"{name}: {len(got_l)} outputs vs {len(want_l)}")
    for k, (a, b) in enumerate(zip(got_l, want_l)):
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol):
            err = np.max(np.abs(a - b)) if a.shape == b.shape else f"shapes {a.shape} vs {b.shape}"
            raise AssertionError(f"{name}: output {k} differs from the reference (max abs error {err})")


def _leaves(x) -> list:
    if isinstance(x, (tuple, list)):
        return [y for e in x for y in _leaves(e)]
    if isinstance(x, dict):
        return [y for k in sorted(x) for y in _leaves(x[k])]
    return [x]


_SLOT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1, "uint8": 1}


def tied_head_bytes(manifest: dict, names=("lm_head", "lm_head.scale")) -> int:
    """Bytes of the weight slots ``names`` of an artifact's manifest when its model ties the head to
    the embedding table and export stored the table's (D, V) copy as ``lm_head``
    (``weights_format.head_copy``); else 0. The default names give the copy's bytes; the table's
    (``("embed", "embed.scale")``) are then only gathered by row, never read whole per step."""
    import math
    slots = {s["name"]: s for s in manifest["weights"]["slots"]}
    if not (manifest["model"]["config"].get("tie_word_embeddings") and "lm_head" in slots):
        return 0
    return sum(_SLOT_BYTES[slots[n]["dtype"]] * math.prod(slots[n]["shape"]) for n in names if n in slots)
