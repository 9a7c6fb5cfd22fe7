"""Run every benchmark section in one process and print each table.

    python benchmarks/run_all.py [--quick] [--repeats N] [--clock wall|cpu] [--threads N] [--only NAME ...]

Sections: eager (1), jit (2), definition (3), training (4), llm (5-6), serving (7), and
llamacpp (8: tlaloc against llama.cpp on the SmolLM2 GGUF, the ``bench`` extra), which
runs only when named (``--only llamacpp``) or with ``--llamacpp``.
A section that fails prints why and the others still run; the exit code is 1
if any section failed. ``--quick`` runs every section small (a smoke run, not
a measurement). Record full runs in benchmarks/RESULTS.md.
"""
from __future__ import annotations

import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

SECTIONS = ["eager", "jit", "definition", "training", "llm", "serving"]
OPTIONAL = ["llamacpp"]
MODULES = {"eager": "eager_grad", "jit": "jit_grad", "definition": "definition_time",
           "training": "training_step", "llm": "llm_inference", "serving": "serving", "llamacpp": "llama_cpp"}


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv, extra=lambda p: (
        p.add_argument("--only", nargs="+", choices=SECTIONS + OPTIONAL, default=None, help="run only these sections"),
        p.add_argument("--llamacpp", action="store_true", help="also run section 8 (tlaloc against llama.cpp)")))
    failed = []
    t_start = time.perf_counter()
    for name in args.only or SECTIONS + (OPTIONAL if args.llamacpp else []):
        t0 = time.perf_counter()
        try:
            module = __import__(MODULES[name])
            module.run(args.quick, args.repeats)
        except Exception as e:
            failed.append(name)
            print(f"\nfailed: section {name}: {type(e).__name__}: {e}")
            traceback.print_exc(file=sys.stdout)
        print(f"\n[{name}: {time.perf_counter() - t0:.1f} s]", flush=True)
    print(f"\nall sections: {time.perf_counter() - t_start:.1f} s; load average now "
          f"{common.machine_info()['load_average']}")
    if failed:
        print(f"failed sections: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
