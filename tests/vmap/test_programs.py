"""``tl.vmap`` on whole programs: against JAX's ``jax.vmap`` (float64) and
against a Python loop over examples; generated code batches without a loop.
"""
import jax
import numpy as np
import pytest

import tlaloc as tl

from . import programs as P
from .harness import assert_close

jax.config.update("jax_enable_x64", True)

B = 5
rng = np.random.default_rng(0)


def normal(*shape):
    return rng.standard_normal(shape)


def ints(hi, *shape):
    return rng.integers(0, hi, shape)


# (name, tlaloc fn, JAX twin, args, in_axes, out_axes); every case runs against a loop over examples,
# those in JAX_CASES against jax.vmap too (XLA compiles each one: about half a second apiece).
CASES = [
    ("elementwise", P.T["elementwise"], P.J["elementwise"], (normal(B, 3, 4), normal(4)), (0, None), 0),
    ("elementwise-both", P.T["elementwise"], P.J["elementwise"], (normal(B, 3, 4), normal(B, 4)), 0, 0),
    ("elementwise-y", P.T["elementwise"], P.J["elementwise"], (normal(3, 4), normal(4, B)), (None, 1), 0),
    ("reductions", P.T["reductions"], P.J["reductions"], (normal(B, 3, 4),), 0, 0),
    ("logsumexp", P.T["logsumexp"], P.J["logsumexp"], (normal(B, 6),), 0, 0),
    ("mlp", P.T["mlp"], P.J["mlp"], (normal(4, 8), normal(8), normal(8, 2), normal(B, 4)), (None, None, None, 0), 0),
    ("mlp-weights", P.T["mlp"], P.J["mlp"], (normal(B, 4, 8), normal(8), normal(8, 2), normal(4)),
     (0, None, None, None), 0),
    ("matvec", P.T["matvec"], P.J["matvec"], (normal(B, 3, 3), normal(B, 3)), 0, 0),
    ("index-scalar", P.T["index_scalar"], P.J["index_scalar"], (normal(B, 5, 3), ints(5, B)), 0, 0),
    ("index-shared", P.T["index_scalar"], P.J["index_scalar"], (normal(B, 5, 3), np.int64(2)), (0, None), 0),
    ("index-rows", P.T["index_rows"], P.J["index_rows"], (normal(B, 5, 3), ints(5, B, 4)), 0, 0),
    ("index-table", P.T["index_rows"], P.J["index_rows"], (normal(5, 3), ints(5, B, 4)), (None, 0), 0),
    ("update", P.update, P.j_update, (normal(B, 5), ints(5, B)), 0, 0),
    ("solve", P.T["solve"], P.J["solve"], (normal(B, 3, 3), normal(B, 3)), 0, 0),
    ("solve-shared", P.T["solve"], P.J["solve"], (normal(3, 3), normal(B, 3)), (None, 0), 0),
    ("chol-logdet", P.T["chol_logdet"], P.J["chol_logdet"], (normal(B, 3, 3),), 0, 0),
    ("contractions", P.T["contractions"], P.J["contractions"], (normal(B, 3, 2), normal(B, 4)), 0, 0),
    ("scans", P.T["scans"], P.J["scans"], (normal(B, 4, 3),), 0, (0, 1)),
    ("shapes", P.T["shapes"], P.J["shapes"], (normal(B, 2, 3),), 0, (0, -1)),
    ("where-clip", P.T["where_clip"], P.J["where_clip"], (normal(3, B, 4),), 1, 0),
    ("static-loop", P.T["static_loop"], P.J["static_loop"], (normal(B, 3, 2), normal(2)), (0, None), 0),
    ("negative-axis", P.T["elementwise"], P.J["elementwise"], (normal(3, 4, B), normal(4)), (-1, None), -1),
    ("if-branch", P.if_branch, P.j_if_branch, (normal(B, 3),), 0, 0),
    ("while", P.halve, P.j_halve, (np.abs(normal(B)) * 20,), 0, 0),
    ("for-bound", P.powsum, P.j_powsum, (normal(B) * 0.5, np.array([0, 1, 3, 2, 4])), 0, 0),
]


JAX_CASES = {"elementwise", "elementwise-y", "reductions", "mlp", "index-scalar", "index-rows", "update",
             "solve-shared", "chol-logdet", "scans", "if-branch", "while", "for-bound"}


def _loop(fn, args, in_axes, out_axes):
    """The oracle: ``fn`` (plain NumPy) per example, stacked at ``out_axes``."""
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    size = next(np.shape(a)[ax] for a, ax in zip(args, axes) if ax is not None)
    outs = []
    for b in range(size):
        ex = [a if ax is None else np.take(a, b, axis=ax) for a, ax in zip(args, axes)]
        r = fn(*ex)
        outs.append(r if isinstance(r, tuple) else (r,))
    oaxes = out_axes if isinstance(out_axes, tuple) else (out_axes,) * len(outs[0])
    return tuple(np.stack([np.asarray(o[k]) for o in outs], axis=oa) for k, oa in enumerate(oaxes))


def _as_tuple(x):
    return tuple(np.asarray(a) for a in x) if isinstance(x, (tuple, list)) else (np.asarray(x),)


@pytest.mark.parametrize("name,fn,twin,args,in_axes,out_axes", CASES, ids=[c[0] for c in CASES])
def test_vmap_matches_jax_and_a_loop(name, fn, twin, args, in_axes, out_axes):
    v = tl.vmap(fn, in_axes=in_axes, out_axes=out_axes)
    got = _as_tuple(v(*args))
    if name in JAX_CASES:
        jargs = [jax.numpy.asarray(a) for a in args]
        want_jax = _as_tuple(jax.jit(jax.vmap(twin, in_axes=in_axes, out_axes=out_axes))(*jargs))
        assert_close(got, [np.asarray(w) for w in want_jax], rtol=1e-12, atol=1e-12)
    assert_close(got, _loop(fn, args, in_axes, out_axes), rtol=1e-12, atol=1e-12)
    src = tl.source(v)
    assert "for b in" not in src and "lax." in src


def test_if_on_a_per_example_condition_selects_between_both_branches():
    v = tl.vmap(P.if_branch)
    x = np.stack([np.ones(3), -np.ones(3), np.array([2.0, -1.0, -0.5])])
    got = v(x)
    src = tl.source(v)
    assert "lax.select" in src and "lax.truth" not in src          # no Python `if` on the batch
    np.testing.assert_allclose(got, np.stack([P.if_branch(r) for r in x]), rtol=1e-15)


def test_if_on_a_shared_condition_stays_a_branch():
    def f(x, flag):
        if flag > 0:
            y = x * 2.0
        else:
            y = x - 1.0
        return y
    v = tl.vmap(f, in_axes=(0, None))
    x = normal(4, 3)
    np.testing.assert_allclose(v(x, np.float64(1.0)), x * 2.0)
    np.testing.assert_allclose(v(x, np.float64(-1.0)), x - 1.0)
    assert "lax.truth" in tl.source(v)


def test_while_with_per_example_trip_counts_runs_the_longest():
    v = tl.vmap(P.halve)
    x = np.array([0.5, 3.0, 1000.0])
    np.testing.assert_allclose(v(x), [P.halve(a) for a in x], rtol=1e-15)
    assert "reduce_any" in tl.source(v)


def test_nested_vmap_pairwise_distances():
    X, Y = normal(4, 3), normal(6, 3)
    v = tl.vmap(tl.vmap(P.dist, in_axes=(None, 0)), in_axes=(0, None))
    want = jax.vmap(jax.vmap(P.j_dist, in_axes=(None, 0)), in_axes=(0, None))(X, Y)
    np.testing.assert_allclose(v(X, Y), want, rtol=1e-13)
    assert v(X, Y).shape == (4, 6)


def test_vmap_of_a_function_calling_vmap():
    inner = tl.vmap(P.dist, in_axes=(None, 0))

    def nearest(a, ys):
        return inner(a, ys).min()
    X, Y = normal(4, 3), normal(6, 3)
    got = tl.vmap(nearest, in_axes=(0, None))(X, Y)
    np.testing.assert_allclose(got, [min(P.dist(a, y) for y in Y) for a in X], rtol=1e-13)


def test_negative_control_the_comparison_notices_a_wrong_batch():
    x = normal(B, 3, 4)
    got = _as_tuple(tl.vmap(P.T["reductions"])(x))
    wrong = _loop(P.T["reductions"], (np.roll(x, 1, axis=0),), 0, 0)
    with pytest.raises(AssertionError):
        assert_close(got, wrong)


@pytest.mark.parametrize("fn", [P.first_positive_run, P.early_return])
def test_break_and_return_on_per_example_conditions(fn):
    xs = normal(9, 5) + 0.5
    np.testing.assert_allclose(tl.vmap(fn)(xs), [fn(x) for x in xs], rtol=1e-14)
    g = tl.grad(fn)
    np.testing.assert_allclose(tl.vmap(g)(xs), np.stack([g(x) for x in xs]), rtol=1e-12, atol=1e-12)


def test_float32_stays_float32_through_loops_and_branches():
    def f(x, flag):
        s = 0.0
        for i in range(3):
            s = s + x[i] * 2.0
        if flag > 0:
            y = 0.0
        else:
            y = s
        if s > 0:
            z = 1.0
        else:
            z = s * 3.0
        return s + y + z
    xs = normal(5, 3).astype(np.float32)
    for flag in (np.float32(1.0), np.float32(-1.0)):
        got = tl.vmap(f, in_axes=(0, None))(xs, flag)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, [f(x, flag) for x in xs])
    g = tl.grad(f)
    got = tl.vmap(g, in_axes=(0, None))(xs, np.float32(-1.0))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.stack([g(x, np.float32(-1.0)) for x in xs]))


def test_reverse_mode_through_the_select_of_a_batched_if_is_exact():
    """The batched graph of an ``if`` evaluates both branches; differentiating it
    (reverse mode on the batched DXIR) sends the branch not taken an exact zero."""
    from tlaloc._ad.reverse import vjp_graph
    from tlaloc._core.interpreter import eval_graph
    xs = np.array([[1.0, -0.5, 2.0], [-1.0, -2.0, -0.5], [0.5, 0.5, -0.2]])
    v = tl.vmap(P.nan_branch)
    with np.errstate(invalid="ignore"):
        out = v(xs)
    assert np.all(np.isfinite(out))
    batched = v._last["graphs"][0][0]
    vg, _ = vjp_graph(batched)
    _, x_bar = eval_graph(vg, xs, np.ones_like(xs))
    g = tl.grad(_nan_branch_sum)
    want = np.stack([g(x) for x in xs])
    assert np.all(np.isfinite(x_bar))
    np.testing.assert_allclose(x_bar, want, rtol=1e-14)


def _nan_branch_sum(x):
    return P.nan_branch(x).sum()
