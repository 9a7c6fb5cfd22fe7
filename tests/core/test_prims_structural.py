"""Reductions, shape, indexing and linear-algebra primitives against NumPy,
SciPy, explicit formulas and (for StableHLO-specific semantics) JAX/XLA.

float64 comparisons are exact or within a stated tolerance; reductions and
contractions, whose summation order is free, use rtol 1e-12 (float64) and
1e-5 (float32).
"""
import jax
import numpy as np
import pytest
import scipy.linalg

from tlaloc.errors import ShapeError
from tlaloc._core.aval import AbstractValue, of as aval_of
from tlaloc._prims import REGISTRY
from tlaloc._prims import decompositions as D
from tlaloc._prims import indexing as I
from tlaloc._prims import linalg as L
from tlaloc._prims import reductions as R
from tlaloc._prims import shape_ops as S
from tlaloc._prims.slicing import static_slice

from .helpers import BF16, assert_same_values

rng = np.random.default_rng(7)
TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-14)}
FLOATS = [np.float32, np.float64]


# -- reductions ---------------------------------------------------------------------------
REDUCTIONS = [("reduce_sum", np.sum), ("reduce_prod", np.prod), ("reduce_max", np.max), ("reduce_min", np.min)]
AXES = [None, 0, 1, (0, 2), -1, ()]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("name,np_fn", REDUCTIONS, ids=[n for n, _ in REDUCTIONS])
def test_reductions_match_numpy(name, np_fn, axes, dtype):
    x = rng.uniform(0.5, 1.5, (3, 4, 5)).astype(dtype)
    for keepdims in (False, True):
        got = REGISTRY[name].impl(x, axes=R._axes_param(axes), keepdims=keepdims)
        want = np_fn(x, axis=axes, keepdims=keepdims)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, **TOL[dtype])


@pytest.mark.parametrize("name", ["reduce_max", "reduce_min"])
def test_max_min_propagate_nan(name):
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, -np.inf]])
    got = REGISTRY[name].impl(x, axes=(1,), keepdims=False)
    assert np.isnan(got[0]) and got[1] == (2.0 if name == "reduce_max" else -np.inf)


def test_reductions_of_empty_axes():
    x = np.zeros((0, 3))
    assert_same_values(R.reduce_sum(x, 0), np.zeros(3))
    assert_same_values(R.reduce_prod(x, 0), np.ones(3))
    assert R.reduce_sum(x, 1).shape == (0,)
    with pytest.raises(ValueError):               # NumPy: no identity for max of nothing
        R.reduce_max(x, 0)


def test_regression_integer_sum_dtype_is_numpy_s():
    """Was: the rule said int8 while NumPy summed into int64 (the DXIR type was wrong)."""
    x = np.array([100, 100, 100], np.int8)
    for name in ("reduce_sum", "reduce_prod"):
        out = REGISTRY[name].impl(x, axes=None, keepdims=False)
        assert out.dtype == np.int64
        assert REGISTRY[name].abstract_eval(aval_of(x), axes=None, keepdims=False).dtype == np.int64
    for name in ("cumsum", "cumprod"):
        assert REGISTRY[name].abstract_eval(aval_of(x), axis=0, reverse=False).dtype == np.int64
    assert int(R.reduce_sum(x)) == 300


@pytest.mark.parametrize("name,np_fn", [("argmax", np.argmax), ("argmin", np.argmin)])
def test_arg_reductions_match_numpy(name, np_fn):
    x = rng.integers(0, 3, (4, 6)).astype(np.float64)          # ties: first index wins
    x[2, 3] = np.nan                                             # NaN wins, as NumPy and JAX
    for axis in (None, 0, 1, -1):
        for keepdims in (False, True):
            got = REGISTRY[name].impl(x, axis=axis, keepdims=keepdims)
            assert_same_values(got, np.asarray(np_fn(x, axis=axis, keepdims=keepdims), np.int64))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name,np_fn", [("cumsum", np.cumsum), ("cumprod", np.cumprod)])
def test_cumulative_match_numpy(name, np_fn, dtype):
    x = rng.uniform(0.5, 1.5, (3, 5)).astype(dtype)
    for axis in (0, 1, -1):
        np.testing.assert_allclose(REGISTRY[name].impl(x, axis=axis, reverse=False), np_fn(x, axis=axis),
                                   **TOL[dtype])
        rev = np.flip(np_fn(np.flip(x, axis), axis=axis), axis)
        np.testing.assert_allclose(REGISTRY[name].impl(x, axis=axis, reverse=True), rev, **TOL[dtype])
    assert REGISTRY[name].impl(np.zeros((0, 2), dtype), axis=0, reverse=False).shape == (0, 2)


# -- shape ops -------------------------------------------------------------------------------
def test_reshape_transpose_match_numpy():
    x = rng.standard_normal((2, 3, 4))
    assert_same_values(S.reshape(x, (4, -1)), x.reshape(4, -1))
    assert_same_values(S.transpose(x, (2, 0, 1)), np.transpose(x, (2, 0, 1)))
    assert_same_values(S.transpose(x), x.T)
    with pytest.raises(ShapeError, match="cannot reshape"):
        REGISTRY["reshape"].abstract_eval(aval_of(x), shape=(5, -1))


def test_broadcast_in_dim_formula():
    x = rng.standard_normal((3, 1))
    out = S.broadcast_in_dim(x, (2, 3, 4), (1, 2))
    want = np.empty((2, 3, 4))
    for i in range(2):
        for j in range(3):
            for k in range(4):
                want[i, j, k] = x[j, 0]
    assert_same_values(out, want)


def test_regression_broadcast_in_dim_refuses_unsorted_dimensions():
    """Was: (1, 0) silently reshaped instead of transposing (wrong values)."""
    x = np.arange(6.0).reshape(2, 3)
    with pytest.raises(ShapeError, match="strictly increasing"):
        S.broadcast_in_dim(x, (3, 2), (1, 0))
    with pytest.raises(ShapeError, match="size 3"):
        S.broadcast_in_dim(x, (2, 4), (0, 1))


def test_regression_broadcast_to_rule_refuses_a_smaller_target():
    with pytest.raises(ShapeError, match="cannot broadcast"):
        REGISTRY["broadcast_to"].abstract_eval(AbstractValue(np.dtype(np.float64), (3,)), shape=(1,))
    assert REGISTRY["broadcast_to"].abstract_eval(AbstractValue(np.dtype(np.float64), (3,)),
                                                  shape=(2, 3)).shape == (2, 3)


def test_concatenate_pad_flip_iota_match_numpy():
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 1))
    assert_same_values(S.concatenate([a, b], 1), np.concatenate([a, b], 1))
    assert_same_values(S.concatenate([a, np.zeros((0, 3))], 0), a)
    assert_same_values(S.pad(a, ((1, 0), (2, 3)), 7.5), np.pad(a, ((1, 0), (2, 3)), constant_values=7.5))
    assert_same_values(S.flip(a, (1,)), a[:, ::-1])
    assert_same_values(S.iota((2, 3), np.int32, 1), np.broadcast_to(np.arange(3, dtype=np.int32), (2, 3)))
    assert_same_values(S.iota((2, 3), np.float64, 0), np.broadcast_to(np.arange(2.0)[:, None], (2, 3)))


# -- slice --------------------------------------------------------------------------------------
SLICES = [((0, 0), (4, 6), (1, 1)), ((1, 2), (3, 6), (1, 2)), ((0, 5), (4, 6), (3, 1)),
          ((2, 3), (2, 3), (1, 1)), ((0, 0), (4, 6), (5, 7))]


@pytest.mark.parametrize("start,limit,strides", SLICES, ids=str)
def test_slice_matches_numpy_and_xla(start, limit, strides):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    want = x[start[0]:limit[0]:strides[0], start[1]:limit[1]:strides[1]]
    got = static_slice(x, start, limit, strides)
    assert_same_values(got, want)
    assert_same_values(got, np.asarray(jax.lax.slice(x, start, limit, strides)))
    aval = REGISTRY["slice"].abstract_eval(aval_of(x), start_indices=start,
                                           limit_indices=limit, strides=strides)
    assert aval.shape == want.shape


@pytest.mark.parametrize("start,limit,strides,msg", [
    ((0, 0), (5, 6), (1, 1), "axis 0"), ((-1, 0), (2, 6), (1, 1), "axis 0"),
    ((3, 0), (2, 6), (1, 1), "axis 0"), ((0, 0), (4, 6), (1, 0), "axis 1"), ((0,), (4,), (1,), "rank 2")])
def test_slice_refuses_bad_bounds(start, limit, strides, msg):
    with pytest.raises(ShapeError, match=msg):
        static_slice(np.zeros((4, 6)), start, limit, strides)


def test_slice_vjp_places_cotangent_and_jvp_slices():
    x = rng.standard_normal((4, 6))
    params = dict(start_indices=(1, 0), limit_indices=(4, 5), strides=(2, 3))
    out = REGISTRY["slice"].impl(x, **params)
    g = rng.standard_normal(out.shape)
    (x_bar,) = REGISTRY["slice"].vjp(g, x, out=out, **params)
    want = np.zeros_like(x)
    want[1:4:2, 0:5:3] = g
    assert_same_values(x_bar, want)
    # <g, J t> == <J^T g, t>: the VJP is the adjoint of the JVP.
    t = rng.standard_normal(x.shape)
    jt = REGISTRY["slice"].jvp((t,), x, out=out, **params)
    np.testing.assert_allclose(np.sum(g * jt), np.sum(x_bar * t), rtol=1e-14)


# -- dynamic slicing / gather / scatter --------------------------------------------------------------
@pytest.mark.parametrize("starts", [(0, 0), (1, 2), (-5, 1), (3, 9), (2, -1)])
def test_dynamic_slice_clamps_as_stablehlo(starts):
    """StableHLO clamps every start into [0, size - window]; negative starts do
    not wrap (JAX's lax wrapper wraps them first unless told not to)."""
    x = rng.standard_normal((4, 6)).astype(np.float32)
    got = I.dynamic_slice(x, starts, (2, 3))
    xla = jax.jit(lambda x, s: jax.lax.dynamic_slice(x, (s[0], s[1]), (2, 3), allow_negative_indices=False))
    assert_same_values(got, np.asarray(xla(x, np.array(starts, np.int32))))


@pytest.mark.parametrize("starts", [(0, 0), (1, 2), (-5, 1), (3, 9)])
def test_dynamic_update_slice_clamps_as_stablehlo(starts):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    u = rng.standard_normal((2, 3)).astype(np.float32)
    got = I.dynamic_update_slice(x, u, starts)
    xla = jax.jit(lambda x, u, s: jax.lax.dynamic_update_slice(x, u, (s[0], s[1]), allow_negative_indices=False))
    assert_same_values(got, np.asarray(xla(x, u, np.array(starts, np.int32))))
    assert not np.shares_memory(got, x)


def test_regression_dynamic_slice_refuses_oversized_windows():
    """Was: a window larger than the axis gave a silently shorter result."""
    with pytest.raises(ShapeError, match="does not fit"):
        I.dynamic_slice(np.arange(3.0), [1], [5])
    with pytest.raises(ShapeError, match="start indices"):
        I.dynamic_slice(np.zeros((3, 3)), [1], [2, 2])
    with pytest.raises(ShapeError, match="does not fit"):
        I.dynamic_update_slice(np.zeros(3), np.ones(4), [0])


def test_regression_dynamic_update_slice_has_a_usable_dtype_rule():
    """Was: its dtype rule required a ``spec`` parameter, so any graph with
    dynamic_update_slice failed to build (TypeError)."""
    f32 = np.dtype(np.float32)
    out = REGISTRY["dynamic_update_slice"].abstract_eval(
        AbstractValue(f32, (4,)), AbstractValue(f32, (2,)), AbstractValue(np.dtype(np.int64), ()))
    assert out.dtype == f32 and out.shape == (4,)


def test_gather_and_scatter_add_match_numpy():
    x = rng.standard_normal((3, 5))
    idx = np.array([4, 0, 4, 2])
    assert_same_values(I.gather(x, idx, 1), np.take(x, idx, axis=1))
    assert_same_values(I.gather(x, idx[:, None], 1), np.take(x, idx[:, None], axis=1))
    u = rng.standard_normal((3, 4))
    want = x.copy()
    for j, i in enumerate(idx):                      # repeated indices accumulate
        want[:, i] += u[:, j]
    np.testing.assert_allclose(I.scatter_add(x, idx, u, 1), want, rtol=1e-15)
    with pytest.raises(IndexError):                  # never clamped silently
        I.gather(x, np.array([5]), 1)


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_and_scatter_add_vjps_match_jax(axis):
    """Both rules against jax.vjp in float64, repeated indices included. scatter_add's VJP is
    reached only by second derivatives of gather, so the first-order tables never run it."""
    x = rng.standard_normal((5, 6))
    idx = np.array([4, 0, 4, 2])
    u = rng.standard_normal((4, 6) if axis == 0 else (5, 4))
    sl = (idx, slice(None)) if axis == 0 else (slice(None), idx)
    with jax.enable_x64(True):
        out, vjp = jax.vjp(lambda x, u: x.at[sl].add(u), x, u)
        g = rng.standard_normal(out.shape)
        want_x, want_u = (np.asarray(a) for a in vjp(g))
        gout, gvjp = jax.vjp(lambda x: x[sl], x)
        gg = rng.standard_normal(gout.shape)
        (want_gx,) = (np.asarray(a) for a in gvjp(gg))
    got_x, got_i, got_u = I.scatter_add_p.vjp(g, x, idx, u, I.scatter_add(x, idx, u, axis), axis=axis)
    assert got_i is None
    np.testing.assert_allclose(got_x, want_x, rtol=1e-15)
    np.testing.assert_allclose(got_u, want_u, rtol=1e-15)
    got_gx, _ = I.gather_p.vjp(gg, x, idx, I.gather(x, idx, axis), axis=axis)
    np.testing.assert_allclose(got_gx, want_gx, rtol=1e-15)


# -- contractions and decompositions -----------------------------------------------------------
DOT_GENERAL = [  # (lhs shape, rhs shape, contracting, batch)
    ((3, 4), (4, 5), ((1,), (0,)), ((), ())),
    ((2, 3, 4), (2, 4, 5), ((2,), (1,)), ((0,), (0,))),
    ((4, 3), (5, 4), ((0,), (1,)), ((), ())),
    ((2, 3, 4, 6), (6, 2, 4), ((2, 3), (2, 0)), ((0,), (1,))),
    ((3,), (3,), ((0,), (0,)), ((), ())),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ls,rs,contracting,batch", DOT_GENERAL, ids=str)
def test_dot_general_matches_xla_and_tensordot(ls, rs, contracting, batch, dtype):
    x, y = rng.standard_normal(ls).astype(dtype), rng.standard_normal(rs).astype(dtype)
    got = L.dot_general(x, y, contracting, batch)
    assert got.dtype == dtype
    if dtype == np.float32:
        want = np.asarray(jax.lax.dot_general(x, y, (contracting, batch),
                                              precision=jax.lax.Precision.HIGHEST))
    else:
        want = _dot_general_loops(x, y, contracting, batch)
    np.testing.assert_allclose(got, want, **TOL[dtype])


def _dot_general_loops(x, y, contracting, batch):
    """Independent float64 reference: move axes, then tensordot per batch element."""
    (lc, rc), (lb, rb) = contracting, batch
    xf = [i for i in range(x.ndim) if i not in lc + lb]
    yf = [i for i in range(y.ndim) if i not in rc + rb]
    xm = np.transpose(x, lb + tuple(xf) + lc)
    ym = np.transpose(y, rb + tuple(rc) + tuple(yf))
    nb, nc = len(lb), len(lc)
    bshape = xm.shape[:nb]
    out = np.empty(bshape + xm.shape[nb:xm.ndim - nc] + ym.shape[nb + nc:])
    for b in np.ndindex(*bshape):
        out[b] = np.tensordot(xm[b], ym[b], axes=nc)
    return out


def test_regression_bfloat16_contractions_keep_their_dtype():
    """Was: matmul of bfloat16 returned float32 and einsum/dot_general raised."""
    x = rng.standard_normal((3, 4)).astype(BF16)
    y = rng.standard_normal((4, 2)).astype(BF16)
    want = (x.astype(np.float32) @ y.astype(np.float32)).astype(BF16)
    assert_same_values(L.matmul(x, y), want)
    assert_same_values(L.einsum("ij,jk->ik", x, y), want)
    assert_same_values(L.dot_general(x, y, ((1,), (0,))), want)


def _spd(n, batch=()):
    a = rng.standard_normal(batch + (n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


@pytest.mark.parametrize("dtype", FLOATS)
def test_cholesky_matches_numpy_and_reconstructs(dtype):
    a = _spd(4, (2,)).astype(dtype)
    L_ = D.cholesky(a)
    np.testing.assert_allclose(L_, np.linalg.cholesky(a), **TOL[dtype])
    np.testing.assert_allclose(L_ @ np.swapaxes(L_, -1, -2), a, rtol=10 * TOL[dtype]["rtol"], atol=1e-4)
    assert np.all(np.triu(L_[0], 1) == 0)


def test_regression_cholesky_nan_only_for_the_failing_matrix():
    """Was: one non-SPD matrix in a batch turned the whole batch into NaN."""
    a = np.stack([_spd(3), -np.eye(3), _spd(3)])
    out = D.cholesky(a)
    np.testing.assert_allclose(out[[0, 2]], np.linalg.cholesky(a[[0, 2]]), rtol=1e-14)
    with jax.enable_x64(True):
        ref = np.asarray(jax.lax.linalg.cholesky(a, symmetrize_input=False))
    assert_same_values(out[1], ref[1])                 # NaN on and below the diagonal, 0 above
    assert_same_values(D.cholesky(a[1]), ref[1])


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("batched", [False, True])
def test_triangular_solve_matches_scipy(lower, transpose_a, batched):
    n, k = 4, 3
    a = rng.standard_normal((2, n, n)) + 4 * np.eye(n)     # only one triangle may be read
    b = rng.standard_normal((2, n, k))
    got = D.triangular_solve(a if batched else a[0], b if batched else b[0], lower, transpose_a)
    want = np.stack([scipy.linalg.solve_triangular(a[i], b[i], lower=lower, trans=int(transpose_a))
                     for i in range(2)])
    np.testing.assert_allclose(got, want if batched else want[0], rtol=1e-12, atol=1e-12)


def test_solve_inv_slogdet_match_numpy():
    a, b = _spd(4), rng.standard_normal((4, 2))
    np.testing.assert_allclose(D.solve(a, b), np.linalg.solve(a, b), rtol=1e-12)
    np.testing.assert_allclose(D.inv(a), np.linalg.inv(a), rtol=1e-12)
    s, l = D.slogdet(a)
    s_, l_ = np.linalg.slogdet(a)
    assert s == s_ and np.isclose(l, l_, rtol=1e-13)
