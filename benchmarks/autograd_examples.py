"""autograd's example programs, ported by changing imports only, against autograd itself (issue 14).

    .venv/bin/python benchmarks/autograd_examples.py --autograd-dir /tmp/autograd

``--autograd-dir`` is a checkout of HIPS/autograd (nothing of it is copied into
this repository). For each program of its ``examples/`` folder the harness
writes a port that differs from it only in its imports (``PORT_RULES``), runs
the original under autograd and the port under tlaloc, each in a fresh process
with the same seeds, records the first ``--calls`` gradients each program
computes (see ``autograd_examples_child.py``), and prints one row per example:

* ``agree``: every recorded gradient equals autograd's to ``--rtol`` (the error
  is ``max |tlaloc - autograd| / max |autograd|`` over the gradient's arrays, the
  worst over the recorded gradients shown);
* ``wrong``: a gradient differs, or the runs computed different structures;
* ``refused``: the port stopped with an error (its first line shown);
* ``original failed``: autograd's own run did not reach a gradient.

What the runs share, so that both compute the same thing: MNIST is replaced by
seeded synthetic digits (1,000 training and 200 test images; no download),
matplotlib by a stub that draws nothing and whose ``imread`` decodes the PNG
files the fluid examples read, and ``__file__`` names the original file in both
runs (rnn, lstm and hmm_em train on their own source text).

Excluded, as they demonstrate autograd's tracer rather than a derivative:
``EXCLUDED``. The 28 others are counted.
"""
from __future__ import annotations

import argparse
import ast
import io
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
import tokenize

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

EXCLUDED = {
    "dot_graph": "draws autograd's computation graph (autograd.tracer), no derivative",
    "print_trace": "prints autograd's trace (autograd.tracer), no derivative",
    "rkhs": "defines a function-valued vector space through autograd.extend.VSpace, an autograd internal",
}

#: Module renames, first match wins: the only change a port makes.
PORT_RULES = (
    ("autograd.numpy", "numpy"),                     # autograd.numpy.random, autograd.numpy.linalg too
    ("autograd.scipy.signal", "tlaloc.scipy.signal"),  # convolve(axes=, dot_axes=) is autograd's, not SciPy's
    ("autograd.scipy", "scipy"),
    ("autograd.builtins", "builtins"),               # autograd's boxed tuple is Python's tuple here
    ("autograd.test_util", "tlaloc"),                # check_grads
    ("autograd", "tlaloc"),                          # grad, value_and_grad, misc.flatten, misc.optimizers, ...
)

#: ``import a.b.c as x`` where ``c`` is an object, not a module, in SciPy: written ``from a.b import c as x``.
_OBJECT_IMPORT = re.compile(r"^(\s*)import (scipy\.stats)\.(multivariate_normal|norm|t) as (\w+)", re.M)


def port_source(text: str) -> str:
    """``text`` with autograd's module names replaced (``PORT_RULES``) where they occur in code
    (imports and dotted references; strings and comments keep them); nothing else changes."""
    lines = text.splitlines(keepends=True)
    edits = []                                  # (row, start col, end col, new name), rows 1-based
    toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    i = 0
    while i < len(toks):
        t = toks[i]
        prev = toks[i - 1] if i else None
        if t.type == tokenize.NAME and t.string == "autograd" and not (prev and prev.string == "."):
            j, parts = i, ["autograd"]
            while (j + 2 < len(toks) and toks[j + 1].string == "." and toks[j + 2].type == tokenize.NAME
                   and toks[j + 2].start[0] == t.start[0]):
                parts.append(toks[j + 2].string)
                j += 2
            edits.append((t.start[0], t.start[1], toks[j].end[1], _rename(".".join(parts))))
            i = j + 1
            continue
        i += 1
    for row, a, b, new in reversed(edits):
        line = lines[row - 1]
        lines[row - 1] = line[:a] + new + line[b:]
    out = _OBJECT_IMPORT.sub(r"\1from \2 import \3 as \4", "".join(lines))
    for node in ast.walk(ast.parse(out)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(n.split(".")[0] == "autograd" for n in names):
            raise ValueError(f"the port still imports autograd at line {node.lineno}")
    return out


def _rename(name: str) -> str:
    for old, new in PORT_RULES:
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return name


def examples(autograd_dir: str) -> list:
    """``[(name, path)]`` of the example programs: the top-level scripts and fluidsim's two."""
    ex = os.path.join(autograd_dir, "examples")
    found = []
    for folder in (ex, os.path.join(ex, "fluidsim")):
        if not os.path.isdir(folder):
            continue
        for f in sorted(os.listdir(folder)):
            if f.endswith(".py") and f not in ("__init__.py", "data.py", "data_mnist.py"):
                found.append((f[:-3], os.path.join(folder, f)))
    return found


def write_ports(autograd_dir: str, dest: str) -> None:
    """Every ``.py`` under ``examples/`` ported into ``dest`` (same layout; data files stay put)."""
    ex = os.path.join(autograd_dir, "examples")
    for dirpath, _, files in os.walk(ex):
        rel = os.path.relpath(dirpath, ex)
        os.makedirs(os.path.join(dest, rel), exist_ok=True)
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f)) as fh:
                    text = fh.read()
                with open(os.path.join(dest, rel, f), "w") as fh:
                    fh.write(port_source(text))


# -- stubs shared by both runs --------------------------------------------------------------------

_DUMMY = '''
class _Dummy:
    def __call__(self, *a, **k): return self
    def __getattr__(self, name): return self
    def __iter__(self): return iter(())
    def __bool__(self): return False
'''

_PNG = '''
import struct, zlib
import numpy as np


def imread(path):
    """A PNG as matplotlib reads it: float32 in [0, 1], (rows, cols[, channels])."""
    data = open(path, "rb").read()
    pos, chunks, header = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + n
    w, h, depth, color, _, _, interlace = header
    if depth != 8 or interlace:
        raise ValueError(f"{path}: only 8-bit non-interlaced PNG is decoded here")
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[color]
    raw = zlib.decompress(b"".join(chunks))
    stride = w * channels
    out = np.zeros((h, stride), np.int64)
    prev = np.zeros(stride, np.int64)
    for r in range(h):
        kind, line = raw[r * (stride + 1)], np.frombuffer(raw, np.uint8, stride, r * (stride + 1) + 1)
        cur = line.astype(np.int64)
        if kind == 2:
            cur = (cur + prev) % 256
        elif kind in (1, 3, 4):
            for i in range(stride):
                a = cur[i - channels] if i >= channels else 0
                b, c = prev[i], (prev[i - channels] if i >= channels else 0)
                if kind == 1:
                    pred = a
                elif kind == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[i] = (cur[i] + pred) % 256
        out[r], prev = cur, cur
    img = (out.reshape(h, w, channels) / 255.0).astype(np.float32)
    return img[:, :, 0] if channels == 1 else img
'''

_MNIST = '''
import numpy as np


def mnist():
    """Seeded synthetic digits with MNIST's shapes and dtypes (no download)."""
    rs = np.random.RandomState(0)
    train = (rs.rand(1000, 28, 28) * 255).astype(np.uint8)
    test = (rs.rand(200, 28, 28) * 255).astype(np.uint8)
    return train, rs.randint(0, 10, 1000).astype(np.uint8), test, rs.randint(0, 10, 200).astype(np.uint8)
'''


def write_stubs(dest: str) -> None:
    mpl = os.path.join(dest, "matplotlib")
    os.makedirs(mpl, exist_ok=True)
    module = _DUMMY + "_d = _Dummy()\n\ndef __getattr__(name):\n    return _d\n"
    files = {"__init__.py": module + "from . import pyplot, image, cm\n",
             "pyplot.py": module + _PNG, "image.py": module + _PNG, "cm.py": module}
    for name, text in files.items():
        with open(os.path.join(mpl, name), "w") as fh:
            fh.write(text)
    with open(os.path.join(dest, "data_mnist.py"), "w") as fh:
        fh.write(_MNIST)


# -- runs and comparison --------------------------------------------------------------------------

def run(side, script, original, work, calls, stubs, timeout) -> dict:
    out = os.path.join(work, f"{side}.pkl")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, os.path.join(HERE, "autograd_examples_child.py"), side, script, original, out,
           str(calls), stubs]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s", "grads": []}
    if not os.path.exists(out):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"crashed: {tail[0]}", "grads": []}
    with open(out, "rb") as fh:
        return pickle.load(fh)


def compare(got: list, want: list) -> tuple:
    """(status, worst relative error) of tlaloc's recorded gradients against autograd's.

    The error of one recorded gradient is ``max |tlaloc - autograd|`` over all its arrays
    divided by ``max |autograd|`` over all its arrays: relative to the gradient's scale,
    so that entries that are zero up to rounding (the gradient of a bias followed by batch
    normalisation, say) are compared with the rest of the gradient, not with themselves.
    """
    if len(got) != len(want):
        return "wrong", f"{len(got)} gradients recorded, autograd {len(want)}"
    worst = 0.0
    for g_call, w_call in zip(got, want):
        if len(g_call) != len(w_call):
            return "wrong", f"{len(g_call)} arrays, autograd {len(w_call)}"
        err = scale = 0.0
        for g, w in zip(g_call, w_call):
            if np.shape(g) != np.shape(w):
                return "wrong", f"shape {np.shape(g)}, autograd {np.shape(w)}"
            if not np.array_equal(np.isfinite(g), np.isfinite(w)):
                return "wrong", "non-finite where autograd is finite, or the reverse"
            if np.size(w):
                finite = np.isfinite(w)
                err = max(err, float(np.max(np.abs(g - w)[finite], initial=0.0)))
                scale = max(scale, float(np.max(np.abs(w)[finite], initial=0.0)))
        worst = max(worst, err / scale if scale > 0 else err)
    return "agree", worst


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--autograd-dir", required=True, help="a checkout of HIPS/autograd")
    ap.add_argument("--calls", type=int, default=4, help="gradients compared per example, the first ones "
                    "each program computes (default 4; those after an optimizer step are taken at the "
                    "points each run reached, which differ by rounding)")
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--only", nargs="*", help="example names (default: all)")
    ap.add_argument("--keep", help="write the ports and run files here instead of a temporary folder")
    args = ap.parse_args(argv)

    work = args.keep or tempfile.mkdtemp(prefix="autograd_examples_")
    ports, stubs = os.path.join(work, "port"), os.path.join(work, "stubs")
    write_ports(args.autograd_dir, ports)
    write_stubs(stubs)
    ex_root = os.path.join(args.autograd_dir, "examples")
    rows, counts = [], {"agree": 0, "wrong": 0, "refused": 0, "original failed": 0}
    for name, original in examples(args.autograd_dir):
        if args.only and name not in args.only:
            continue
        if name in EXCLUDED:
            rows.append((name, "excluded", EXCLUDED[name], "", ""))
            continue
        port = os.path.join(ports, os.path.relpath(original, ex_root))
        here = os.path.join(work, "runs", name)
        os.makedirs(here, exist_ok=True)
        t0 = time.perf_counter()
        want = run("autograd", original, original, here, args.calls, stubs, args.timeout)
        t1 = time.perf_counter()
        got = run("tlaloc", port, original, here, args.calls, stubs, args.timeout)
        t2 = time.perf_counter()
        times = f"{t1 - t0:.0f} / {t2 - t1:.0f}"
        if want["error"] or not want["grads"]:
            status, detail = "original failed", want["error"] or "no gradient computed"
        elif got["error"]:
            status, detail = "refused", got["error"]
        else:
            status, detail = compare(got["grads"], want["grads"])
            if status == "agree" and detail > args.rtol:
                status = "wrong"
        counts[status] += 1
        err = f"{detail:.1e}" if isinstance(detail, float) else ""
        note = "" if isinstance(detail, float) else detail
        rows.append((name, status, note, err, times))
        print(f"{name}: {status} {err} {note}", file=sys.stderr, flush=True)

    print("| example | status | detail | max rel. error | s (autograd / tlaloc) |")
    print("|---|---|---|---:|---:|")
    for name, status, note, err, times in rows:
        print(f"| {name} | {status} | {note.replace('|', '/')} | {err} | {times} |")
    counted = sum(counts.values())
    print(f"\n{counts['agree']} of {counted} agree to {args.rtol:g} relative, {counts['wrong']} wrong, "
          f"{counts['refused']} refused, {counts['original failed']} whose original failed "
          f"(first {args.calls} gradient(s) per example).")
    return 0 if counts["wrong"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
