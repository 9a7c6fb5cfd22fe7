"""Differential fuzzing of the per-signature eager code (``_ad/signature_code.py``).

Random NumPy programs (``signature_fuzz.py``: operators, ufuncs, reductions with
axis and keepdims, reshapes, indexing, matmul, broadcasting, Python scalars, int
arrays, float32/float64, zeros, NaNs and infs, loops; grad, value_and_grad, vjp
and nestings of them) must give the generic code's bits (dtype, shape, bytes)
and, where finite, agree with JAX in float64. A fixed-seed sample runs here;
``python tests/ad/signature_fuzz.py N SEED`` runs a bigger one by hand.
Negative control: the bit comparison rejects a sign-flipped zero.
"""
from __future__ import annotations

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

import tlaloc as tl
from tlaloc._ad import signature_code

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import signature_fuzz as F  # noqa: E402

jax.config.update("jax_enable_x64", True)


def _generic(fn, *args):
    signature_code.ENABLED = False
    try:
        return fn(*args)
    finally:
        signature_code.ENABLED = True


def product(x, z):
    return np.sum(x * z)


def test_safe_mul_by_a_constant_one_keeps_the_repaired_zero_sign():
    """x_bar = safe_mul(1.0, z): where the product holds a NaN, safe_mul's repair makes
    z's -0.0 a +0.0. The fold to a plain multiply kept -0.0 (the specialised code
    differed from the generic code's bits; TLALOC_CHECK_RENDER raised)."""
    g = tl.grad(product, argnums=(0, 1))
    x, z = np.array([0.5, 1.0, 2.0]), np.array([-0.0, np.nan, 1.0])
    got = g(x, z)
    assert F.bits(got) == F.bits(_generic(g, x, z))
    assert got[0][0] == 0.0 and not np.signbit(got[0][0])      # the repair's +0.0
    assert np.isnan(got[0][1]) and got[0][2] == 1.0               # d/dx = z elsewhere (JAX's too)
    np.testing.assert_array_equal(got[1], x)


def test_bit_comparison_rejects_a_sign_flipped_zero():
    a = (np.array([0.0, 1.0]),)
    assert F.bits(a) != F.bits((np.array([-0.0, 1.0]),))


def test_random_programs_match_the_generic_code_and_jax():
    counts, failures = F.fuzz(16, 0, out=lambda *_: None)
    assert not failures, [(m, w, p["source"]) for p, m, w in failures]
    assert counts["ok"] >= 12, counts


def cubed(x, y):
    return np.sum(np.transpose(y) ** 3)


def weighted_grad(x, y):
    g = tl.grad(cubed, argnums=1)(x, y)
    return np.sum(g * np.sin(x))


def test_dropped_broadcast_keeps_the_memory_order_a_later_sum_adds_in():
    """y_bar = transpose(broadcast(1.0) * 3 y.T ** 2): the broadcast's C-ordered copy makes
    the product C-ordered, so y_bar is F-ordered and ``sum(g * sin(x))`` adds in F order.
    Without the broadcast the product kept y.T's F order, y_bar came out C-ordered and the
    value was 1 ulp off the generic code's (TLALOC_CHECK_RENDER raised)."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(5), rng.standard_normal((3, 5))
    vg = tl.value_and_grad(weighted_grad, argnums=(0, 1))
    got = vg(x, y)
    flat = (got[0], *got[1])
    assert F.bits(flat) == F.bits((lambda r: (r[0], *r[1]))(_generic(vg, x, y)))
    want = jax.value_and_grad(lambda x, y: jnp.sum(3 * y ** 2 * jnp.sin(x)), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def cubes(x, y, z):
    return np.sum(y ** 3)


def value_and_grad_inside(x, y, z):
    v, g = tl.value_and_grad(cubes, argnums=2)(x, y, z)
    return np.sum(g * np.sin(x)) + v * v


def test_a_nan_times_a_nan_keeps_the_generic_sign_bits():
    """y_bar = broadcast(2 v) * 3 y ** 2 with v = sum(y ** 3) a NaN and NaNs of both signs in y:
    which NaN the product keeps depends on NumPy's loop (array-array or array-scalar, SIMD body
    or tail), so without the broadcast one NaN's sign bit differed. The generic code reruns."""
    nan = np.nan
    x = np.array(-2.38300911)
    y = np.array([[nan, -2.19, 0.34, -0.45, -1.30], [-nan, 0.0, -0.70, 1.40, -nan],
                  [-np.inf, nan, -0.95, -0.0, nan]])
    z = np.array([[0.18, -0.002, 1.0, 0.0, 1.18]])
    g = tl.grad(value_and_grad_inside, argnums=(0, 1, 2))
    got = g(x, y, z)
    assert F.bits(got) == F.bits(_generic(g, x, y, z))
    assert np.isnan(got[1]).sum() == 13 and (got[1][[1, 2], [1, 3]] == 0.0).all()   # 2 v * 3 y**2, v NaN
    np.testing.assert_array_equal(got[2], np.zeros((1, 5)))
