"""Array API conformance fixes found by data-apis/array-api-tests (run outside
this repository; see docs_array_api.md), each pinned here against NumPy."""
import numpy as np
import pytest

import tlaloc as tl
import tlaloc.numpy as tnp

from . import edge_programs as E


def test_namespace_info_and_version():
    info = tnp.__array_namespace_info__()
    assert tnp.__array_api_version__ == "2024.12"
    assert info.default_dtypes()["real floating"] == np.float64
    assert set(info.dtypes(kind="integral")) == {"int8", "int32", "int64", "uint8", "uint32", "uint64"}
    assert tnp.isdtype(tnp.float32, ("integral", "real floating")) and not tnp.isdtype(tnp.bool, "numeric")


@pytest.mark.parametrize("source,dest", [((0, 1), (2, 0)), (0, -1), ((), ()), ((-1, 0), (0, -1))])
def test_moveaxis_with_sequences(source, dest):
    x = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(tnp.moveaxis(x, source, dest), np.moveaxis(x, source, dest))


def test_nonzero_refuses_a_zero_dim_array():
    with pytest.raises(ValueError, match="0-d"):
        tnp.nonzero(np.array(1.0))
    np.testing.assert_array_equal(tnp.nonzero(np.array([0, 2, 3]))[0], [1, 2])


def test_cumulative_with_a_small_integer_dtype_stays_in_it():
    x = np.array([200, 3], np.uint8)
    out = tnp.cumulative_prod(x, dtype=np.uint8, include_initial=True)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, [1, 200, np.uint8(200) * np.uint8(3)])
    assert tnp.cumsum(x, dtype=np.uint8).dtype == np.uint8


def test_copysign_of_a_python_scalar_takes_the_array_dtype():
    out = tnp.copysign(0, np.array([-1.0, 2.0], np.float32))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(np.signbit(out), [True, False])


def test_pinv_and_matrix_rank_take_one_tolerance_per_matrix():
    a = np.stack([np.diag([1.0, 1e-3]), np.diag([1.0, 1e-3])]).astype(np.float32)
    rtol = np.array([1e-2, 1e-4])                       # float64 thresholds for float32 matrices
    np.testing.assert_array_equal(tnp.linalg.matrix_rank(a, rtol=rtol), [1, 2])
    np.testing.assert_allclose(tnp.linalg.pinv(a, rtol=rtol)[1], np.diag([1.0, 1e3]), rtol=1e-5)
    np.testing.assert_allclose(tnp.linalg.pinv(a, rtol=rtol)[0], np.diag([1.0, 0.0]), rtol=1e-6)


def test_vecdot_refuses_different_lengths_and_keeps_the_dtype():
    with pytest.raises(tl.ShapeError, match="vecdot"):
        tnp.vecdot(np.zeros(0, np.uint8), np.zeros(1, np.uint8))
    assert tnp.vecdot(np.ones(3, np.uint8), np.ones(3, np.uint8)).dtype == np.uint8


def test_linalg_results_are_named_tuples():
    a = np.array([[2.0, 1.0], [1.0, 3.0]])
    w, v = np.linalg.eigh(a)
    np.testing.assert_allclose(tnp.linalg.eigh(a).eigenvalues, w, rtol=1e-14)
    assert tnp.linalg.svd(a).S.shape == (2,) and tnp.linalg.qr(a).R.shape == (2, 2)
    assert tnp.linalg.slogdet(a).logabsdet == pytest.approx(np.log(5.0), rel=1e-14)


def test_complex_arrays_run_eagerly_by_numpy_and_grad_refuses_them():
    z = np.array([1 + 1j, -2 + 0.5j])
    np.testing.assert_allclose(tnp.exp(z), np.exp(z), rtol=1e-15)
    np.testing.assert_allclose(tnp.arccosh(z), np.arccosh(z), rtol=1e-15)
    np.testing.assert_array_equal(tnp.conj(z), np.conj(z))
    np.testing.assert_array_equal(tnp.imag(z), np.imag(z))
    with pytest.raises(tl.GradientError, match="complex128"):
        tl.grad(E.arccosh_sum)(z)


@pytest.mark.parametrize("fn", [E.fft_inside, E.unique_inside])
def test_eager_only_names_are_refused_by_name_inside_transforms(fn):
    x = np.array([1.0, 2.0, 2.0])
    with pytest.raises(tl.NoRuleError, match=r"edge_programs.py:\d+:\d+: (fft.fft|unique_values): no symbolic"):
        tl.vmap(fn)(x[None])
    np.testing.assert_array_equal(tnp.fft.fft(x), np.fft.fft(x))
