"""The AD case table (tests/ad/cases.py) through tl.jit on every commit: a subset
that covers every row, mode, dtype and backend, and rotates with the commit.

Each entry ``(row, mode, backend, dtype)`` runs ``ad_modes.check``: the compiled
transform against the eager one (rtol 1e-12 / 1e-5) and against JAX float64 on
the row's twin (``ad_jax.py``), and must give exactly what ``ad_expected.py``
lists ("ok", or a named refusal / not-applicable reason).

Selection, from a seed (``git rev-parse HEAD``, else today's date):

* every row once on XLA, in mode and dtype ``(row index + seed) mod 8`` of the
  8 (mode, dtype) pairs, at its first argument point (``tl.jacfwd`` besides ``tl.jvp``
  on half the rows, fixed by name): every row, mode and dtype
  runs on every commit, and each row meets every (mode, dtype) within a few commits;
* on IREE (compiles take seconds), one row per mode in float32 and one in float64,
  drawn from the rows whose IREE programs compile in a few seconds;
* ``EXTRA`` more entries drawn from the rest of the whole table (all 1,456), at every
  argument point.

The header of the run prints the seed (``tests/jit/conftest.py``);
``TLALOC_AD_TABLE_SEED=<n>`` repeats a selection, and ``TLALOC_AD_TABLE=full`` selects the
whole table (about 20 CPU-minutes, IREE's compiles dominate), every argument point:

    TLALOC_AD_TABLE=full pytest tests/jit/test_ad_table.py -n 2 -k "xla and float64"
"""
from __future__ import annotations

import datetime
import os
import random
import subprocess
import zlib

import numpy as np
import pytest

from . import ad_expected, ad_modes

cases = pytest.importorskip("tests.ad.cases", reason="the AD case table lives in tests/ad")

MODES = tuple(ad_modes.MODES)
DTYPES = (np.float64, np.float32)
BACKENDS = ("xla", "iree")
EXTRA = 5
#: rows whose IREE programs take tens of seconds to compile (they run on XLA every commit,
#: on IREE in the full table)
IREE_SLOW = frozenset(("rnn", "break_continue_mix", "return_nested_loops", "early_return_helper_in_loop",
                       "grad_of_grad", "return_in_loop_acc", "logsumexp_loop", "call_in_loop_branch",
                       "tnp_library", "dict_params", "dict_params_and_x", "value_and_grad_dict"))


def seed() -> int:
    """``TLALOC_AD_TABLE_SEED``, else the first 8 hex digits of HEAD, else today's date."""
    if os.environ.get("TLALOC_AD_TABLE_SEED"):
        return int(os.environ["TLALOC_AD_TABLE_SEED"])
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=os.path.dirname(__file__)).stdout.strip()
        return int(head[:8], 16)
    except (OSError, ValueError, subprocess.SubprocessError):
        return datetime.date.today().toordinal()


def whole_table():
    return [(c.name, m, b, d) for b in BACKENDS for d in DTYPES for c in cases.CASES for m in MODES]


def selection(s: int):
    """``[(row, mode, backend, dtype, limit)]`` for seed ``s`` (limit: argument points, None: all)."""
    names = [c.name for c in cases.CASES]
    pairs = [(m, d) for d in DTYPES for m in MODES]
    out = []
    for i, n in enumerate(names):
        m, d = pairs[(i + s) % len(pairs)]
        out.append((n, m, "xla", d, 1))
    r = random.Random(s)
    small = [n for n in names if n not in IREE_SLOW]
    runnable = {m: [n for n in small if ad_expected.expected(n, m, "iree", np.float32) == "ok"] for m in MODES}
    out += [(r.choice(runnable[m]), m, "iree", np.float32, 1) for m in MODES]
    out.append((r.choice([n for n in small if ad_expected.expected(n, "reverse", "iree", np.float64) == "ok"]),
                "reverse", "iree", np.float64, 1))
    taken = {(n, m, b, np.dtype(d)) for n, m, b, d, _ in out}
    rest = [e for e in whole_table() if (e[0], e[1], e[2], np.dtype(e[3])) not in taken and _rotates(*e)]
    out += [(*e, None) for e in r.sample(rest, EXTRA)]
    return out


def _rotates(name, mode, backend, dtype) -> bool:
    """Entries the rotation draws from: all but IREE's slowest compiles, and on IREE float64
    the reverse mode only (the modes whose no-link list is measured; the full run has all)."""
    if backend != "iree":
        return True
    return name not in IREE_SLOW and (np.dtype(dtype) == np.float32 or mode == "reverse")


def _params():
    if os.environ.get("TLALOC_AD_TABLE") == "full":
        entries = [(*e, None) for e in whole_table()]
    else:
        entries = selection(seed())
    return [pytest.param(n, m, b, d, lim, id=f"{b}-{np.dtype(d).name}-{m}-{n}" + ("" if lim else "-all"))
            for n, m, b, d, lim in entries]


def test_every_row_mode_dtype_and_backend_is_selected_for_any_seed():
    for s in (0, 1, 7, 12345, 2 ** 31 - 1):
        sel = selection(s)
        assert {e[0] for e in sel} == set(cases.BY_NAME)
        assert {e[1] for e in sel} == set(MODES)
        assert {np.dtype(e[3]) for e in sel} == {np.dtype(d) for d in DTYPES}
        assert {e[2] for e in sel} == set(BACKENDS)
        assert {(e[1], np.dtype(e[3])) for e in sel if e[2] == "xla"} == {(m, np.dtype(d)) for m in MODES
                                                                          for d in DTYPES}
    # and each row meets every (mode, dtype) on XLA over 8 consecutive seeds
    row = cases.CASES[0].name
    seen = {(e[1], np.dtype(e[3])) for s in range(8) for e in selection(s) if e[0] == row and e[2] == "xla"
            and e[4] == 1}
    assert len(seen) == 8


def test_the_expected_lists_name_real_rows_and_modes():
    for table in (ad_expected.NOT_APPLICABLE, ad_expected.NOT_APPLICABLE_FROM_POINT,
                  ad_expected.FLOAT32_REFUSED_ALIKE, ad_expected.REFUSED):
        for name, mode in table:
            assert name in cases.BY_NAME and mode in MODES, (name, mode)
    assert set(ad_expected.IREE_F64_NO_LINK) <= set(cases.BY_NAME)


@pytest.mark.parametrize("name,mode,backend,dtype,limit", _params())
def test_jit_equals_eager_and_jax(name, mode, backend, dtype, limit):
    if backend == "iree":
        pytest.importorskip("iree.runtime", reason="backend='iree' needs iree-base-runtime")
    kw = {"limit": limit} if limit else {}
    if mode == "forward" and limit:          # tl.jacfwd too on half the rows (by name), every commit
        kw["jacobian"] = zlib.crc32(name.encode()) % 2 == 0
    got = ad_modes.check(cases.BY_NAME[name], mode, backend, dtype, **kw)
    want = ad_expected.expected(name, mode, backend, dtype, limit)
    assert got.startswith(want), (f"{name} {mode} on {backend} {np.dtype(dtype).name}: got {got!r}, want "
                                  f"{want!r} (seed {seed()}: TLALOC_AD_TABLE_SEED={seed()} repeats this selection)")
