"""The whole AD case table of tests/ad through tl.jit: every row, in every mode
(reverse, forward with jacfwd, vmap, hessian), on XLA and on IREE, in float64
and float32, against the eager transform (rtol 1e-12 / 1e-5) and JAX float64 (see
``ad_modes.py``, ``ad_jax.py``).

Slow (about 20 CPU-minutes, IREE's compiles dominate): it runs when
``TLALOC_SLOW_TESTS=1``. ``test_ad_table.py`` runs a representative subset by
default (every row, mode, dtype and backend on every commit, the rest rotating by
commit). Each entry must give exactly what ``ad_expected.py`` lists: "ok", or a
named refusal / not-applicable reason written there with its reason.

    TLALOC_SLOW_TESTS=1 pytest tests/jit/test_ad_table_slow.py -n 2
    TLALOC_SLOW_TESTS=1 pytest tests/jit/test_ad_table_slow.py -k "xla and f64"
"""
import os

import numpy as np
import pytest

from . import ad_expected, ad_modes

cases = pytest.importorskip("tests.ad.cases", reason="the AD case table lives in tests/ad")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("TLALOC_SLOW_TESTS"),
                                 reason="set TLALOC_SLOW_TESTS=1 to run the whole AD table through tl.jit")]

BACKENDS = ("xla", "iree")
DTYPES = ((np.float64, "f64"), (np.float32, "f32"))

def _params():
    out = []
    for backend in BACKENDS:
        for dtype, tag in DTYPES:
            for case in cases.CASES:
                for mode in ad_modes.MODES:
                    out.append(pytest.param(case.name, mode, backend, dtype,
                                            id=f"{backend}-{tag}-{mode}-{case.name}"))
    return out


@pytest.mark.parametrize("name,mode,backend,dtype", _params())
def test_whole_table_through_jit(name, mode, backend, dtype):
    if backend == "iree":
        pytest.importorskip("iree.runtime", reason="backend='iree' needs iree-base-runtime")
    got = ad_modes.check(cases.BY_NAME[name], mode, backend, dtype)
    want = ad_expected.expected(name, mode, backend, dtype)
    assert got.startswith(want), f"{name} {mode} on {backend}: got {got!r}, want {want!r}"
