"""Seeded mutations of tlaloc, one at a time, against the tests that own each mutated module.

Each row of MUTATIONS is (name, file under src/tlaloc, exact old text, new text, test
files). The script copies the repository's ``src``, ``tests`` and ``pyproject.toml``
to a temporary folder (the real tree is never touched), and for each row replaces the
old text (which must occur exactly once, else it stops with an error) in the copy,
runs ``pytest -x`` on the row's test files with ``PYTHONPATH`` at the copy's ``src``
and a per-mutation timeout, restores the file, and prints a table:

    | mutation | files | result | first failure | seconds |

A mutation is *caught* when pytest reports a failed test (exit status 1), *survived*
when every test passes (0); a timeout or another status (collection error, ...) is
shown as such. It runs outside ``make test`` (minutes on 2 cores); the cheap check that
every row's old text still exists is ``tests/benchmarks/test_mutation_rows.py``.

    python benchmarks/mutation_check.py                 # every row
    python benchmarks/mutation_check.py -k rope -k eps  # rows whose name contains a word
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]


class Mutation(NamedTuple):
    name: str
    file: str            # relative to src/tlaloc
    old: str
    new: str
    tests: tuple         # test files relative to the repository root, run in this order


M = Mutation
JIT_TABLES = ("tests/jit/test_conventions_jit.py", "tests/jit/test_jit_vs_interpreter.py", "tests/jit/test_ad_table.py")
MUTATIONS = [
    # -- the five named in issue 20 ------------------------------------------------------------------
    M("kernel RMSNorm eps dropped (PTX)", "kernels/library/rmsnorm.py",
      '    inst("add.rn.f32", acc, acc, float(np.float32(eps)))\n', "", ("tests/kernels/test_library.py",)),
    M("second order: matmul_t_lhs VJP args swapped", "_prims/linalg.py",
      "(broadcast_like(matmul(c, y), g), matmul_t_rhs(g, c, y), None)",
      "(broadcast_like(matmul(c, y), g), matmul_t_rhs(c, g, y), None)",
      ("tests/nesting/test_second_order_table.py", "tests/ad/test_reverse_vs_jax.py",
       "tests/forward/test_hessians.py", "tests/custom/test_check_grads.py")),
    M("jit: sin VJP flipped", "_prims/elementwise.py",
      '"stablehlo.sine", lambda x, y: cos(x))', '"stablehlo.sine", lambda x, y: negative(cos(x)))', JIT_TABLES),
    M("jit: safe_mul/safe_div keep 0*inf = NaN", "_core/specialize_rules.py",
      '    return emit("select", zero, emit("zeros_like", out), out)\n', "    return out\n",
      JIT_TABLES + ("tests/jit/test_specialize.py",)),
    M("nn.RMSNorm eps dropped (f64 table)", "nn/_norm.py",
      "y = x * tnp.rsqrt(ms + self.eps)", "y = x * tnp.rsqrt(ms)", ("tests/nn/test_layers_vs_torch.py",)),
    M("models: RMSNorm eps x10", "models/layers.py",
      "tnp.rsqrt(variance + eps))", "tnp.rsqrt(variance + 10 * eps))", ("tests/models/test_decoders.py",)),
    # -- one per primitive family ---------------------------------------------------------------------
    M("elementwise impl: expm1 as exp(x) - 1", "_prims/elementwise.py",
      "_np1(np.expm1)", "_np1(lambda x: np.exp(x) - 1)", ("tests/core/test_prims_elementwise.py",)),
    M("elementwise VJP: tanh' = 1 + y^2", "_prims/elementwise.py",
      "lambda x, y: subtract(1.0, multiply(y, y)))", "lambda x, y: add(1.0, multiply(y, y)))",
      ("tests/ad/test_reverse_vs_jax.py",)),
    M("special: erf' constant off by 1.6e-10", "_prims/special.py",
      "_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)", "_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi + 1e-9)",
      ("tests/core/test_erf.py",)),
    M("reductions: cumsum VJP direction", "_prims/reductions.py",
      "(cumsum(g, axis, not reverse),)", "(cumsum(g, axis, reverse),)", ("tests/ad/test_reverse_vs_jax.py",)),
    M("shape ops: transpose VJP not inverted", "_prims/shape_ops.py",
      "(transpose(g, _inverse_perm(axes)),)", "(transpose(g, axes),)", ("tests/ad/test_reverse_vs_jax.py",)),
    M("shape rule: concatenate off-axis sizes unchecked", "_prims/shape_ops.py",
      "        if i != a and len(dims) > 1:\n", "        if False:\n", ("tests/core/test_prim_table.py",)),
    M("indexing: scatter_add VJP drops the update's cotangent", "_prims/indexing.py",
      "(g, None, gather(g, i, axis))", "(g, None, zeros_like(gather(g, i, axis)))",
      ("tests/ad/test_reverse_vs_jax.py", "tests/core/test_prims_structural.py")),
    M("selection: select VJP branches swapped", "_prims/selection.py",
      "return None, sum_to(select(pred, g, z), x), sum_to(select(pred, z, g), y)",
      "return None, sum_to(select(pred, z, g), x), sum_to(select(pred, g, z), y)",
      ("tests/ad/test_reverse_vs_jax.py",)),
    M("rng: one threefry rotation changed", "_prims/threefry_impl.py",
      "_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))", "_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 25))",
      ("tests/core/test_random_impl.py",)),
    # -- tie and NaN conventions ----------------------------------------------------------------------
    M("ties: maximum VJP gives x the whole cotangent", "_prims/elementwise.py",
      "select(equal(x, y), 0.5, select(equal(out, _as_out(x, out)), 1.0, 0.0))",
      "select(equal(x, y), 1.0, select(equal(out, _as_out(x, out)), 1.0, 0.0))", ("tests/ad/test_conventions.py",)),
    M("ties: reduce_max VJP not split among maxima", "_prims/reductions.py",
      "    w = divide(hit, reduce_sum(hit, axes, keepdims=True))\n    return (safe_mul(",
      "    w = hit\n    return (safe_mul(", ("tests/ad/test_conventions.py",)),
    M("NaN: maximum ignores NaN (fmax)", "_prims/elementwise.py",
      'max_p = binary("maximum", np.maximum,', 'max_p = binary("maximum", np.fmax,',
      ("tests/core/test_prims_elementwise.py",)),
    # -- models: attention masks, RoPE, norms, KV cache ---------------------------------------------
    M("attention: causal mask sees one future key", "models/layers.py",
      "allowed = k_pos[:, None, :] <= q_pos[:, :, None] ", "allowed = k_pos[:, None, :] <= q_pos[:, :, None] + 1 ",
      ("tests/models/test_decoders.py",)),
    M("attention: sliding window one key wider", "models/layers.py",
      "k_pos[:, None, :] > q_pos[:, :, None] - window", "k_pos[:, None, :] >= q_pos[:, :, None] - window",
      ("tests/models/test_decoders.py",)),
    M("attention: encoder padding keys not masked", "models/encoder.py",
      "key_valid = attention_mask > 0 ", "key_valid = attention_mask >= 0 ", ("tests/models/test_encoder.py",)),
    M("RoPE: rotate_half sign flipped", "models/layers.py",
      "rotated = tnp.concatenate([tnp.negative(x2), x1], axis=-1)",
      "rotated = tnp.concatenate([x2, tnp.negative(x1)], axis=-1)", ("tests/models/test_decoders.py",)),
    M("nn.LayerNorm eps dropped", "nn/_norm.py",
      "y = d * tnp.rsqrt(var + self.eps)", "y = d * tnp.rsqrt(var)", ("tests/nn/test_layers_vs_torch.py",)),
    M("nn.cross_entropy counts ignored labels", "nn/functional.py",
      "    nll = tnp.where(kept, nll, 0.0)  ", "    nll = tnp.where(True, nll, 0.0)  ",
      ("tests/nn/test_cross_entropy.py",)),
    M("KV cache (eager): keys written one slot late", "models/kv_cache.py",
      "self.k[layer][rows, positions] = k", "self.k[layer][rows, np.minimum(positions + 1, self.max_len - 1)] = k",
      ("tests/models/test_decoders.py",)),
    M("KV cache (paged): neighbouring slots swapped", "_prims/serving.py",
      "flat[slots[keep] + page_offset * BS] = np.asarray(new)", "flat[(slots[keep] ^ 1) + page_offset * BS] = np.asarray(new)",
      ("tests/serving/test_primitives.py",)),
    # -- serving: scheduler, sampler ---------------------------------------------------------------
    M("scheduler: pages rounded down", "serving/runtime/requests.py",
      "    return -(-tokens // block_size)", "    return tokens // block_size", ("tests/serving/test_scheduler.py",)),
    M("scheduler: slot mapping one offset late", "serving/runtime/batch.py",
      "* block_size + p % block_size for p", "* block_size + (p + 1) % block_size for p", ("tests/serving/test_scheduler.py",)),
    M("sampler: top-p applied before top-k", "serving/export/sampling.py",
      "e = tnp.where(in_k, tnp.exp(vals - vals[:, :1]), np.float32(0.0))",
      "e = tnp.exp(vals - vals[:, :1])",
      ("tests/serving/test_sampling_vs_transformers.py",)),
    M("sampler: temperature multiplies", "serving/export/sampling.py",
      "sort_descending(logits / t[:, None])", "sort_descending(logits * t[:, None])",
      ("tests/serving/test_sampling_vs_transformers.py",)),
]


def check_rows(src_root: Path = ROOT / "src" / "tlaloc") -> None:
    """Every row's old text occurs exactly once in its file and differs from the new text."""
    for m in MUTATIONS:
        text = (src_root / m.file).read_text()
        n = text.count(m.old)
        if n != 1:
            raise SystemExit(f"mutation {m.name!r}: old text found {n} times in src/tlaloc/{m.file} "
                             f"(must be exactly once): {m.old!r}")
        if m.old == m.new:
            raise SystemExit(f"mutation {m.name!r}: new text equals old text")


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    shutil.copytree(ROOT / "src", dest / "src", ignore=ignore)
    shutil.copytree(ROOT / "tests", dest / "tests", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")


def _first_failure(out: str) -> str:
    m = re.search(r"^(?:FAILED|ERROR) (\S+)", out, re.M)
    return m.group(1) if m else ""


def run_one(m: Mutation, copy: Path, timeout: float) -> tuple[str, str, float]:
    path = copy / "src" / "tlaloc" / m.file
    original = path.read_text()
    path.write_text(original.replace(m.old, m.new, 1))
    env = dict(os.environ, PYTHONPATH=str(copy / "src"), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", *m.tests]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        result = {0: "survived", 1: "caught"}.get(proc.returncode, f"error (pytest exit {proc.returncode})")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)          # pytest and anything it started, by our own group id
        out, _ = proc.communicate()
        result = f"timeout ({timeout:.0f} s)"
    finally:
        path.write_text(original)
    return result, _first_failure(out or ""), time.monotonic() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", action="append", default=[], help="run only rows whose name contains this (repeatable)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per mutation (default 600)")
    args = ap.parse_args(argv)
    check_rows()
    rows = [m for m in MUTATIONS if not args.k or any(k.lower() in m.name.lower() for k in args.k)]
    print("| mutation | files | result | first failure | seconds |\n|---|---|---|---|---:|", flush=True)
    survived = 0
    with tempfile.TemporaryDirectory(prefix="tlaloc-mutants-") as tmp:
        copy = Path(tmp)
        _copy_tree(copy)
        for m in rows:
            result, first, secs = run_one(m, copy, args.timeout)
            survived += result != "caught"
            files = ", ".join(t.removeprefix("tests/") for t in m.tests)
            first = first.removeprefix("tests/")
            print(f"| {m.name} (`{m.file}`) | {files} | {result} | {first and f'`{first}`'} | {secs:.0f} |",
                  flush=True)
    print(f"\n{len(rows) - survived} of {len(rows)} mutations caught")
    return 0 if survived == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
