"""The reverse-mode table of tests/ad through tl.jit: every forward program and its
gradient against the interpreter (float64, rtol 1e-12). Slow (one compile per
row, about 20 s of CPU): it runs when ``TLALOC_SLOW_TESTS=1``."""
import copy
import os

import numpy as np
import pytest

import tlaloc as tl

cases = pytest.importorskip("tests.ad.cases", reason="the reverse-mode table lives in tests/ad")

ROWS = [c for c in cases.CASES if c.mode in ("grad", "value_and_grad")]


def _leaves(x):
    return [np.asarray(v) for v in tl._pytree.flatten(x)[0]]


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TLALOC_SLOW_TESTS"), reason="set TLALOC_SLOW_TESTS=1 to run the AD table")
@pytest.mark.parametrize("case", ROWS, ids=[c.name for c in ROWS])
def test_ad_table_through_jit(case):
    make = tl.grad if case.mode == "grad" else tl.value_and_grad
    for args in case.args_list():
        want = tl.jit(case.fn, backend="interpreter")(*copy.deepcopy(args))
        for g, w in zip(_leaves(tl.jit(case.fn)(*args)), _leaves(want)):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
        df = make(case.fn, argnums=case.argnums)
        try:
            got = tl.jit(df)(*args)
        except tl.NoRuleError as e:
            assert "while loop needs a bound" in str(e)
            continue
        for g, w in zip(_leaves(got), _leaves(df(*copy.deepcopy(args)))):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
