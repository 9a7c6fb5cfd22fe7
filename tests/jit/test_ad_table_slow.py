"""The whole AD case table of tests/ad through tl.jit: every row, in every mode
(reverse, forward with jacfwd, vmap, hessian), on XLA and on IREE, in float64
and float32, against the interpreter (rtol 1e-12 / 1e-5; see ``ad_modes.py``).

Slow (about 20 CPU-minutes, IREE's compiles dominate): it runs when
``TLALOC_SLOW_TESTS=1``. ``test_ad_table.py`` runs a representative subset by
default. A row may answer "refused: ..." only with one of
``ad_modes.ALLOWED_REFUSALS`` (named refusals, never a wrong answer), or
"n/a: ..." where the mode does not apply (a Hessian of pytree arguments) or the
reference refuses the arguments (a float64 constant next to float32 data).

    TLALOC_SLOW_TESTS=1 pytest tests/jit/test_ad_table_slow.py -n 2
    TLALOC_SLOW_TESTS=1 pytest tests/jit/test_ad_table_slow.py -k "xla and f64"
"""
import os

import numpy as np
import pytest

from . import ad_modes

cases = pytest.importorskip("tests.ad.cases", reason="the AD case table lives in tests/ad")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("TLALOC_SLOW_TESTS"),
                                 reason="set TLALOC_SLOW_TESTS=1 to run the whole AD table through tl.jit")]

BACKENDS = ("xla", "iree")
DTYPES = ((np.float64, "f64"), (np.float32, "f32"))

#: Known engine bugs outside tl.jit, asserted with strict=True: (row, mode) -> reason.
KNOWN = {}


def _params():
    out = []
    for backend in BACKENDS:
        for dtype, tag in DTYPES:
            for case in cases.CASES:
                for mode in ad_modes.MODES:
                    marks = ()
                    reason = KNOWN.get((case.name, mode))
                    if reason:
                        marks = (pytest.mark.xfail(reason=reason, strict=True),)
                    out.append(pytest.param(case.name, mode, backend, dtype, marks=marks,
                                            id=f"{backend}-{tag}-{mode}-{case.name}"))
    return out


@pytest.mark.parametrize("name,mode,backend,dtype", _params())
def test_whole_table_through_jit(name, mode, backend, dtype):
    if backend == "iree":
        pytest.importorskip("iree.runtime", reason="backend='iree' needs iree-base-runtime")
    got = ad_modes.check(cases.BY_NAME[name], mode, backend, dtype)
    assert got == "ok" or got.startswith(("refused: ", "n/a: ")), got
