"""Comparison helpers shared by the tests of tests/core.

Kept apart from the test files so the negative controls (``test_helpers_*``)
exercise exactly the comparisons the real tests use.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from tlaloc._core import aval as _aval
from tlaloc._core.builder import Builder

BF16 = np.dtype(ml_dtypes.bfloat16)

# Edge values every elementwise primitive meets (where its domain allows).
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-30, -1e-30, 1e30, -1e30,
         np.inf, -np.inf, np.nan]


def raw(x) -> np.ndarray:
    """Flat unsigned-integer view of an array's bits."""
    x = np.ascontiguousarray(np.asarray(x))
    return x.reshape(-1).view(f"u{x.dtype.itemsize}")


def assert_same_values(actual, expected):
    """Same dtype, shape and bits (signed zeros included), except that NaN
    must meet NaN at exactly the same positions (payloads may differ)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    if actual.dtype.kind in "fV" or actual.dtype == BF16:
        an = np.isnan(actual.astype(np.float64))
        en = np.isnan(expected.astype(np.float64))
        np.testing.assert_array_equal(an, en, err_msg="NaN positions differ")
        keep = ~en.reshape(-1)
        np.testing.assert_array_equal(raw(actual)[keep], raw(expected)[keep], err_msg="bits differ")
    else:
        np.testing.assert_array_equal(actual, expected)


def ulp_distance(a, b) -> np.ndarray:
    """Distance in units in the last place between float arrays of one dtype
    (NaN vs NaN is 0; NaN vs a number is a huge distance)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    ia, ib = a.view(bits).astype(np.int64), b.view(bits).astype(np.int64)
    top = np.int64(1) << (8 * a.dtype.itemsize - 1)
    ia = np.where(ia < 0, -(ia + top), ia)                 # monotone integer line
    ib = np.where(ib < 0, -(ib + top), ib)
    d = np.abs(ia - ib)
    na, nb = np.isnan(a.astype(np.float64)), np.isnan(b.astype(np.float64))
    return np.where(na & nb, 0, np.where(na | nb, np.iinfo(np.int64).max, d))


def assert_within_ulp(actual, expected, ulps):
    d = ulp_distance(actual, expected)
    assert d.size == 0 or d.max() <= ulps, f"max ulp distance {d.max()} > {ulps} at {np.argmax(d)}"


def trace(fn, *args):
    """DXIR of ``fn`` applied to symbolic inputs typed like ``args``
    (the tracing front end): returns the graph."""
    b = Builder(name=getattr(fn, "__name__", "f"))
    with b.active():
        ins = [b.new_input(_aval.of(a) if not isinstance(a, _aval.AbstractValue) else a, f"x{i}")
               for i, a in enumerate(args)]
        out = fn(*ins)
        return b.finish(list(out) if isinstance(out, (tuple, list)) else [out])


def sample(dtype, shape, rng, lo=-3.0, hi=3.0):
    """Random values of ``dtype`` in [lo, hi) (rounded after drawing in float64)."""
    return rng.uniform(lo, hi, shape).astype(dtype)
