"""Order statistics, NaN-reductions, ``where=``, pad modes, interp, kron and ``np.add.at`` at
their edges: values bit for bit against NumPy (even and odd counts, ties, NaN, infinities,
out-of-range and knot points), derivatives at ties and knots against JAX (float64), the
refusals, and negative controls. The smooth cases under every transform are in
``test_surface_transforms.py`` (``programs.py``)."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl
import tlaloc.numpy as tnp

from .test_surface_edges import assert_same_values

jax.config.update("jax_enable_x64", True)

rng = np.random.default_rng(17)


def _messy(shape, seed):
    """Rounded values (ties), some NaN, +inf and -inf. No -0.0: NumPy's partition is not stable,
    so which of two tied zeros it returns (and the sign of their median) is unspecified."""
    r = np.random.default_rng(seed)
    x = np.round(r.standard_normal(shape) * 2) / 2 + 0.0
    x[r.random(shape) < 0.15] = np.nan
    x[r.random(shape) < 0.1] = np.inf
    x[r.random(shape) < 0.1] = -np.inf
    return x


CASES = [np.array([3.0, 1.0, 2.0]), np.array([4.0, 1.0, 1.0, 2.0]), np.array([1.0, np.inf, 2.0]),
         np.array([1.0, np.nan, 2.0]), np.array([np.nan, np.nan]), np.arange(12).reshape(3, 4) % 5,
         _messy((5, 6), 1), _messy((4, 7), 2), _messy((6, 5), 3)]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_order_statistics_equal_numpy_bit_for_bit(i):
    x = CASES[i]
    q = np.array([0.0, 0.1, 0.5, 0.75, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)            # NumPy warns on all-NaN slices
        for axis in [None, 0, -1] + ([(0, 1)] if x.ndim == 2 else []):
            for kd in (False, True):
                for name in ("quantile", "nanquantile"):
                    assert_same_values(getattr(tnp, name)(x, q, axis=axis, keepdims=kd),
                                       getattr(np, name)(x, q, axis=axis, keepdims=kd))
                    assert_same_values(getattr(tnp, name)(x, 0.3, axis=axis, keepdims=kd),
                                       getattr(np, name)(x, 0.3, axis=axis, keepdims=kd))
                for name in ("percentile", "nanpercentile"):
                    assert_same_values(getattr(tnp, name)(x, q * 100, axis=axis, keepdims=kd),
                                       getattr(np, name)(x, q * 100, axis=axis, keepdims=kd))
                for name in ("median", "nanmedian"):
                    assert_same_values(getattr(tnp, name)(x, axis=axis, keepdims=kd),
                                       getattr(np, name)(x, axis=axis, keepdims=kd))


@pytest.mark.parametrize("i", range(len(CASES)))
def test_nan_reductions_equal_numpy(i):
    x = CASES[i].astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for axis in [None, 0, -1]:
            for name in ("nansum", "nanprod", "nanmean", "nanmax", "nanmin", "nanvar", "nanstd"):
                np.testing.assert_allclose(getattr(tnp, name)(x, axis=axis), getattr(np, name)(x, axis=axis),
                                           rtol=1e-15, atol=0, err_msg=name)
            np.testing.assert_allclose(tnp.nanvar(x, axis=axis, ddof=2), np.nanvar(x, axis=axis, ddof=2),
                                       rtol=1e-15)


def test_order_statistics_under_jit_equal_numpy():
    x = _messy((5, 6), 4)
    def stats(v):
        return np.median(v, axis=0), np.nanquantile(v, 0.3, axis=1), np.percentile(v, 40.0)
    f = tl.jit(stats)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for got, want in zip(f(x), (np.median(x, axis=0), np.nanquantile(x, 0.3, axis=1), np.percentile(x, 40.0))):
            assert_same_values(got, want)


def test_quantile_refusals_name_the_argument():
    x = np.arange(4.0)
    with pytest.raises(tl.ArgumentError, match=r"quantile: q must lie in \[0, 1\]"):
        tnp.quantile(x, 1.5)
    with pytest.raises(tl.ArgumentError, match="only method='linear'"):
        tnp.percentile(x, 50.0, method="nearest")
    with pytest.raises(tl.ArgumentError, match=r"max: where= needs initial="):
        tnp.max(x, where=x > 1)


TIES = [np.array([1.0, 1.0, 1.0, 2.0]), np.array([2.0, 0.0, 2.0, 2.0, 1.0]), np.array([0.0, 0.0, 5.0, 5.0])]


@pytest.mark.parametrize("x", TIES, ids=["ties4", "ties5", "pairs"])
def test_order_statistic_gradients_at_ties_match_jax(x):
    """At a tie the cotangent goes to the element the stable sort puts in the sorted place (JAX)."""
    for ours, theirs in zip(_tie_programs(np), _tie_programs(jnp)):
        np.testing.assert_allclose(tl.grad(ours)(x), jax.grad(theirs)(x), rtol=1e-15, atol=0)
        t = np.linspace(-1.0, 1.0, x.size)
        np.testing.assert_allclose(tl.jvp(ours, (x,), (t,))[1], jax.jvp(theirs, (x,), (t,))[1],
                                   rtol=1e-15, atol=1e-15)


def _tie_programs(m):
    def median(v):
        return m.median(v)

    def quantiles(v):
        return m.sum(m.quantile(v, m.array([0.0, 0.3, 0.5, 0.9, 1.0])) * m.arange(1.0, 6.0))

    def percentile(v):
        return m.percentile(v, 62.5)

    def nan_extrema(v):
        return m.nanmax(v) + 2.0 * m.nanmin(v)

    def where_initial(v):
        return m.max(v, where=v > 0.5, initial=1.0) + m.min(v, initial=1.0)
    return [median, quantiles, percentile, nan_extrema, where_initial]


def test_a_slice_with_nan_has_a_zero_gradient_as_jax():
    x = np.array([[1.0, np.nan, 3.0], [4.0, 2.0, 0.5]])
    def make(m):
        def f(v):
            return m.sum(m.median(v, axis=1)) + m.sum(m.nanmedian(v, axis=1) + m.nanmean(v, axis=1)
                                                      + m.nanstd(v, axis=1))
        return f
    np.testing.assert_array_equal(tl.grad(make(np))(x), jax.grad(make(jnp))(x))


# -- interp -----------------------------------------------------------------------------------------

XP = np.array([-1.0, 0.0, 0.5, 0.5, 2.0])
FP = np.array([1.0, -2.0, 0.25, 3.0, 1.0])
XS = np.array([-3.0, -1.0, -0.25, 0.0, 0.3, 0.5, 1.0, 2.0, 2.5, np.nan, np.inf, -np.inf])


def test_interp_values_equal_numpy_bit_for_bit():
    for _ in range(50):
        xp = np.sort(rng.standard_normal(6))
        fp = rng.standard_normal(6) * 10.0 ** rng.integers(-3, 4)
        x = np.concatenate([rng.uniform(-3, 3, 20), xp])
        assert_same_values(tnp.interp(x, xp, fp), np.interp(x, xp, fp))
    assert_same_values(tnp.interp(XS, XP, FP), np.interp(XS, XP, FP))
    assert_same_values(tnp.interp(XS, XP, FP, left=-7.0, right=9.0), np.interp(XS, XP, FP, left=-7.0, right=9.0))
    for xp, fp in [(np.array([0.0, np.inf]), np.array([1.0, 2.0])), (np.array([0.0, 1.0]), np.array([1.0, np.inf])),
                   (np.array([0.0, 1.0, np.inf]), np.array([1.0, 2.0, 2.0])), (np.array([0.5]), np.array([4.0]))]:
        assert_same_values(tnp.interp(XS, xp, fp), np.interp(XS, xp, fp))
    # XLA may fuse slope * (x - xp[j]) + fp[j] into one FMA: within an ulp under jit
    np.testing.assert_allclose(tl.jit(_interp_fixed)(XS[:-3]), np.interp(XS[:-3], XP, FP), rtol=2e-16, atol=0)


def test_interp_derivatives_at_knots_and_outside_match_jax():
    """At a knot the interval to the right is used (the last one at xp[-1]); outside, only
    left/right (or fp[0]/fp[-1]) get a cotangent; a zero-length interval gives no NaN (JAX)."""
    x = XS[:-3]
    def make(m):
        def f(x, xp, fp):
            return m.sum(m.interp(x, xp, fp) * m.arange(1.0, 10.0)) \
                + m.sum(m.interp(x, xp, fp, left=fp[1] * 2.0, right=-fp[0]) ** 2)
        return f
    if True:
        for g, want in zip(tl.grad(make(np), argnums=(0, 1, 2))(x, XP, FP),
                           jax.grad(make(jnp), argnums=(0, 1, 2))(x, XP, FP)):
            np.testing.assert_allclose(g, want, rtol=1e-14, atol=1e-14)
    t = (np.linspace(-1, 1, x.size), np.linspace(0, 1, 5), np.linspace(1, 2, 5))
    np.testing.assert_allclose(tl.jvp(make(np), (x, XP, FP), t)[1], jax.jvp(make(jnp), (x, XP, FP), t)[1],
                               rtol=1e-14)


def test_interp_negative_control_the_left_slope_at_a_knot_is_seen():
    """A derivative taking the left interval's slope at an interior knot (a plausible slip: the
    value is the same there) differs from JAX's, so the test above would see it."""
    g = tl.grad(_interp_fixed)(0.0)
    assert g == pytest.approx((0.25 + 2.0) / 0.5)                 # the right interval [0, 0.5]
    assert g != pytest.approx((-2.0 - 1.0) / 1.0)                 # the left one [-1, 0]


def _interp_fixed(x):
    return np.interp(x, XP, FP)


# -- pad, kron, add.at ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric", "wrap"])
def test_pad_modes_equal_numpy_including_past_the_length(mode):
    for n in (1, 2, 3, 5):
        x = np.arange(n * 2, dtype=np.float64).reshape(n, 2) + 0.5
        for width in [0, 1, ((2 * n + 3, 1), (0, 5)), 9]:
            assert_same_values(tnp.pad(x, width, mode=mode), np.pad(x, width, mode=mode))
    def padded(v):
        return np.pad(v, ((3, 1), (2, 2)), mode=mode)
    assert_same_values(tl.jit(padded)(x), np.pad(x, ((3, 1), (2, 2)), mode))


def test_pad_negative_control_and_refusals():
    x = np.array([1.0, 2.0, 3.0])
    assert not np.array_equal(tnp.pad(x, 2, mode="reflect"), tnp.pad(x, 2, mode="symmetric"))
    with pytest.raises(tl.ArgumentError, match="pad: mode must be one of"):
        tnp.pad(x, 1, mode="linear_ramp")
    with pytest.raises(tl.ArgumentError, match="reflect_type='even'"):
        tnp.pad(x, 1, mode="reflect", reflect_type="odd")
    with pytest.raises(tl.ShapeError, match="cannot pad axis 0 of length 0"):
        tnp.pad(np.zeros(0), 1, mode="wrap")


def test_kron_values_and_gradient():
    for sa, sb in [((3,), (2,)), ((2, 3), (4, 1)), ((3,), (2, 2)), ((2, 2, 1), (3,))]:
        a, b = rng.standard_normal(sa), rng.standard_normal(sb)
        assert_same_values(tnp.kron(a, b), np.kron(a, b))
        w = rng.standard_normal(np.kron(a, b).shape)
        for g, want in zip(tl.grad(_kron_weighted(np, w), argnums=(0, 1))(a, b),
                           jax.grad(_kron_weighted(jnp, w), argnums=(0, 1))(a, b)):
            np.testing.assert_allclose(g, want, rtol=1e-13)
    a, b = rng.standard_normal((2, 2)), rng.standard_normal((2, 3))
    assert_same_values(tl.jit(_kron)(a, b), np.kron(a, b))
    assert not np.array_equal(tnp.kron(a, b), tnp.kron(b, a).reshape(np.kron(a, b).shape))   # order matters


def _kron_weighted(m, w):
    def f(a, b):
        return m.sum(m.kron(a, b) * w)
    return f


def _kron(a, b):
    return np.kron(a, b)


IDX = np.array([0, 2, 2, 1, 2])


def add_at(x, v):
    y = x * 1.0
    z = y                                       # an alias sees the update, as in NumPy
    np.add.at(y, IDX, v * v)
    np.subtract.at(y, (np.array([1, 1]),), v[:2])
    return np.sum(y * z * np.arange(4.0))


def add_at_jax(x, v):
    y = jnp.asarray(x).at[IDX].add(v * v).at[np.array([1, 1])].add(-v[:2])
    return jnp.sum(y * y * jnp.arange(4.0))


def test_add_at_accumulates_repeated_indices_under_every_transform():
    x, v = np.arange(4.0) + 1.0, np.array([0.5, 1.5, 2.0, -1.0, 3.0])
    assert add_at(x, v) == add_at_jax(x, v)
    assert tl.jit(add_at)(x, v) == pytest.approx(float(add_at_jax(x, v)), rel=1e-15)
    for g, want in zip(tl.grad(add_at, argnums=(0, 1))(x, v), jax.grad(add_at_jax, argnums=(0, 1))(x, v)):
        np.testing.assert_allclose(g, want, rtol=1e-15)
    t = (np.ones(4), np.linspace(0, 1, 5))
    assert tl.jvp(add_at, (x, v), t)[1] == pytest.approx(float(jax.jvp(add_at_jax, (x, v), t)[1]), rel=1e-14)
    # negative control: a last-write-wins update (y[IDX] += v, NumPy's buffered form) differs
    y = np.array(x)
    np.add.at(y, IDX, v * v)
    np.testing.assert_array_equal(tl.jit(_add_at_only)(x, v), y)
    wrong = jnp.asarray(x).at[IDX].set(jnp.asarray(x)[IDX] + v * v)
    assert not np.allclose(y, wrong)


def _add_at_only(x, v):
    y = x + 0.0
    np.add.at(y, IDX, v * v)
    return y


def _multiply_at(x):
    y = x + 0.0
    np.multiply.at(y, np.array([0, 0]), 2.0)
    return y.sum()


def test_another_ufuncs_at_is_refused_by_name():
    with pytest.raises(tl.FenceError, match=r"np.multiply.at is not supported .*np.add.at and np.subtract.at are"):
        tl.grad(_multiply_at)(np.ones(3))
