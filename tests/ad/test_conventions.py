"""Analytic values of reverse mode at the points where conventions decide.

Ties split the cotangent equally (as JAX); ``abs'(0) = 0``; ``clip`` passes the
cotangent on its closed interval (bounds included, as PyTorch, unlike JAX's
0.5); and an exactly-zero cotangent stays exactly zero through an infinite
local derivative (sqrt at 0, a branch not taken), where JAX and PyTorch give
NaN. Each row is (function, arguments, argnums, expected gradient), checked
to 1e-15 relative and with zero absolute tolerance, so an expected 0 must come
back exactly 0.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl

jax.config.update("jax_enable_x64", True)


# -- programs ------------------------------------------------------------------------------

def maximum_xy(x, y):
    return np.maximum(x, y)


def minimum_xy(x, y):
    return np.minimum(x, y)


def max_all(x):
    return x.max()


def min_all(x):
    return np.min(x)


def max_rows_keepdims(x):
    return (x.max(axis=1, keepdims=True) * np.array([[1.0], [2.0]])).sum()


def abs_fn(x):
    return np.abs(x)


def abs_sum(x):
    return np.abs(x).sum()


def relu_maximum(x):
    return np.maximum(x, 0.0)


def relu_where(x):
    return np.where(x > 0, x, 0.0)


def clip_fn(x):
    return np.clip(x, -1.0, 1.0).sum()


def sqrt_where(x):
    return np.where(x > 0, np.sqrt(x), 0.0)


def norm_by_hand(x):
    return np.sqrt((x * x).sum())


def norm_linalg(x):
    return np.linalg.norm(x)


def pow_fn(x, y):
    return x ** y


def zero_times_sqrt(x):
    return 0.0 * np.sqrt(x)


def sqrt_fn(x):
    return np.sqrt(x)


def log_where(x):
    return np.where(x > 0, np.log(x), x).sum()


def _a(*v):
    return np.array(v, dtype=np.float64)


# (id, function, arguments, argnums, expected gradient)
CONVENTIONS = [
    ("maximum_tie", maximum_xy, (1.5, 1.5), (0, 1), (0.5, 0.5)),
    ("maximum_x_wins", maximum_xy, (2.0, 1.5), (0, 1), (1.0, 0.0)),
    ("minimum_tie", minimum_xy, (-0.25, -0.25), (0, 1), (0.5, 0.5)),
    ("max_ties_two", max_all, (_a(1.0, 3.0, 3.0),), 0, _a(0.0, 0.5, 0.5)),
    ("max_ties_three", max_all, (_a(2.0, 2.0, 2.0, -1.0),), 0, _a(1.0, 1.0, 1.0, 0.0) / 3.0),
    ("min_ties", min_all, (_a(-1.0, 0.0, -1.0),), 0, _a(0.5, 0.0, 0.5)),
    ("max_rows_ties", max_rows_keepdims, (np.array([[1.0, 1.0], [0.0, 3.0]]),), 0,
     np.array([[0.5, 0.5], [0.0, 2.0]])),
    ("abs_at_0", abs_fn, (0.0,), 0, 0.0),
    ("abs_vector", abs_sum, (_a(-2.0, 0.0, 3.0),), 0, _a(-1.0, 0.0, 1.0)),
    ("relu_maximum_at_0", relu_maximum, (0.0,), 0, 0.5),
    ("relu_where_at_0", relu_where, (0.0,), 0, 0.0),
    ("relu_where_at_pos", relu_where, (0.5,), 0, 1.0),
    ("clip_bounds_inside_outside", clip_fn, (_a(-1.0, 1.0, 0.3, -1.5, 2.0),), 0, _a(1.0, 1.0, 1.0, 0.0, 0.0)),
    ("where_sqrt_at_0", sqrt_where, (0.0,), 0, 0.0),
    ("where_sqrt_negative", sqrt_where, (-1.0,), 0, 0.0),
    ("where_log_mixed", log_where, (_a(0.0, -2.0, 4.0),), 0, _a(1.0, 1.0, 0.25)),
    ("norm_by_hand_at_0", norm_by_hand, (np.zeros(3),), 0, np.zeros(3)),
    ("norm_linalg_at_0", norm_linalg, (np.zeros(3),), 0, np.zeros(3)),
    ("norm_by_hand_at_3_4", norm_by_hand, (_a(3.0, 4.0),), 0, _a(0.6, 0.8)),
    ("pow_dy_at_x0", pow_fn, (0.0, 2.0), 1, 0.0),
    ("pow_dy_at_x0_y_half", pow_fn, (0.0, 0.5), 1, 0.0),
    ("pow_dx_y0_at_x0", pow_fn, (0.0, 0.0), 0, 0.0),
    ("zero_upstream_sqrt_at_0", zero_times_sqrt, (0.0,), 0, 0.0),
]


def _as_args(args):
    return tuple(np.asarray(a, dtype=np.float64) for a in args)


def _assert_exact(got, want, what):
    got_leaves, want_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves), what
    for g, w in zip(got_leaves, want_leaves):
        g, w = np.asarray(g), np.asarray(w, dtype=np.float64)
        assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
        assert not np.isnan(g).any(), f"{what}: NaN in {g}"
        np.testing.assert_allclose(g, w, rtol=1e-15, atol=0, err_msg=what)   # zeros exactly


@pytest.mark.parametrize("name,fn,args,argnums,want", CONVENTIONS, ids=[c[0] for c in CONVENTIONS])
def test_convention(name, fn, args, argnums, want):
    got = tl.grad(fn, argnums=argnums)(*_as_args(args))
    _assert_exact(got, want, name)


def test_maximum_tie_vector_through_vjp():
    x, y = _a(1.0, 2.0, 3.0), _a(1.0, 5.0, 3.0)
    out, vjp_fn = tl.vjp(maximum_xy, x, y)
    gx, gy = vjp_fn(_a(1.0, 1.0, 2.0))
    _assert_exact((gx, gy), (_a(0.5, 0.0, 1.0), _a(0.5, 1.0, 1.0)), "maximum tie (vector)")


def test_sqrt_zero_cotangent_through_vjp():
    # sqrt'(0) is +inf; a zero cotangent must still give exactly 0 (not 0 * inf = NaN)
    out, vjp_fn = tl.vjp(sqrt_fn, _a(0.0, 4.0, 0.0))
    (g,) = vjp_fn(_a(0.0, 1.0, 0.0))
    _assert_exact(g, _a(0.0, 0.25, 0.0), "sqrt with zero cotangent")


def test_sqrt_nonzero_cotangent_at_zero_is_inf():
    # the convention is about zero cotangents only: a real cotangent at 0 is +inf
    out, vjp_fn = tl.vjp(sqrt_fn, _a(0.0))
    (g,) = vjp_fn(_a(1.0))
    assert np.isposinf(g).all()


# -- where tlaloc deliberately differs from JAX (documented; pinned to jax==0.10.2) ---------------

JAX_DIFFERENCES = [
    # (id, tlaloc function, jax twin, arguments, argnums, what JAX gives)
    ("clip_at_bound", clip_fn, lambda x: jnp.clip(x, -1.0, 1.0).sum(), (_a(1.0, -1.0),), 0, _a(0.5, 0.5)),
    ("where_sqrt_at_0", sqrt_where, lambda x: jnp.where(x > 0, jnp.sqrt(x), 0.0), (0.0,), 0, np.nan),
    ("norm_at_0", norm_by_hand, lambda x: jnp.sqrt((x * x).sum()), (np.zeros(3),), 0, np.full(3, np.nan)),
    ("zero_upstream_sqrt", zero_times_sqrt, lambda x: 0.0 * jnp.sqrt(x), (0.0,), 0, np.nan),
    ("abs_at_0", abs_fn, jnp.abs, (0.0,), 0, 1.0),
]


@pytest.mark.parametrize("name,fn,twin,args,argnums,jax_value", JAX_DIFFERENCES,
                         ids=[c[0] for c in JAX_DIFFERENCES])
def test_documented_difference_from_jax(name, fn, twin, args, argnums, jax_value):
    args = _as_args(args)
    jax_got = np.asarray(jax.grad(twin, argnums=argnums)(*[jnp.asarray(a) for a in args]))
    np.testing.assert_array_equal(jax_got, jax_value)     # JAX's convention, as documented
    ours = np.asarray(tl.grad(fn, argnums=argnums)(*args))
    assert not np.isnan(ours).any()
    assert not np.array_equal(ours, jax_got, equal_nan=True), f"{name}: tlaloc now agrees with JAX"
