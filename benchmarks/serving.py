"""Serving throughput: aggregate tokens/s with 1, 4 and 16 concurrent requests through ``tlaloc serve``.

    python benchmarks/serving.py [--quick]

Needs the serving issue's pieces: ``tlaloc.serving.Engine`` and a ``serve``
command in the ``tlaloc`` CLI. Until both exist this prints why it is skipped.
Once they do, the measurement is: start ``tlaloc serve`` on 127.0.0.1, send N
concurrent greedy requests of 64 new tokens each (N = 1, 4, 16; bounded in
count and time), and report the tokens of all responses over the wall time.

Goal (issue 9): 16 concurrent requests give ≥ 6× the tokens/s of one stream.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402


def missing() -> list:
    out = []
    try:
        from tlaloc.serving import Engine  # noqa: F401
    except Exception:
        out.append("tlaloc.serving.Engine")
    try:
        from tlaloc import cli
        if "serve" not in cli.command_names():
            out.append("`tlaloc serve`")
    except Exception:
        out.append("`tlaloc serve` (no tlaloc.cli)")
    return out


def run(quick: bool = False, repeats=None):
    common.print_header("7. serving throughput (tlaloc serve)")
    gone = missing()
    if gone:
        common.print_skipped("serving 1/4/16 concurrent requests", f"{' and '.join(gone)} missing")
        return None
    common.print_skipped("serving 1/4/16 concurrent requests",
                         "the serving pieces exist but this script does not yet drive them (write the client)")
    return None


def main(argv=None) -> int:
    common.parse_args(__doc__, argv)
    run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
