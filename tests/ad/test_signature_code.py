"""Eager code specialised per argument signature (``_ad/signature_code.py``).

The specialised code must return the generic code's bits (SHA-256 of each
gradient's bytes, dtype and shape) and agree with JAX in float64. Programs:
the eager benchmark's workloads, broadcasting, integer arguments, 0-d arrays,
a loop, and a zero cotangent through an infinite derivative (the path where
plain products see a NaN and the exact code reruns), and NaN and inf arguments
(NaN sign bits and warnings as the generic code's). Negative controls: each
signature gets its own code (code for one shape is wrong for another, and is
not reused), and the JAX comparison rejects a gradient off by 1e-6.
"""
from __future__ import annotations

import hashlib
import importlib.util
import pathlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl
from tlaloc._ad import signature_code

jax.config.update("jax_enable_x64", True)

_spec = importlib.util.spec_from_file_location(
    "eager_workloads", pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "workloads.py")
W = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(W)

RTOL, ATOL = 1e-10, 1e-12


def broadcast_bias(x, b, s):
    """x (3, 4), b (4,), s () -> scalar."""
    return np.sum(np.tanh(x * s + b) * (x - b))


def outer_sum(u, v):
    """u (3, 1), v (1, 4) -> scalar: both operands broadcast."""
    d = u + v
    return np.mean(d * d) - np.sum(u * v)


def int_args(x, n, k):
    """x float (3,), n int64 (3,), k a Python int -> scalar."""
    return np.sum(np.sin(x) * n) / k


def zero_d(a, b):
    """a, b 0-d float arrays -> scalar."""
    return np.sqrt(a * a + b) * a - b / a


def sqrt_weighted(x, w):
    """A zero weight where sqrt' is infinite: x_bar there is 0 (tlaloc's convention), not NaN."""
    return np.sum(np.sqrt(x) * w)


def _rng(seed=0):
    return np.random.default_rng(seed)


CASES = {   # name -> (fn, argnums, args)
    "mlp_small": (W.mlp_loss, W.MLP_ARGNUMS, W.mlp_inputs("small")),
    "integrator_n16": (W.projectile_loss, W.PROJECTILE_ARGNUMS, W.projectile_inputs("small")),
    "deep_mlp": (W.deep_mlp_loss, W.DEEP_MLP_ARGNUMS, W.deep_mlp_inputs(h=8, n=4)),
    "broadcast_bias": (broadcast_bias, (0, 1, 2),
                       (_rng().standard_normal((3, 4)), _rng(1).standard_normal(4), np.array(0.7))),
    "outer_sum": (outer_sum, (0, 1), (_rng(2).standard_normal((3, 1)), _rng(3).standard_normal((1, 4)))),
    "int_args": (int_args, (0,), (_rng(4).standard_normal(3), np.array([1, -2, 3]), 3)),
    "zero_d": (zero_d, (0, 1), (np.array(1.3), np.array(0.4))),
    "sqrt_weighted": (sqrt_weighted, (0, 1), (np.array([0.0, 1.0, 4.0]), np.array([0.0, 2.0, 3.0]))),
}


def digest(outs) -> list:
    """SHA-256 of each result's dtype, shape and bytes."""
    return [hashlib.sha256(f"{np.asarray(o).dtype}{np.shape(o)}".encode() + np.asarray(o).tobytes()).hexdigest()
            for o in outs]


def generic(fn, argnums, args):
    """The gradients from the generic code (what every call ran before signatures)."""
    signature_code.ENABLED = False
    try:
        return tl.grad(fn, argnums=argnums)(*args)
    finally:
        signature_code.ENABLED = True


def jax_grad(fn, argnums, args):
    return jax.grad(W.rebind(fn, jnp), argnums)(*args)


def assert_matches_jax(got, want, rtol=RTOL, atol=ATOL):
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def specialised(g) -> list:
    """The functions built per signature for ``g``'s latest call (none is the generic one)."""
    entry = g._last_entry
    fns = list(entry["signatures"].functions.values())
    assert fns and all(f is not entry["fn"] for f in fns), entry["signatures"].errors
    return fns


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_bits_as_generic_code_and_agrees_with_jax(name):
    fn, argnums, args = CASES[name]
    g = tl.grad(fn, argnums=argnums)
    first, second = g(*args), g(*args)             # the build, then the cached code
    specialised(g)
    before = digest(generic(fn, argnums, args))
    assert digest(first) == before and digest(second) == before
    if name == "sqrt_weighted":                    # JAX gives 0 * inf = NaN at x = 0
        assert first[0][0] == 0.0 and np.isfinite(first[0]).all()
        args = (np.array([0.5, 1.0, 4.0]), args[1])
        first = g(*args)
        assert digest(first) == digest(generic(fn, argnums, args))
    assert_matches_jax(first, jax_grad(fn, argnums, args))


def test_plain_products_rerun_the_exact_code_where_a_nan_appears():
    fn, argnums, args = CASES["sqrt_weighted"]
    g = tl.grad(fn, argnums=argnums)
    g(*args)
    (fn_built,) = specialised(g)
    assert fn_built.__name__.endswith("_checked")      # the plain-products path was built
    source = g._last_entry["signatures"].source(fn_built)
    assert "safe_mul" in source and "_fast" in source
    with np.errstate(all="raise"):                     # no FloatingPointError from 0 * inf
        x_bar, w_bar = g(*args)
    assert x_bar[0] == 0.0 and not np.signbit(x_bar[0])
    np.testing.assert_array_equal(x_bar[1:], 0.5 * args[1][1:] / np.sqrt(args[0][1:]))


def shapes_matter(x, y):
    """y (3,); x broadcasts against it, so x_bar's reduction depends on x's shape."""
    return np.sum(np.tanh(x + y) * y)


def test_each_signature_gets_its_own_code():
    g = tl.grad(shapes_matter, argnums=(0, 1))
    y64 = np.array([0.3, -1.2, 2.0])
    calls = [np.array([0.1, 0.2, 0.3]), np.array([0.5]), np.array([[0.1], [0.2], [0.3]]),
             np.array([0.1, 0.2, 0.3], np.float32), np.array([0.1, 0.2, 0.3])]
    for x in calls:
        y = y64.astype(x.dtype)
        got = g(x, y)
        assert [np.shape(o) for o in got] == [x.shape, y.shape] and got[0].dtype == x.dtype
        assert digest(got) == digest(generic(shapes_matter, (0, 1), (x, y)))
        tol = dict(rtol=1e-5, atol=1e-6) if x.dtype == np.float32 else {}
        assert_matches_jax(got, jax_grad(shapes_matter, (0, 1), (x, y)), **tol)
    assert len(specialised(g)) == 4                 # (3,), (1,), (3, 1), float32 (3,)


def test_code_for_one_shape_is_wrong_for_another():
    """Negative control: the (3,) code folds x_bar's sum away, so run on x of shape (3, 1) it
    returns a (3, 3) cotangent. The cache must not hand it out for that signature."""
    g = tl.grad(shapes_matter, argnums=(0, 1))
    y = np.array([0.3, -1.2, 2.0])
    g(np.array([0.1, 0.2, 0.3]), y)
    (code_for_3,) = specialised(g)
    x31 = np.array([[0.1], [0.2], [0.3]])
    wrong = code_for_3(x31, y)
    assert np.shape(wrong[0]) == (3, 3)
    assert np.shape(g(x31, y)[0]) == (3, 1)


def test_jax_comparison_rejects_a_gradient_off_by_one_in_a_million():
    fn, argnums, args = CASES["integrator_n16"]
    got = tl.grad(fn, argnums=argnums)(*args)
    want = jax_grad(fn, argnums, args)
    with pytest.raises(AssertionError):
        assert_matches_jax([o * (1 + 1e-6) for o in got], want)


def sqrt_of_where(x, w):
    return np.sum(np.sqrt(np.where(x >= 0, x, 0.0)) * w)


def test_a_product_seen_only_through_select_keeps_its_nan_test():
    """Negative control for plain products: x_bar's product reaches the output only through
    ``select``, which can drop a NaN, so it keeps ``safe_mul``; at x = -1 with w = 0 its
    ``0 * inf`` is repaired to 0."""
    g = tl.grad(sqrt_of_where, argnums=(0, 1))
    x, w = np.array([-1.0, 1.0, 4.0]), np.array([0.0, 2.0, 3.0])
    got = g(x, w)
    (fn_built,) = specialised(g)
    source = g._last_entry["signatures"].source(fn_built)
    fast = source.split("_fast(")[-1]              # the fast copy, or the only function
    assert "lax.safe_mul(v3, v5)" in fast          # x_bar's product w * sqrt' keeps its NaN test
    assert digest(got) == digest(generic(sqrt_of_where, (0, 1), (x, w)))
    np.testing.assert_array_equal(got[0], [0.0, 1.0, 0.75])


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_arguments_give_the_generic_bits_and_warnings(value):
    """The fast copy (negations folded, plain products) sees a non-finite output and the
    exact code reruns: NaN sign bits and floating-point warnings are the generic code's."""
    fn, argnums, args = CASES["integrator_n16"]
    args = [a.copy() for a in args]
    args[1][0, 0] = value
    g = tl.grad(fn, argnums=argnums)
    with np.errstate(all="ignore"):      # the build's call
        g(*args)
    assert specialised(g)[0].__name__.endswith("_checked")
    with warnings.catch_warnings(record=True) as new:
        warnings.simplefilter("always")
        got = g(*args)
    signature_code.ENABLED = False
    try:
        with warnings.catch_warnings(record=True) as old:
            warnings.simplefilter("always")
            want = tl.grad(fn, argnums=argnums)(*args)
    finally:
        signature_code.ENABLED = True
    assert digest(got) == digest(want)
    assert sorted(str(w.message) for w in new) == sorted(str(w.message) for w in old)


# -- regression: both operands of a product were broadcasts (a gradient of a gradient) ------------

def _inner(x, y):
    return (x * y).sum()


_d_inner_dy = tl.grad(_inner, argnums=1)


def sum_of_inner_grad(x, y):
    """x (3, 5), y (5,) -> scalar: d/dx is ones (3, 5), d/dy zeros (5,)."""
    return _d_inner_dy(x, y).sum()


def test_grad_of_a_grad_keeps_the_shape_of_a_product_of_two_broadcasts():
    # silently wrong before: drop_broadcasts removed the broadcast of both operands of
    # broadcast(a) * broadcast(b), each judged against the other's old shape, so x_bar came out (5,)
    x, y = np.arange(15.0).reshape(3, 5), np.arange(5.0) + 1
    g = tl.grad(sum_of_inner_grad, argnums=(0, 1))
    got = g(x, y)
    specialised(g)
    want = jax.grad(lambda a, b: jax.grad(lambda p, q: (p * q).sum(), argnums=1)(a, b).sum(),
                    argnums=(0, 1))(jnp.asarray(x), jnp.asarray(y))
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, np.asarray(w), rtol=RTOL, atol=ATOL)
    assert digest(got) == digest(generic(sum_of_inner_grad, (0, 1), (x, y)))
