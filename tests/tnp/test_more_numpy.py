"""NumPy functions added to ``tlaloc.numpy`` by composition (``_more_numpy.py``,
``_more_numpy_stats.py``, ``linalg.multi_dot``): cbrt, nan_to_num, ptp, fmax, fmin, heaviside,
isclose, allclose, append, select, block, array_split, diagflat, ediff1d, conjugate, average,
cov, corrcoef, trapezoid, polyval, vander, convolve, correlate and linalg.multi_dot.

Before, user code calling any of them inside ``tl.grad`` was refused ("`numpy.NAME` has no
tlaloc equivalent yet"). Here each is called from plain NumPy user code (``np.NAME``):

* gradients under ``tl.grad``, ``tl.jit(tl.grad)`` and ``tl.vmap(tl.grad)`` against JAX in
  float64 (the same user function run with ``np`` bound to ``jax.numpy``);
* values under ``tl.jit`` against the function run by NumPy itself (rtol 1e-12), and eager
  ``tlaloc.numpy`` calls against NumPy, bit for bit (and dtype) where the composition is exact;
* negative controls (another mode, axis or order gives another answer, so a tolerance cannot
  hide a dropped argument) and the refusals of unsupported options by name.
"""
import types
import warnings

import numpy as np
import pytest

import tlaloc as tl
import tlaloc.numpy as tnp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

jax.config.update("jax_enable_x64", True)

rng = np.random.default_rng(11)
X = np.array([0.3, -0.7, 1.2, 0.55, -1.4, 2.1])          # distinct values: no ties in max/fmax


def as_jax(f):
    """The same user function with ``np`` meaning ``jax.numpy``."""
    return types.FunctionType(f.__code__, dict(f.__globals__, np=jnp), f.__name__)


# -- user code, plain NumPy ---------------------------------------------------------------------

def f_cbrt(x): return np.sum(np.cbrt(x) * x)
def f_nan_to_num(x): return np.sum(np.nan_to_num(np.log(x), neginf=-3.0) * x)
def f_ptp(x): return np.sum(np.ptp(np.reshape(x, (2, 3)), axis=0) ** 2)
def f_fmax_fmin(x): return np.sum(np.fmax(x, np.sin(x) + 0.1) * np.fmin(x, np.cos(x)))
def f_heaviside(x): return np.sum(np.heaviside(x - 0.55, x) * x)
def f_isclose(x): return np.sum(np.where(np.isclose(x, 0.5, atol=0.2), x ** 2, x))
def f_append(x): return np.sum(np.append(x, x[:2] ** 2) ** 2)
def f_append_axis(x): return np.sum(np.append(np.reshape(x, (2, 3)), np.reshape(x, (2, 3)) ** 2, axis=0) ** 3)
def f_select(x): return np.sum(np.select([x > 0.5, x < -0.5], [x ** 2, np.sin(x)], 0.1 * x))
def f_array_split(x):
    parts = np.array_split(x, 4)
    return np.sum(parts[0] ** 2) + np.sum(parts[3] ** 3)
def f_diagflat(x): return np.sum(np.diagflat(x, 1) @ np.arange(7.0))
def f_ediff1d(x): return np.sum(np.ediff1d(x, to_begin=x[0] ** 2, to_end=np.array([1.0, 2.0])) ** 2)
def f_conjugate(x): return np.sum(np.conjugate(x) * x)
def f_average(x): return np.sum(np.average(np.reshape(x, (2, 3)), axis=1, weights=np.exp(x[:3])) ** 2)
def f_average_returned(x):
    avg, scl = np.average(np.reshape(x, (2, 3)), axis=0, weights=np.reshape(x, (2, 3)) ** 2, returned=True)
    return np.sum(avg * scl)
def f_average_plain(x): return np.average(x ** 2)
def f_cov(x): return np.sum(np.cov(np.reshape(x, (2, 3))) * np.array([[1.0, 2.0], [3.0, 4.0]]))
def f_cov_y(x): return np.sum(np.cov(x[:3], x[3:] ** 2, bias=True) ** 2)
def f_cov_cols(x): return np.sum(np.cov(np.reshape(x, (3, 2)), rowvar=False, ddof=0) ** 2)
def f_corrcoef(x): return np.sum(np.corrcoef(np.reshape(x, (2, 3))) * np.array([[1.0, 2.0], [3.0, 4.0]]))
def f_trapezoid(x): return np.trapezoid(np.sin(x), x=np.cumsum(np.exp(x)))
def f_trapezoid_dx(x): return np.sum(np.trapezoid(np.reshape(x, (2, 3)) ** 2, dx=0.3, axis=0))
def f_polyval(x): return np.sum(np.polyval(x[:3], x))
def f_vander(x): return np.sum(np.vander(x, 4) @ np.arange(4.0))
def f_vander_increasing(x): return np.sum(np.vander(x[:3], increasing=True) * np.arange(9.0).reshape(3, 3))
def f_convolve(x): return np.sum(np.convolve(x, x[:3] ** 2, mode="same") * np.arange(6.0))
def f_correlate(x): return np.sum(np.correlate(x[:2], x ** 2, mode="full") * np.arange(7.0))
def f_correlate_same(x): return np.sum(np.correlate(x[:3], x ** 2, mode="same") * np.arange(6.0))
def f_multi_dot(x):
    m = np.reshape(x, (2, 3))
    return np.linalg.multi_dot([x[:2], m, m.T, m, x[:3]])
def f_block(x):
    m = np.reshape(x[:4], (2, 2))
    return np.sum(np.block([[m, m * 2.0], [m ** 2, np.eye(2)]]) ** 2)


CASES = [f_cbrt, f_nan_to_num, f_ptp, f_fmax_fmin, f_heaviside, f_isclose, f_append, f_append_axis, f_select,
         f_array_split, f_diagflat, f_ediff1d, f_conjugate, f_average, f_average_returned, f_average_plain, f_cov,
         f_cov_y, f_cov_cols, f_corrcoef, f_trapezoid, f_trapezoid_dx, f_polyval, f_vander, f_vander_increasing,
         f_convolve, f_correlate, f_correlate_same, f_multi_dot, f_block]
JITTED = [f_cbrt, f_select, f_cov, f_correlate_same, f_multi_dot, f_array_split, f_block, f_average]


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__[2:])
def test_gradient_matches_jax_and_value_matches_numpy(f):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)           # np.log of a negative number
        want_value = f(X)
    want = np.asarray(jax.grad(as_jax(f))(X))
    np.testing.assert_allclose(tl.grad(f)(X), want, rtol=1e-10, atol=1e-12)
    value, grad = tl.value_and_grad(f)(X)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(grad, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("f", JITTED, ids=lambda f: f.__name__[2:])
def test_under_jit(f):
    np.testing.assert_allclose(tl.jit(f)(X), f(X), rtol=1e-12)
    np.testing.assert_allclose(tl.jit(tl.grad(f))(X), np.asarray(jax.grad(as_jax(f))(X)), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("f", [f_cov, f_correlate_same, f_select, f_vander], ids=lambda f: f.__name__[2:])
def test_under_vmap_of_grad(f):
    xs = np.stack([X, 0.9 * X + 0.05, X[::-1]])
    want = np.stack([np.asarray(jax.grad(as_jax(f))(x)) for x in xs])
    np.testing.assert_allclose(tl.vmap(tl.grad(f))(xs), want, rtol=1e-10, atol=1e-12)


def f_allclose_branch(x):
    if np.allclose(x, 0.0):
        return np.sum(x)
    return np.sum(x ** 3)


def test_allclose_in_a_branch():
    np.testing.assert_allclose(tl.grad(f_allclose_branch)(X), 3 * X ** 2, rtol=1e-14)
    np.testing.assert_allclose(tl.grad(f_allclose_branch)(np.zeros(3)), np.ones(3))
    assert tnp.allclose(X, X + 1e-9) is True and tnp.allclose(X, X + 1e-3) is False


# -- values against NumPy's own, eagerly ---------------------------------------------------------

M = rng.standard_normal((3, 4))
SPECIAL = np.array([27.0, -8.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 2.0, 1e-300, -1e300])
EXACT = [
    ("nan_to_num", (np.array([np.nan, np.inf, -np.inf, 1.0]),), {}),
    ("nan_to_num", (np.array([np.nan, np.inf, -np.inf], np.float32),), {}),
    ("nan_to_num", (np.array([np.nan, np.inf, -np.inf]),), dict(nan=-1.0, posinf=5.0, neginf=-5.0)),
    ("nan_to_num", (np.array([1, 2]),), {}),
    ("ptp", (M,), {}), ("ptp", (M,), dict(axis=1, keepdims=True)), ("ptp", (M,), dict(axis=(0, 1))),
    ("fmax", (np.array([1.0, np.nan, np.nan, 3.0]), np.array([np.nan, 2.0, np.nan, 1.0])), {}),
    ("fmin", (np.array([1.0, np.nan, np.nan, 3.0]), np.array([np.nan, 2.0, np.nan, 1.0])), {}),
    ("heaviside", (np.array([-1.0, 0.0, 2.0, np.nan, -0.0]), 0.5), {}),
    ("heaviside", (np.array([-1.0, 0.0, 2.0], np.float32), 0.5), {}),
    ("isclose", (np.array([1.0, 1 + 1e-9, np.inf, np.inf, np.nan, 1e10]),
                 np.array([1.0, 1.0, np.inf, -np.inf, np.nan, 1.00001e10])), {}),
    ("isclose", (np.array([np.nan, 1.0]), np.array([np.nan, 2.0])), dict(equal_nan=True)),
    ("isclose", (np.array([1, 2]), np.array([1, 3])), {}),
    ("append", (M, X), {}), ("append", (M, M), dict(axis=1)), ("append", (X, 3.0), {}),
    ("select", ([X > 1, X < -0.5], [X ** 2, -X], 42.0), {}), ("select", ([X > 1, X < 0], [1, 2]), {}),
    ("block", ([[M[:, :2], M], [M[:1, :3], M[:1, :3]]],), {}), ("block", ([[1.0, 2.0], [3.0, 4.0]],), {}),
    ("block", ([[[M]], [[M]]],), {}), ("block", (X,), {}),
    ("diagflat", (M,), {}), ("diagflat", (X,), dict(k=-2)),
    ("ediff1d", (M,), {}), ("ediff1d", (X,), dict(to_end=[1.0, 2.0], to_begin=-1.0)),
    ("ediff1d", (X.astype(np.float32),), dict(to_begin=-1.0)),
    ("conjugate", (X + 2j,), {}),
    ("polyval", (X, M), {}), ("polyval", ([1.0, -2.0, 3.0], X), {}), ("polyval", (X, 2.5), {}),
    ("vander", (X,), {}), ("vander", (X,), dict(N=3)), ("vander", (X,), dict(N=8, increasing=True)),
    ("vander", (X,), dict(N=0)), ("vander", (np.arange(4),), {}),
]


@pytest.mark.parametrize("name,args,kwargs", EXACT, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(EXACT)])
def test_eager_values_are_numpys_bit_for_bit(name, args, kwargs):
    got, want = np.asarray(getattr(tnp, name)(*args, **kwargs)), np.asarray(getattr(np, name)(*args, **kwargs))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got.real), np.signbit(want.real))       # -0.0 stays -0.0


def _cbrt_correctly_rounded(x):
    # the oracle: mpmath at 80 bits, rounded once to float64. NumPy's own cbrt depends on the
    # platform (glibc's scalar cbrt(27.0) is 3.0000000000000004; its AVX2 array loop is up to
    # 3 ulp off where the AVX-512 one is not), so it cannot be the reference bit for bit.
    import mpmath
    with mpmath.workprec(80):
        return np.array([v if not np.isfinite(v) or v == 0 else
                         float(np.sign(v) * mpmath.cbrt(mpmath.mpf(abs(float(v))))) for v in x])


def test_cbrt_exact_at_cubes_and_special_values():
    cubes = np.arange(-20.0, 20.0)
    got = tnp.cbrt(cubes ** 3)
    np.testing.assert_array_equal(got, cubes)
    special = tnp.cbrt(SPECIAL)
    np.testing.assert_array_equal(special, _cbrt_correctly_rounded(SPECIAL))
    np.testing.assert_array_equal(np.signbit(special), np.signbit(SPECIAL))          # -0.0 stays -0.0
    ints = tnp.cbrt(np.array([8, -27]))
    assert ints.dtype == np.float64 and ints.tolist() == [2.0, -3.0]


def test_cbrt_within_one_ulp_of_the_correctly_rounded_value():
    x = rng.standard_normal(5000) * 10.0 ** rng.integers(-200, 200, 5000)
    want = _cbrt_correctly_rounded(x)
    np.testing.assert_array_max_ulp(tnp.cbrt(x), want, maxulp=1)
    # control: 2 ulp away from the oracle is caught
    with pytest.raises(AssertionError):
        np.testing.assert_array_max_ulp(np.nextafter(np.nextafter(want, np.inf), np.inf), want, maxulp=1)


W = rng.random((3, 4))
CLOSE = [
    ("average", (M,), dict(axis=1, keepdims=True)), ("average", (M,), dict(weights=W, returned=True)),
    ("average", (M,), dict(weights=W[0], axis=1, returned=True)), ("average", (M,), dict(weights=W[:, 0], axis=0)),
    ("average", (M,), dict(weights=rng.random((4, 3)), axis=(1, 0))), ("average", (M,), dict(axis=0, returned=True)),
    ("average", (np.arange(6).reshape(2, 3),), dict(axis=0, weights=np.array([1, 3]))),
    ("cov", (M,), {}), ("cov", (M,), dict(rowvar=False)), ("cov", (M,), dict(ddof=2)), ("cov", (X,), {}),
    ("cov", (M, M[:2] ** 2), {}), ("cov", (M, rng.standard_normal(3)), dict(rowvar=False)), ("cov", (X, X ** 2), {}),
    ("cov", (M.astype(np.float32),), {}),
    ("corrcoef", (M,), {}), ("corrcoef", (M,), dict(rowvar=False)), ("corrcoef", (X, X ** 2), {}),
    ("corrcoef", (X,), {}),
    ("trapezoid", (M,), {}), ("trapezoid", (M,), dict(dx=0.3, axis=0)), ("trapezoid", (M,), dict(x=np.sort(X[:4]))),
    ("trapezoid", (M,), dict(x=np.sort(rng.random((3, 4)), axis=0), axis=0)),
]


@pytest.mark.parametrize("name,args,kwargs", CLOSE, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(CLOSE)])
def test_eager_values_match_numpy(name, args, kwargs):
    got, want = getattr(tnp, name)(*args, **kwargs), getattr(np, name)(*args, **kwargs)
    for g, w in zip(got, want) if isinstance(want, tuple) else [(got, want)]:
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15)


def test_array_split_parts_equal_numpys():
    for ary, n, axis in [(X, 4, 0), (X, 1, 0), (X, 6, 0), (X, 8, 0), (M, 3, 1), (M, [1, 3], -1), (M, 2, 0)]:
        got, want = tnp.array_split(ary, n, axis=axis), np.array_split(ary, n, axis=axis)
        assert [g.shape for g in got] == [w.shape for w in want]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("la,lv", [(7, 3), (3, 7), (6, 4), (4, 6), (5, 5), (1, 4), (4, 1), (2, 5)])
def test_convolve_and_correlate_match_numpy_for_every_mode_and_order(la, lv, mode):
    a, v = rng.standard_normal(la), rng.standard_normal(lv)
    np.testing.assert_allclose(tnp.convolve(a, v, mode), np.convolve(a, v, mode), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(tnp.correlate(a, v, mode), np.correlate(a, v, mode), rtol=1e-12, atol=1e-14)
    c, w = a + 1j * rng.standard_normal(la), v - 1j * rng.standard_normal(lv)        # conj of v, eagerly
    np.testing.assert_allclose(tnp.correlate(c, w, mode), np.correlate(c, w, mode), rtol=1e-12, atol=1e-14)


def test_multi_dot_matches_numpy_in_its_order():
    for shapes in [[(10,), (10, 3), (3, 20), (20, 5), (5,)], [(2, 10), (10, 3), (3, 20), (20, 5)],
                   [(10, 2), (2, 10), (10, 3)], [(2, 10), (10, 3), (3, 20)], [(4, 3), (3,)], [(3,), (3, 4), (4, 2)]]:
        arrays = [rng.standard_normal(s) for s in shapes]
        got, want = tnp.linalg.multi_dot(arrays), np.linalg.multi_dot(arrays)
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=1e-13)
        if len(shapes) > 2 and all(len(s) == 2 for s in shapes):
            np.testing.assert_array_equal(got, want)        # the same order of products: the same bits


# -- negative controls ----------------------------------------------------------------------------

def test_negative_controls_options_change_the_answer():
    a, v = rng.standard_normal(4), rng.standard_normal(7)
    full = np.correlate(a, v, "full")
    same = tnp.correlate(a, v, "same")
    # a shorter than v: NumPy's 'same' keeps the 7 lags from len(a) // 2 = 2 of 'full', not the
    # centred ones (from (len(a) - 1) // 2 = 1), and differs from correlate(v, a, 'same')
    np.testing.assert_allclose(same, full[2:9], rtol=1e-12)
    assert not np.allclose(same, full[1:8])
    assert not np.allclose(same, tnp.correlate(v, a, "same"))
    assert not np.allclose(tnp.correlate(a, v, "full"), tnp.convolve(a, v, "full"))
    np.testing.assert_allclose(tnp.correlate(v, a, "full"), full[::-1], rtol=1e-12)
    assert tnp.ptp(M, axis=0).shape == (4,) and tnp.ptp(M, axis=1, keepdims=True).shape == (3, 1)
    assert not np.allclose(tnp.ptp(M[:3, :3], axis=0), tnp.ptp(M[:3, :3], axis=1))
    assert not np.allclose(tnp.average(M, weights=W), tnp.average(M))
    assert not np.allclose(tnp.cov(M), tnp.cov(M, bias=True))
    assert tnp.cov(M).shape == (3, 3) and tnp.cov(M, rowvar=False).shape == (4, 4)
    assert not np.allclose(tnp.trapezoid(M, axis=0)[:3], tnp.trapezoid(M, axis=1))
    assert not np.allclose(tnp.vander(X, 3), tnp.vander(X, 3, increasing=True))
    assert not np.allclose(tnp.polyval(X, 0.7), tnp.polyval(X[::-1], 0.7))
    assert [len(p) for p in tnp.array_split(np.arange(7.0), 3)] == [3, 2, 2]
    assert not np.allclose(tnp.select([X > 0, X > -1], [X, -X]), tnp.select([X > -1, X > 0], [-X, X]))
    # the gradient sees the mode too
    assert not np.allclose(tl.grad(f_correlate_same)(X), tl.grad(f_correlate)(X))


# -- refusals -------------------------------------------------------------------------------------

def test_unsupported_options_are_refused_by_name():
    with pytest.raises(NotImplementedError, match="fweights"):
        tnp.cov(M, fweights=np.ones(4, int))
    with pytest.raises(NotImplementedError, match="aweights"):
        tnp.cov(M, aweights=np.ones(4))
    with pytest.raises(ValueError, match="same length"):
        tnp.select([X > 0], [X, X])
    with pytest.raises(ValueError, match="empty condition list"):
        tnp.select([], [])
    with pytest.raises(TypeError, match="tuple"):
        tnp.block((M, M))
    with pytest.raises(ValueError, match="depths are mismatched"):
        tnp.block([M, [M]])
    with pytest.raises(ValueError, match="larger than 0"):
        tnp.array_split(X, 0)
    with pytest.raises(ValueError, match="mode must be"):
        tnp.convolve(X, X, mode="circular")
    with pytest.raises(ValueError, match="cannot be empty"):
        tnp.correlate(X, np.array([]))
    with pytest.raises(ValueError, match="at least two"):
        tnp.linalg.multi_dot([M])
    with pytest.raises(np.linalg.LinAlgError, match="two-dimensional"):
        tnp.linalg.multi_dot([M, np.ones((4, 2, 2)), M])
    with pytest.raises(ZeroDivisionError):
        tnp.average(M, weights=np.zeros((3, 4)))
    with pytest.raises(TypeError, match="Axis must be specified"):
        tnp.average(M, weights=W[0])
    with pytest.raises(TypeError, match="same_kind"):
        tnp.ediff1d(np.arange(3), to_begin=0.5)
