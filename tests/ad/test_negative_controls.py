"""Negative controls: deliberately wrong oracles must FAIL the comparisons the
table uses, so neither the tolerance nor NaN handling can hide a fault."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from . import checks
from . import programs_basic as B
from .cases import BY_NAME


def _perturbed_assign_chain(x, w):
    # the right function times (1 + 1e-8): gradients off by 1e-8 relative, 100x the tolerance
    return B.j_assign_chain(x, w) * (1.0 + 1e-8)


def _running_max_stop_gradient(x):
    # tangent's issue-66 failure mode: the loop-carried max loses its gradient (all zeros)
    m = x[0]
    for i in range(1, len(x)):
        if x[i] > m:
            m = x[i]
    m = jax.lax.stop_gradient(m)
    return m * m


def _for_branch_swapped(x, w):
    # the two branches of the loop body's `if` exchanged
    y = jnp.tanh(x @ w)
    s = 0.0
    for i in range(len(y)):
        if y[i] > 0:
            s = s - y[i]
        else:
            s = s + y[i] ** 2
    return s


@pytest.mark.parametrize("case_name,wrong_twin", [
    ("assign_chain", _perturbed_assign_chain),
    ("running_max_only", _running_max_stop_gradient),
    ("for_branch", _for_branch_swapped),
], ids=["perturbed_1e-8", "stop_gradient_running_max", "swapped_branches"])
def test_wrong_twin_is_caught(case_name, wrong_twin):
    case = BY_NAME[case_name]
    checks.check_case_against_jax(case)                    # the real twin passes ...
    with pytest.raises(AssertionError):
        checks.check_case_against_jax(case, twin=wrong_twin)   # ... the wrong one must not


def _running_max_off_by_one(x):
    # the running max skips the last entry: a plausible loop-bound bug
    m = x[0]
    for i in range(1, len(x) - 1):
        if x[i] > m:
            m = x[i]
    return m * m


def test_wrong_program_is_caught_by_central_differences():
    case = BY_NAME["running_max_only"]
    checks.check_case_against_fd(case)                     # the program itself passes ...
    with pytest.raises(AssertionError):
        checks.check_case_against_fd(case, program=_running_max_off_by_one)   # ... a wrong one must not


def test_nan_never_matches_nan():
    nan = np.array([1.0, np.nan])
    with pytest.raises(AssertionError):
        checks.assert_tree_close(nan, nan.copy())


def test_inf_never_passes():
    inf = np.array([np.inf])
    with pytest.raises(AssertionError):
        checks.assert_tree_close(inf, inf.copy())


def test_structure_mismatch_is_caught():
    a = np.ones(2)
    with pytest.raises(AssertionError):
        checks.assert_tree_close({"w": a}, (a,))
    with pytest.raises(AssertionError):
        checks.assert_tree_close((a, a), [a, a])
    with pytest.raises(AssertionError):
        checks.assert_tree_close(np.ones((2, 1)), np.ones(2))     # shapes must match, no broadcasting


def test_one_ulp_breaks_bit_identity():
    a = np.array([0.1, 0.2, 0.3])
    b = a.copy()
    b[1] = np.nextafter(b[1], 1.0)
    assert checks.same_bits(a, a.copy())
    assert not checks.same_bits(a, b)
    assert not checks.same_bits(a, a.astype(np.float32))          # dtype is part of the bits
    assert not checks.same_bits(np.zeros(1), -np.zeros(1))        # -0.0 is not 0.0 bitwise
