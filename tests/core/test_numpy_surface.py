"""``tlaloc.numpy`` against NumPy/SciPy, table-driven.

Each case runs eagerly and through DXIR (traced with typed inputs, then the
reference interpreter): both must agree with the oracle within the stated
tolerance (float64: rtol 1e-12, float32: rtol 2e-6), and with each other bit
for bit. NaN only where the oracle has NaN.
"""
import numpy as np
import pytest
import scipy.special

import tlaloc
import tlaloc.numpy as tnp
from tlaloc._prims.slicing import static_slice
from tlaloc.errors import ArgumentError, ShapeError

from .helpers import assert_same_values, assert_within_ulp, trace

rng = np.random.default_rng(3)
TOL = {np.float32: dict(rtol=2e-6, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


def M(*shape):
    return lambda dt: rng.standard_normal(shape).astype(dt)


def POS(*shape):
    return lambda dt: rng.uniform(0.5, 2.0, shape).astype(dt)


def SPD(n):
    def make(dt):
        a = rng.standard_normal((n, n))
        return (a @ a.T + n * np.eye(n)).astype(dt)
    return make


def INT(*values):
    return lambda dt: np.array(values)


# (id, tlaloc function, oracle, argument makers): the oracle sees the same arrays.
CASES = [
    ("sum", lambda a: tnp.sum(a, axis=1), lambda a: np.sum(a, axis=1), [M(3, 4)]),
    ("sum_keepdims", lambda a: tnp.sum(a, axis=(0, 2), keepdims=True),
     lambda a: np.sum(a, axis=(0, 2), keepdims=True), [M(2, 3, 4)]),
    ("mean", lambda a: tnp.mean(a, axis=0), lambda a: np.mean(a, axis=0), [M(5, 3)]),
    ("mean_all", tnp.mean, np.mean, [M(4, 3)]),
    ("var", lambda a: tnp.var(a, axis=1), lambda a: np.var(a, axis=1), [M(3, 6)]),
    ("var_ddof", lambda a: tnp.var(a, ddof=1), lambda a: np.var(a, ddof=1), [M(3, 6)]),
    ("std_ddof", lambda a: tnp.std(a, axis=0, ddof=1), lambda a: np.std(a, axis=0, ddof=1), [M(5, 2)]),
    ("matmul", tnp.matmul, np.matmul, [M(3, 4), M(4, 2)]),
    ("matmul_batched", tnp.matmul, np.matmul, [M(2, 3, 4), M(4, 5)]),
    ("matmul_vec", tnp.matmul, np.matmul, [M(4), M(4, 3)]),
    ("dot", tnp.dot, np.dot, [M(3, 4), M(4)]),
    ("dot_vec", tnp.dot, np.dot, [M(5), M(5)]),
    ("einsum", lambda a, b: tnp.einsum("bij,bjk->bik", a, b), lambda a, b: np.einsum("bij,bjk->bik", a, b),
     [M(2, 3, 4), M(2, 4, 5)]),
    ("einsum_trace_out", lambda a, b: tnp.einsum("ij,ij->i", a, b), lambda a, b: np.einsum("ij,ij->i", a, b),
     [M(3, 4), M(3, 4)]),
    ("tensordot", lambda a, b: tnp.tensordot(a, b, axes=([1, 2], [0, 1])),
     lambda a, b: np.tensordot(a, b, axes=([1, 2], [0, 1])), [M(2, 3, 4), M(3, 4, 5)]),
    ("tensordot_int", lambda a, b: tnp.tensordot(a, b, 1), lambda a, b: np.tensordot(a, b, 1), [M(2, 3), M(3, 4)]),
    ("where", lambda c, a, b: tnp.where(c > 0, a, b), lambda c, a, b: np.where(c > 0, a, b), [M(3, 4), M(3, 4), M(4)]),
    ("clip", lambda a: tnp.clip(a, -0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7), [M(10)]),
    ("clip_min", lambda a: tnp.clip(a, 0.0), lambda a: np.clip(a, 0.0, None), [M(10)]),
    ("take", lambda a: tnp.take(a, np.array([2, 0, 2]), axis=1), lambda a: np.take(a, [2, 0, 2], axis=1), [M(2, 3)]),
    ("take_flat", lambda a: tnp.take(a, np.array([5, 1])), lambda a: np.take(a, [5, 1]), [M(2, 3)]),
    ("concatenate", lambda a, b: tnp.concatenate([a, b], axis=-1), lambda a, b: np.concatenate([a, b], -1),
     [M(2, 3), M(2, 1)]),
    ("stack", lambda a, b: tnp.stack([a, b], axis=1), lambda a, b: np.stack([a, b], 1), [M(2, 3), M(2, 3)]),
    ("reshape", lambda a: tnp.reshape(a, (3, -1)), lambda a: np.reshape(a, (3, -1)), [M(2, 6)]),
    ("transpose", lambda a: tnp.transpose(a, (1, 2, 0)), lambda a: np.transpose(a, (1, 2, 0)), [M(2, 3, 4)]),
    ("moveaxis", lambda a: tnp.moveaxis(a, 0, -1), lambda a: np.moveaxis(a, 0, -1), [M(2, 3, 4)]),
    ("softmax", lambda a: tnp.softmax(a, axis=-1), lambda a: scipy.special.softmax(a, axis=-1), [M(3, 5)]),
    ("softmax_big", lambda a: tnp.softmax(a * 300, axis=0), lambda a: scipy.special.softmax(a * 300, axis=0),
     [M(4, 2)]),
    ("log_softmax", lambda a: tnp.log_softmax(a, axis=1), lambda a: scipy.special.log_softmax(a, axis=1),
     [M(3, 5)]),
    ("logsumexp", lambda a: tnp.logsumexp(a, axis=1), lambda a: scipy.special.logsumexp(a, axis=1), [M(3, 5)]),
    ("logsumexp_all", tnp.logsumexp, scipy.special.logsumexp, [M(3, 5)]),
    ("logsumexp_keepdims", lambda a: tnp.logsumexp(a * 800, axis=0, keepdims=True),
     lambda a: scipy.special.logsumexp(a * 800, axis=0, keepdims=True), [M(3, 5)]),
    ("solve", tnp.linalg.solve, np.linalg.solve, [SPD(4), M(4, 2)]),
    ("solve_vec", tnp.linalg.solve, np.linalg.solve, [SPD(3), M(3)]),
    ("cholesky", tnp.linalg.cholesky, np.linalg.cholesky, [SPD(4)]),
    ("slogdet", lambda a: tnp.linalg.slogdet(a)[1], lambda a: np.linalg.slogdet(a)[1], [M(4, 4)]),
    ("slogdet_sign", lambda a: tnp.linalg.slogdet(a)[0], lambda a: np.linalg.slogdet(a)[0], [M(4, 4)]),
    ("inv", tnp.linalg.inv, np.linalg.inv, [SPD(3)]),
    ("det", tnp.linalg.det, np.linalg.det, [M(3, 3)]),
    ("norm", tnp.linalg.norm, np.linalg.norm, [M(7)]),
    ("norm_axis", lambda a: tnp.linalg.norm(a, axis=1), lambda a: np.linalg.norm(a, axis=1), [M(3, 4)]),
    ("norm_fro", lambda a: tnp.linalg.norm(a, "fro"), lambda a: np.linalg.norm(a, "fro"), [M(3, 4)]),
    ("norm_ord2_vec", lambda a: tnp.linalg.norm(a, 2, axis=0), lambda a: np.linalg.norm(a, 2, axis=0), [M(3, 4)]),
    ("trace", tnp.trace, np.trace, [M(4, 4)]),
    ("trace_offset", lambda a: tnp.trace(a, 1, 1, 2), lambda a: np.trace(a, 1, 1, 2), [M(2, 3, 4)]),
    ("diagonal", lambda a: tnp.diagonal(a, -1), lambda a: np.diagonal(a, -1), [M(4, 3)]),
    ("outer", tnp.outer, np.outer, [M(3), M(4)]),
    ("cumsum", lambda a: tnp.cumsum(a, axis=1), lambda a: np.cumsum(a, axis=1), [M(3, 4)]),
    ("cumsum_flat", tnp.cumsum, np.cumsum, [M(3, 4)]),
    ("cumprod", lambda a: tnp.cumprod(a, axis=0), lambda a: np.cumprod(a, axis=0), [POS(3, 4)]),
    ("argmax", lambda a: tnp.argmax(a, axis=1), lambda a: np.argmax(a, axis=1), [M(3, 4)]),
    ("argmin_flat", tnp.argmin, np.argmin, [M(3, 4)]),
    ("pad", lambda a: tnp.pad(a, ((1, 2), (0, 1)), constant_values=-1.5),
     lambda a: np.pad(a, ((1, 2), (0, 1)), constant_values=-1.5), [M(2, 3)]),
    ("flip", lambda a: tnp.flip(a, 1), lambda a: np.flip(a, 1), [M(2, 3)]),
    ("flip_all", tnp.flip, np.flip, [M(2, 3)]),
    ("tril", lambda a: tnp.tril(a, -1), lambda a: np.tril(a, -1), [M(4, 5)]),
    ("triu", lambda a: tnp.triu(a, 1), lambda a: np.triu(a, 1), [M(4, 5)]),
    ("tril_batched", tnp.tril, np.tril, [M(2, 3, 3)]),
    ("square", tnp.square, np.square, [M(5)]),
    ("log2", tnp.log2, np.log2, [POS(20)]),
    ("log10", tnp.log10, np.log10, [POS(20)]),
    ("exp2", tnp.exp2, np.exp2, [M(20)]),
    ("hypot", tnp.hypot, np.hypot, [M(20), M(20)]),
    ("sinc", tnp.sinc, np.sinc, [M(20)]),
    ("trunc", tnp.trunc, np.trunc, [M(20)]),
    ("degrees", tnp.degrees, np.degrees, [M(5)]),
    ("radians", tnp.radians, np.radians, [M(5)]),
    ("logaddexp", tnp.logaddexp, np.logaddexp, [M(6), M(6)]),
    ("split", lambda a: tnp.split(a, 3, axis=1)[1], lambda a: np.split(a, 3, axis=1)[1], [M(2, 6)]),
    ("split_points", lambda a: tnp.split(a, [1, 4], axis=-1)[2], lambda a: np.split(a, [1, 4], axis=-1)[2],
     [M(2, 6)]),
]


def _args(makers, dtype):
    return [m(dtype) for m in makers]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,fn,oracle,makers", CASES, ids=[c[0] for c in CASES])
def test_eager_matches_oracle(name, fn, oracle, makers, dtype):
    args = _args(makers, dtype)
    got = np.asarray(fn(*args))
    want = np.asarray(oracle(*args))
    if want.dtype.kind == "f":
        assert got.dtype == dtype, f"{name}: {got.dtype}"
        np.testing.assert_allclose(got, want.astype(dtype), **TOL[dtype])
    else:
        assert_same_values(got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,fn,oracle,makers", CASES, ids=[c[0] for c in CASES])
def test_graph_matches_eager_bitwise(name, fn, oracle, makers, dtype):
    args = _args(makers, dtype)
    graph = trace(fn, *args)
    tlaloc.verify(graph)
    (out,) = tlaloc.eval_graph(graph, *args)
    assert_same_values(out, np.asarray(fn(*args)))


def test_matmul_operator_in_a_graph():
    def f(a, b):
        return a @ b
    g = tlaloc.make_graph(f)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    (out,) = tlaloc.eval_graph(g, a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-14)
    assert "matmul(a, b)" in str(g)


# -- edges the table does not reach ------------------------------------------------------------
@pytest.mark.parametrize("dtype,ulps", [(np.float64, 2), (np.float32, 4)])
def test_log2_log10_within_documented_ulps_of_numpy(dtype, ulps):
    x = np.concatenate([rng.uniform(1e-3, 1e3, 5000), np.exp(rng.uniform(-80, 80, 5000)),
                        2.0 ** np.arange(-60, 61), 10.0 ** np.arange(-20, 21)]).astype(dtype)
    assert_within_ulp(tnp.log2(x), np.log2(x), ulps)
    assert_within_ulp(tnp.log10(x), np.log10(x), ulps)


def test_composites_at_edges():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0])
    with np.errstate(all="ignore"):
        for fn, ref in [(tnp.log2, np.log2), (tnp.log10, np.log10), (tnp.exp2, np.exp2), (tnp.sinc, np.sinc),
                        (tnp.trunc, np.trunc), (tnp.isnan, np.isnan), (tnp.isinf, np.isinf)]:
            assert_same_values(fn(x), ref(x))
        y = np.array([1.0, np.nan, np.nan, 3.0, np.inf, 0.0])
        assert_same_values(tnp.hypot(x, y), np.hypot(x, y))
        assert tnp.hypot(1e300, 1e300) == np.hypot(1e300, 1e300) and tnp.hypot(3e-320, 4e-320) == 5e-320
    assert_same_values(tnp.logical_xor(np.array([0, 2, 0, 3]), np.array([0, 0, 1, 5])),
                       np.logical_xor([0, 2, 0, 3], [0, 0, 1, 5]))


def test_logsumexp_and_softmax_with_infinities():
    a = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [0.0, -np.inf]])
    with np.errstate(all="ignore"):
        assert_same_values(tnp.logsumexp(a, axis=1), scipy.special.logsumexp(a, axis=1))
        assert_same_values(tnp.softmax(a[2:], axis=1), scipy.special.softmax(a[2:], axis=1))


def test_regression_norm_ord2_of_a_matrix_is_the_spectral_norm():
    """Was: ord=2 of a matrix silently gave the Frobenius norm; then refused; now NumPy's spectral norm."""
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert tnp.linalg.norm(a, 2) == pytest.approx(np.linalg.norm(a, 2), rel=1e-14)
    assert tnp.linalg.norm(a, 2, axis=(0, 1)) == pytest.approx(np.linalg.norm(a, 2, axis=(0, 1)), rel=1e-14)
    assert tnp.linalg.norm(a, 2) != pytest.approx(np.linalg.norm(a, "fro"), rel=1e-3)   # negative control
    assert tnp.linalg.norm(a, "fro") == pytest.approx(np.linalg.norm(a, "fro"), rel=1e-15)


def test_split_refuses_unequal_parts():
    with pytest.raises(ShapeError, match="equal parts"):
        tnp.split(np.zeros(5), 2)


def test_negative_control_oracle_comparison_detects_a_wrong_function():
    args = _args([M(3, 6)], np.float64)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(tnp.var(args[0], ddof=1), np.var(args[0]), **TOL[np.float64])


# -- gradients the new composites document ------------------------------------------------------
def _hypot_sum(x, y):
    return tnp.sum(tnp.hypot(x, y))


def _sinc_sum(x):
    return tnp.sum(tnp.sinc(x))


def _slice_loss(x):
    return tnp.sum(static_slice(x, (1, 0), (4, 3), (2, 2)) ** 2)


def test_hypot_gradient_is_x_over_r_and_zero_at_the_origin():
    x, y = np.array([0.0, 3.0, -1e200]), np.array([0.0, 4.0, 1e200])
    gx, gy = tlaloc.grad(_hypot_sum, argnums=(0, 1))(x, y)
    r = np.hypot(x[1:], y[1:])
    assert_same_values(gx[:1], np.zeros(1))
    np.testing.assert_allclose(gx[1:], x[1:] / r, rtol=1e-15)
    np.testing.assert_allclose(gy[1:], y[1:] / r, rtol=1e-15)


def test_sinc_gradient_matches_its_derivative_and_is_zero_at_zero():
    x = np.array([0.0, 0.5, -1.25, 3.0])
    g = tlaloc.grad(_sinc_sum)(x)
    px = np.pi * x[1:]
    want = (np.cos(px) * px - np.sin(px)) / (px * x[1:])
    assert g[0] == 0.0
    np.testing.assert_allclose(g[1:], want, rtol=1e-13)


def test_slice_gradient_through_the_reverse_engine():
    x = rng.standard_normal((5, 4))
    want = np.zeros_like(x)
    want[1:4:2, 0:3:2] = 2 * x[1:4:2, 0:3:2]
    assert_same_values(tlaloc.grad(_slice_loss)(x), want)
