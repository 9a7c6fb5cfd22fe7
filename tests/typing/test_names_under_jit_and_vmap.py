"""Axis names from annotations propagate when jit and vmap lower a function too."""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc import F64


def mismatched(x: F64["n"], w: F64["m"]):
    return (x + w).sum()


def fine(x: F64["n"]):
    return (x * 2).sum()


def test_vmap_refuses_a_broadcast_between_mismatched_names():
    with pytest.raises(tl.TypeAnnotationError, match="`n` in the left operand but `m`") as info:
        tl.vmap(mismatched)(np.ones((2, 3)), np.ones((2, 3)))
    assert info.value.lineno == mismatched.__code__.co_firstlineno + 1


def test_jit_refuses_a_broadcast_between_mismatched_names():
    with pytest.raises(tl.TypeAnnotationError, match="`n` in the left operand but `m`"):
        tl.jit(mismatched)(np.ones(3), np.ones(3))


def test_a_well_typed_function_still_runs_under_both():
    np.testing.assert_array_equal(tl.vmap(fine)(np.ones((2, 3))), [6.0, 6.0])
    assert float(np.asarray(tl.jit(fine)(np.ones(3)))) == 6.0
