"""``dot_general`` with ``preferred_element_type``: int8 x int8 -> int32 and bfloat16 x bfloat16 -> float32.

Oracles: NumPy in int64 (exact, for the integer dot) and float64 (for the bfloat16 one: its
products are exact in float32, so only float32 summation separates the two); gradients
against the float64 formulas of a matrix product. Eager (NumPy) and compiled (XLA CPU)
paths are both checked, and the StableHLO is read to confirm the operands reach the dot
without a conversion (the point of the parameter).
"""
import ml_dtypes
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.numpy import lax

BF16 = np.dtype(ml_dtypes.bfloat16)
rng = np.random.default_rng(18)
CASES = [  # (lhs shape, rhs shape, contracting, batch)
    ((3, 64), (64, 5), ((1,), (0,)), ((), ())),
    ((1, 96), (96, 7), ((1,), (0,)), ((), ())),
    ((2, 3, 32), (2, 32, 4), ((2,), (1,)), ((0,), (0,))),
    ((32, 4), (6, 32), ((0,), (1,)), ((), ())),
]


def _ref(x, y, contracting, batch, dtype):
    (lc, rc), (lb, rb) = contracting, batch
    xf = [i for i in range(x.ndim) if i not in lc + lb]
    yf = [i for i in range(y.ndim) if i not in rc + rb]
    xm = np.transpose(np.asarray(x, dtype), lb + tuple(xf) + lc)
    ym = np.transpose(np.asarray(y, dtype), rb + tuple(rc) + tuple(yf))
    nb, nc = len(lb), len(lc)
    out = np.empty(xm.shape[:nb] + xm.shape[nb:xm.ndim - nc] + ym.shape[nb + nc:], dtype)
    for b in np.ndindex(*xm.shape[:nb]):
        out[b] = np.tensordot(xm[b], ym[b], axes=nc)
    return out


def _dot(pref, contracting, batch):
    return lambda a, b: lax.dot_general(a, b, contracting=contracting, batch=batch, preferred_element_type=pref)


@pytest.mark.parametrize("ls,rs,contracting,batch", CASES, ids=str)
def test_int8_dot_accumulates_exactly_in_int32(ls, rs, contracting, batch):
    x = rng.integers(-128, 128, ls).astype(np.int8)
    y = rng.integers(-128, 128, rs).astype(np.int8)
    want = _ref(x, y, contracting, batch, np.int64)
    assert np.abs(want).max() > 127 * 127                   # the sum overflows int8 and int16 products
    fn = _dot("int32", contracting, batch)
    eager = fn(x, y)
    compiled = np.asarray(tl.jit(fn)(x, y))
    for got in (eager, compiled):
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)
    # negative control: the default dot of int8 operands wraps around in int8
    assert not np.array_equal(np.asarray(lax.dot_general(x, y, contracting=contracting, batch=batch)), want)


@pytest.mark.parametrize("ls,rs,contracting,batch", CASES, ids=str)
def test_bfloat16_dot_returns_float32(ls, rs, contracting, batch):
    x = rng.standard_normal(ls).astype(BF16)
    y = rng.standard_normal(rs).astype(BF16)
    want = _ref(x, y, contracting, batch, np.float64)
    fn = _dot("float32", contracting, batch)
    for got in (fn(x, y), np.asarray(tl.jit(fn)(x, y))):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # negative control: a bfloat16 result is rounded far beyond that tolerance
    plain = np.asarray(lax.dot_general(x, y, contracting=contracting, batch=batch), np.float64)
    assert np.abs(plain - want).max() > 1e-3


def test_stablehlo_keeps_the_narrow_operands():
    x8, y8 = np.ones((2, 32), np.int8), np.ones((32, 3), np.int8)
    text = tl.jit(_dot("int32", ((1,), (0,)), ((), ()))).lower(x8, y8).as_text()
    line = next(ln for ln in text.splitlines() if "stablehlo.dot_general" in ln)
    assert "tensor<2x32xi8>, tensor<32x3xi8>) -> tensor<2x3xi32>" in line
    xb, yb = np.ones((2, 32), BF16), np.ones((32, 3), BF16)
    text = tl.jit(_dot("float32", ((1,), (0,)), ((), ()))).lower(xb, yb).as_text()
    line = next(ln for ln in text.splitlines() if "stablehlo.dot_general" in ln)
    assert "tensor<2x32xbf16>, tensor<32x3xbf16>) -> tensor<2x3xf32>" in line


def test_bfloat16_dot_gradients_match_the_float64_formulas():
    x = rng.standard_normal((3, 32)).astype(BF16)
    y = rng.standard_normal((32, 4)).astype(BF16)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    fn = _dot("float32", ((1,), (0,)), ((), ()))
    loss = lambda a, b: (fn(a, b) * w).sum()                # noqa: E731
    gx, gy = tl.grad(loss, argnums=(0, 1))(x, y)
    assert gx.dtype == BF16 and gy.dtype == BF16
    x64, y64, w64 = (np.asarray(a, np.float64) for a in (x, y, w))
    # the cotangents are float32 sums rounded once to bfloat16: within one bfloat16 ulp (2^-8 relative)
    np.testing.assert_allclose(np.asarray(gx, np.float64), w64 @ y64.T, rtol=2 ** -7, atol=1e-2)
    np.testing.assert_allclose(np.asarray(gy, np.float64), x64.T @ w64, rtol=2 ** -7, atol=1e-2)


def test_int8_dot_has_no_gradient():
    x = np.ones((2, 32), np.int8)
    y = np.ones((32, 3), np.int8)
    fn = _dot("int32", ((1,), (0,)), ((), ()))
    with pytest.raises(Exception, match="integer|int"):
        tl.grad(lambda a: fn(a, y).sum().astype(np.float32))(x)


@pytest.mark.parametrize("dtypes,pref", [((np.int8, np.int8), "float32"), ((np.float32, np.float32), "float64"),
                                         ((np.int8, BF16), "float32")])
def test_unsupported_pairs_are_refused_with_the_supported_list(dtypes, pref):
    x, y = np.ones((2, 4), dtypes[0]), np.ones((4, 3), dtypes[1])
    with pytest.raises(TypeError, match="preferred_element_type.*supported: int8 x int8 -> int32"):
        lax.dot_general(x, y, contracting=((1,), (0,)), batch=((), ()), preferred_element_type=pref)
