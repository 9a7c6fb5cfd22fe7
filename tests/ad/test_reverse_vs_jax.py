"""Reverse mode, table-driven: every case of ``cases.CASES`` is checked

* against JAX (``jax.grad``/``value_and_grad``/``vjp`` of the case's twin),
  float64, rtol 1e-10, atol 1e-12, no NaN masking;
* against central differences of the NumPy program itself (rtol 1e-6), an
  oracle that shares nothing with either AD system;
* by exec-ing the rendered derivative module (``tl.source(g)``) in a fresh
  namespace: it must return the same bits as the transformed function.

Known engine bugs are strict xfails (``Case.xfail``), so a fix shows up as XPASS.
"""
import pytest

from . import checks
from .cases import CASES


def _params(check, cases=CASES):
    out = []
    for c in cases:
        reason = c.xfail_reason(check)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(c, id=c.name, marks=marks))
    return out


@pytest.mark.parametrize("case", _params("jax"))
def test_matches_jax(case):
    checks.check_case_against_jax(case)


@pytest.mark.parametrize("case", _params("fd", [c for c in CASES if c.fd]))
def test_matches_central_differences(case):
    checks.check_case_against_fd(case)


@pytest.mark.parametrize("case", _params("source", [c for c in CASES if not c.mode.startswith("vjp")]))
def test_rendered_source_runs_alone(case):
    checks.check_case_source_roundtrip(case)


@pytest.mark.parametrize("case", _params("source", [c for c in CASES if c.mode.startswith("vjp")]))
def test_rendered_vjp_source_runs_alone(case):
    checks.check_vjp_source_roundtrip(case)
