"""``tlaloc.random`` against ``jax.random``, bit for bit.

Keys are compared with ``jax.random.PRNGKey`` under x64 (64-bit seeds); splits,
fold-ins, bits and samples through their raw bits with JAX's defaults (x64 off); float64 and uint64 samples with x64 on, from
the same raw key (``jax.random.wrap_key_data``). The same functions run
symbolically: their DXIR evaluates to the same bits.
"""
import jax
import numpy as np
import pytest

import tlaloc
import tlaloc.numpy as tnp
import tlaloc.random as tr
from tlaloc._core.aval import AbstractValue
from tlaloc._prims import REGISTRY
from tlaloc.errors import ArgumentError, DTypeError, ShapeError

from .helpers import BF16, assert_same_values, trace

SEEDS = [0, 1, 42, 2**31 - 1, -1, 2**32 + 5]
SHAPES = [(), (0,), (3, 5)]          # threefry_impl itself is checked on many more (test_random_impl.py)


@pytest.fixture(autouse=True)
def _jax_defaults():
    """JAX's default x64-off mode even if another test switched x64 on globally."""
    with jax.enable_x64(False):
        yield


def jkey(k):
    return jax.random.wrap_key_data(np.asarray(k, np.uint32), impl="threefry2x32")


def kdata(k):
    return np.asarray(jax.random.key_data(k))


@pytest.mark.parametrize("seed", SEEDS)
def test_key_and_alias_match_jax(seed):
    with jax.enable_x64(True):
        want = kdata(jax.random.PRNGKey(seed))
    assert_same_values(tr.key(seed), want)
    assert_same_values(tr.PRNGKey(seed), tr.key(seed))


X64_SEEDS = [2**32, 2**40, 2**40 + 7, -1, -2, -(2**40) - 3, 2**63 - 1, -(2**63),
             np.int64(-5), np.int64(2**40), np.uint64(2**63 + 9), np.int32(-1), np.uint32(7), np.int16(-2)]


@pytest.mark.parametrize("seed", X64_SEEDS, ids=repr)
def test_64_bit_seeds_match_jax_x64(seed):
    """Regression: 2**40 gave [0, 0] (the key of seed 0) and -1 gave [0, 0xFFFFFFFF]; the key now
    holds all 64 bits, as ``jax.random.key_data(jax.random.key(seed))`` with x64 on."""
    with jax.enable_x64(True):
        want = kdata(jax.random.key(seed))
        assert_same_values(kdata(jax.random.PRNGKey(seed)), want)
    assert_same_values(tr.key(seed), want)


def test_64_bit_seeds_do_not_collide():
    """Negative control: x64-off seeding (truncation) would map 2**40 onto seed 0."""
    assert not np.array_equal(tr.key(2**40), tr.key(0))
    with jax.enable_x64(False):
        assert np.array_equal(kdata(jax.random.PRNGKey(2**40)), kdata(jax.random.PRNGKey(0)))


@pytest.mark.parametrize("seed", [0, 5, 2**31 - 1, 2**32 + 5, 2**40 + 7, -1, -(2**63), 2**63 - 1])
def test_symbolic_int64_seed_gives_the_eager_key(seed):
    g = trace(tr.key, AbstractValue(np.dtype(np.int64), ()))
    out = tlaloc.eval_graph(g, np.int64(seed))
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert_same_values(np.asarray(out), tr.key(seed))


@pytest.mark.parametrize("seed", SEEDS[:4])
@pytest.mark.parametrize("num", [2, 3, (2, 3), 0])
def test_split_matches_jax(seed, num):
    assert_same_values(tr.split(tr.key(seed), num), kdata(jax.random.split(jax.random.PRNGKey(seed), num)))


@pytest.mark.parametrize("data", [0, 7, 2**31, 2**32 - 1, np.int64(-3), np.uint32(9)])
def test_fold_in_matches_jax(data):
    k = tr.key(42)
    assert_same_values(tr.fold_in(k, data), kdata(jax.random.fold_in(jax.random.PRNGKey(42), data)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
def test_bits_match_jax(shape, dtype):
    k = tr.split(tr.key(5))[1]
    assert_same_values(tr.bits(k, shape, dtype), np.asarray(jax.random.bits(jkey(k), shape, dtype)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=str)
def test_uniform_and_normal_match_jax(shape, dtype):
    k = tr.fold_in(tr.key(11), 3)
    assert_same_values(tr.uniform(k, shape, dtype), np.asarray(jax.random.uniform(jkey(k), shape, dtype)))
    assert_same_values(tr.normal(k, shape, dtype), np.asarray(jax.random.normal(jkey(k), shape, dtype)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=str)
def test_uniform_bounds_match_jax(dtype):
    k = tr.key(7)
    for lo, hi in [(-3.0, 5.5), (0.1, 0.7)]:
        assert_same_values(tr.uniform(k, (2000,), dtype, lo, hi),
                           np.asarray(jax.random.uniform(jkey(k), (2000,), dtype, lo, hi)))
    lo, hi = np.linspace(-2, 1, 5).astype(dtype), np.linspace(1, 9, 5).astype(dtype)
    assert_same_values(tr.uniform(k, (3, 5), dtype, lo, hi),
                       np.asarray(jax.random.uniform(jkey(k), (3, 5), dtype, lo, hi)))


def test_float64_and_uint64_match_jax_with_x64():
    k = tr.split(tr.key(3), 4)[2]
    with jax.enable_x64(True):
        jk = jkey(k)
        assert_same_values(tr.uniform(k, (500,), np.float64), np.asarray(jax.random.uniform(jk, (500,), np.float64)))
        assert_same_values(tr.uniform(k, (500,), np.float64, -3.0, 5.5),
                           np.asarray(jax.random.uniform(jk, (500,), np.float64, -3.0, 5.5)))
        assert_same_values(tr.normal(k, (500,), np.float64), np.asarray(jax.random.normal(jk, (500,), np.float64)))
        assert_same_values(tr.bits(k, (9,), np.uint64), np.asarray(jax.random.bits(jk, (9,), np.uint64)))


def test_chained_key_derivation_matches_jax():
    jk, k = jax.random.PRNGKey(2024), tr.key(2024)
    for step in range(5):
        jk = jax.random.split(jax.random.fold_in(jk, step), 3)[step % 3]
        k = tr.split(tr.fold_in(k, step), 3)[step % 3]
        assert_same_values(k, kdata(jk))
    assert_same_values(tr.normal(k, (64,)), np.asarray(jax.random.normal(jk, (64,))))


def test_negative_control_other_key_differs():
    a, b = tr.key(0), tr.key(1)
    with pytest.raises(AssertionError):
        assert_same_values(tr.uniform(a, (16,)), np.asarray(jax.random.uniform(jkey(b), (16,))))
    assert not np.array_equal(tr.split(a)[0], tr.split(a)[1])


# -- symbolic -----------------------------------------------------------------------------------
def sample_model(seed, x):
    k = tr.key(seed)
    keys = tr.split(k, 3)
    noise = tr.normal(keys[0], (4,), np.float64)
    drop = tr.uniform(tr.fold_in(keys[1], seed), (4,), np.float64) < 0.5
    return tnp.where(drop, 0.0, x + noise), tr.bits(keys[2], (2,))


def test_random_in_a_graph_matches_eager_and_jax():
    g = tlaloc.make_graph(sample_model)
    tlaloc.verify(g)
    text = str(g)
    assert "threefry2x32(" in text and "random_normal(" in text and "random_uniform(" in text
    x = np.arange(4.0)
    for seed in (0, 9):
        out, bits = tlaloc.eval_graph(g, seed, x)
        want_out, want_bits = sample_model(seed, x)
        assert_same_values(out, want_out)
        assert_same_values(bits, want_bits)
    keys = jax.random.split(jax.random.PRNGKey(9), 3)
    assert_same_values(bits, np.asarray(jax.random.bits(keys[2], (2,))))


def test_threefry_primitive_is_declared_and_has_no_gradient():
    p = REGISTRY["threefry2x32"]
    assert p.multiple_results and "threefry2x32" in p.hlo
    k, c = tr.key(1), np.arange(3, dtype=np.uint32)
    y0, y1 = p.impl(k, c, c)
    assert p.vjp((y0, y1), k, c, c, out=(y0, y1)) == (None, None, None)
    assert p.jvp((None, None, None), k, c, c, out=(y0, y1)) == (None, None)
    out = p.abstract_eval(AbstractValue(np.dtype(np.uint32), (2,)), AbstractValue(np.dtype(np.uint32), (5,)),
                          AbstractValue(np.dtype(np.uint32), (1,)))
    assert [o.shape for o in out] == [(5,), (5,)] and all(o.dtype == np.uint32 for o in out)


def test_uniform_gradient_in_its_bounds():
    """u * (hi - lo) + lo: d/dlo = 1 - u, d/dhi = u (checked analytically and by differences)."""
    k = tr.key(4)

    def f(lo, hi):
        return tnp.sum(tr.uniform(k, (50,), np.float64, lo, hi))

    lo, hi = np.array(-1.0), np.array(3.0)
    g_lo, g_hi = tlaloc.grad(f, argnums=(0, 1))(lo, hi)
    u = tr.uniform(k, (50,), np.float64)
    np.testing.assert_allclose(g_hi, np.sum(u), rtol=1e-13)
    np.testing.assert_allclose(g_lo, np.sum(1 - u), rtol=1e-13)
    eps = 1e-6
    np.testing.assert_allclose(g_hi, (f(lo, hi + eps) - f(lo, hi - eps)) / (2 * eps), rtol=1e-7)


# -- errors ---------------------------------------------------------------------------------------
def test_bad_keys_are_refused_eagerly_and_in_graphs():
    for bad, err in [(np.zeros(3, np.uint32), ShapeError), (np.zeros((2, 2), np.uint32), ShapeError),
                     (np.zeros(2, np.int64), DTypeError), (np.zeros(2, np.float32), DTypeError)]:
        for fn in (tr.split, lambda k: tr.fold_in(k, 1), lambda k: tr.bits(k, (2,)),
                   lambda k: tr.uniform(k, (2,)), lambda k: tr.normal(k, (2,))):
            with pytest.raises(err, match="key"):
                fn(bad)
            with pytest.raises(err, match="key"):
                trace(fn, bad)


def test_bad_arguments_are_refused():
    k = tr.key(0)
    with pytest.raises(ArgumentError, match="shape"):
        tr.uniform(k, (-1,))
    with pytest.raises(ArgumentError, match="shape"):
        tr.normal(k, (2.0,))
    with pytest.raises(ArgumentError, match="dtype"):
        tr.normal(k, (2,), np.int32)
    with pytest.raises(ArgumentError, match="dtype"):
        tr.bits(k, (2,), np.int32)
    with pytest.raises(ArgumentError, match="num"):
        tr.split(k, -2)
    with pytest.raises(ShapeError, match="minval"):
        tr.uniform(k, (3,), np.float32, np.zeros(4, np.float32), 1.0)
    with pytest.raises(DTypeError, match="maxval is float64 but dtype is float32"):
        tr.uniform(k, (3,), np.float32, 0.0, np.ones(3))
    with pytest.raises(DTypeError, match="seed"):
        tr.key(1.5)
    with pytest.raises(ArgumentError, match=r"seed must fit in int64.*2\*\*63"):
        tr.key(2**63)
    with pytest.raises(ArgumentError, match="seed must fit in int64"):
        tr.key(-(2**63) - 1)
    with pytest.raises(DTypeError, match="seed must be an integer"):
        tr.key(np.float64(3.0))
    with pytest.raises(DTypeError, match="seed must be an integer"):
        tr.key(True)
    with pytest.raises(ArgumentError, match="data"):
        tr.fold_in(k, -1)
    with pytest.raises(DTypeError, match="data"):
        tr.fold_in(k, 2.0)
    with pytest.raises(DTypeError, match="seed"):
        trace(tr.key, AbstractValue(np.dtype(np.float32), ()))
