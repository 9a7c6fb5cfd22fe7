"""The derivative conventions (tests/ad/test_conventions.py) compiled by tl.jit.

Ties split the cotangent, ``abs'(0) = 0``, ``clip`` passes the cotangent on its
closed interval, and an exactly-zero cotangent stays exactly zero through an
infinite local derivative (``safe_mul``: 0 · inf = 0, where StableHLO's multiply
gives NaN). Each row's analytic gradient is asserted exactly (rtol 1e-15 in
float64, one float32 ulp in float32, zero absolute tolerance: an expected 0 must
come back exactly 0) on XLA and on IREE, so the compiled ``safe_mul``, ``select``
and reduction lowerings are held to the convention, not to the interpreter.
"""
import numpy as np
import pytest

import tlaloc as tl

from tests.ad.test_conventions import CONVENTIONS, _a


def cotangent_times_sqrt(x, ct):
    # the vjp of sqrt with a cotangent that is zero at sqrt's infinite slope
    return (ct * np.sqrt(x)).sum()


ROWS = CONVENTIONS + [
    ("sqrt_zero_cotangent_at_0", cotangent_times_sqrt, (_a(0.0, 4.0, 0.0), _a(0.0, 1.0, 0.0)), 0,
     _a(0.0, 0.25, 0.0)),
]
RTOL = {np.float64: 1e-15, np.float32: 1.2e-7}
#: IREE compiles take seconds: one or two rows of each convention there, in float32 (the
#: rows with a float64 constant in float64), and the 0 * inf rows in float64 too
IREE_F32 = ("maximum_tie", "max_ties_three", "min_ties", "abs_vector", "relu_maximum_at_0",
            "clip_bounds_inside_outside", "where_sqrt_at_0", "where_log_mixed", "norm_linalg_at_0",
            "pow_dy_at_x0", "sqrt_zero_cotangent_at_0")
IREE_F64 = ("max_rows_ties", "norm_by_hand_at_0", "pow_dx_y0_at_x0", "zero_upstream_sqrt_at_0")
#: rows whose program holds a float64 array constant (float32 arguments would mix dtypes)
F64_ONLY = ("max_rows_ties",)


def _runs():
    out = []
    for row in ROWS:
        name = row[0]
        runs = [("xla", np.float64)] + [("xla", np.float32)] * (name not in F64_ONLY)
        runs += [("iree", np.float32)] * (name in IREE_F32) + [("iree", np.float64)] * (name in IREE_F64)
        out += [pytest.param(*row, b, d, id=f"{b}-{np.dtype(d).name}-{name}") for b, d in runs]
    return out


def _args(args, dtype):
    return tuple(np.asarray(a, dtype=dtype) for a in args)


def test_the_iree_rows_exist():
    names = {r[0] for r in ROWS}
    assert set(IREE_F32) | set(IREE_F64) | set(F64_ONLY) <= names


@pytest.mark.parametrize("name,fn,args,argnums,want,backend,dtype", _runs())
def test_convention_compiled(name, fn, args, argnums, want, backend, dtype):
    if backend == "iree":
        pytest.importorskip("iree.runtime", reason="backend='iree' needs iree-base-runtime")
    got = tl.jit(tl.grad(fn, argnums=argnums), backend=backend)(*_args(args, dtype))
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want), name
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w, dtype=dtype)
        assert g.dtype == np.dtype(dtype) and g.shape == w.shape, (name, g.dtype, g.shape)
        assert not np.isnan(g).any(), f"{name} on {backend}: NaN in {g}"
        np.testing.assert_allclose(g, w, rtol=RTOL[dtype], atol=0, err_msg=f"{name} on {backend}")


def test_a_nonzero_cotangent_at_sqrt_zero_is_still_inf():
    # the convention is about zero cotangents only (negative control for the row above)
    g = tl.jit(tl.grad(cotangent_times_sqrt))(_a(0.0, 4.0), _a(1.0, 1.0))
    assert np.isposinf(np.asarray(g)[0]) and np.asarray(g)[1] == 0.25
