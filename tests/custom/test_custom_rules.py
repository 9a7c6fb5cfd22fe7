"""custom_vjp / custom_jvp / custom_vjp_jvp against JAX's custom rules in float64.

Every derivative is compared with JAX running the same rule (``jax.custom_vjp``
/ ``jax.custom_jvp``), and the rule-wins cases with a negative control (the
plain function's true derivative differs).
"""
import inspect
import os

import jax
import numpy as np
import pytest

import tlaloc as tl

from . import rules as R

RTOL, ATOL = 1e-11, 1e-12
X = np.array([0.3, -0.7, 1.1])
W = np.array([1.5, 0.4, -0.8])


_COMPILED: dict = {}


def _compiled(transform, fn, **kw):
    """``jax.jit(transform(fn))``, compiled once per test session (JAX oracles dominate the run time)."""
    key = (transform, fn, tuple(sorted(kw.items())))
    if key not in _COMPILED:
        _COMPILED[key] = jax.jit(transform(fn, **kw))
    return _COMPILED[key]


def close(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb), (a, b)
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=RTOL, atol=ATOL)


def _vjp_at(f, args, ct):
    out, pullback = jax.vjp(f, *args)
    return out, pullback(ct)


# -- the rule wins --------------------------------------------------------------------------------

def test_rule_wins_over_the_real_derivative():
    g = tl.grad(R.sum_clipped_square)(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(g, [3.0, 3.0, 3.0])
    # negative control: the same function without the rule has derivative 2x
    np.testing.assert_array_equal(tl.grad(R.sum_plain_square)(np.array([1.0, 2.0, 3.0])), [2.0, 4.0, 6.0])


def test_grad_of_the_custom_function_itself_and_eager_call():
    out, pullback = tl.vjp(R.clipped_square, np.array([1.0, 2.0]))
    np.testing.assert_array_equal(out, [1.0, 4.0])          # eager value is fun's
    np.testing.assert_array_equal(pullback(np.array([1.0, -2.0]))[0], [3.0, -6.0])
    np.testing.assert_array_equal(R.clipped_square(np.array([3.0])), [9.0])


def test_one_coarsened_node_and_readable_source():
    graph = tl.make_graph(R.sum_clipped_square)
    assert [n.prim.name for n in R.clipped_square.__tlaloc_lower__(None, None).graph.nodes] == ["custom_vjp_call"]
    names = [n.prim.name for n in graph.nodes]
    assert names == ["custom_vjp_call", "reduce_sum"]
    node = graph.nodes[0]
    assert {k for k, v in node.params.items() if isinstance(v, tl.Graph)} == {"fun", "fwd", "bwd"}
    src = tl.source(tl.grad(R.sum_clipped_square))
    assert "custom_vjp_rule: clipped_square_bwd" in src
    assert "return (u * 3.0,)" in src                       # the user's bwd line, inline
    assert "lax.custom" not in src                          # plain Python, no opaque call


# -- reverse rules vs JAX (each oracle is one compiled JAX function) ------------------------------

@jax.jit
def _softplus_refs(x, w, ct):
    v, g = jax.value_and_grad(R.softplus_loss_jax, argnums=(0, 1))(x, w)
    out, bar = _vjp_at(R.softplus_jax, (3 * x,), ct)
    return v, g, out, bar, jax.jacrev(R.softplus_jax)(x)


def test_custom_vjp_grad_vjp_value_and_grad_jacrev():
    ct = np.array([0.2, -1.0, 0.7])
    jv, jg, jout, jbar, jjac = _softplus_refs(X, W, ct)
    close(tl.grad(R.softplus_loss, argnums=(0, 1))(X, W), jg)
    v, g = tl.value_and_grad(R.softplus_loss)(X, W)
    close(v, jv)
    close(g, jg[0])
    out, pullback = tl.vjp(R.softplus, X * 3)
    close(out, jout)
    close(pullback(ct), jbar)
    close(tl.jacrev(R.softplus)(X), jjac)


@jax.jit
def _xsin_refs(x, t):
    return (jax.jvp(R.xsin_jax, (x,), (t,)), jax.jacfwd(R.xsin_jax)(x),
            jax.grad(R.xsin_loss_jax)(x), jax.hessian(R.xsin_loss_jax)(x))


def test_custom_jvp_in_forward_and_reverse_modes():
    t = np.array([1.0, -2.0, 0.5])
    (jout, jdot), jjac, jg, jh = _xsin_refs(X, t)
    out, dot = tl.jvp(R.xsin, (X,), (t,))
    close(out, jout)
    close(dot, jdot)
    close(tl.jacfwd(R.xsin)(X), jjac)
    # reverse mode transposes the forward rule (as JAX does)
    close(tl.grad(R.xsin_loss)(X), jg)
    close(tl.hessian(R.xsin_loss)(X), jh)


def test_custom_jvp_rule_wins_in_forward_mode():
    # a forward rule that is deliberately not the derivative
    dot = tl.jvp(R.tripled_square, (X,), (np.ones(3),))[1]
    np.testing.assert_array_equal(dot, [3.0, 3.0, 3.0])
    assert not np.allclose(dot, 2 * X)                       # negative control


@jax.jit
def _scaled_exp_refs(x, a):
    return (jax.grad(R.scaled_exp_loss_jax, argnums=(0, 1))(x, a),
            jax.hessian(R.scaled_exp_loss_jax)(x, a))


def test_custom_vjp_jvp_in_every_mode():
    a = np.float64(0.7)
    jg, jh = _scaled_exp_refs(X, a)
    close(tl.grad(R.scaled_exp_loss, argnums=(0, 1))(X, a), jg)
    # hessian = jacfwd(grad): forward mode over the reverse rule's code, as in JAX
    close(tl.hessian(R.scaled_exp_loss)(X, a), jh)
    t = np.array([0.3, 0.1, -0.2])
    out, dot = tl.jvp(R.scaled_exp, (X, a), (t, np.float64(0.5)))
    y = np.exp(a * X)
    close(out, y)
    close(dot, y * (a * t + 0.5 * X))                        # the jvp rule (here the true derivative)


# -- inside loops and branches ----------------------------------------------------------------------

@pytest.mark.parametrize("fn,twin,args", [
    (R.in_for_loop, R.in_for_loop_jax, (X, W)),
    (R.in_branch, R.in_branch_jax, (X, W)),
    (R.in_branch, R.in_branch_jax, (X, -W)),
    (R.both_in_loop, R.both_in_loop_jax, (X, np.float64(0.7))),
], ids=["for", "if-true", "if-false", "both-for"])
def test_rules_inside_control_flow(fn, twin, args):
    jv, jg = _compiled(jax.value_and_grad, twin, argnums=(0, 1))(*args)
    close(tl.grad(fn, argnums=(0, 1))(*args), jg)
    ct = 1.3
    out, pullback = tl.vjp(fn, *args)
    close(out, jv)
    close(pullback(np.float64(ct)), [ct * np.asarray(g) for g in jg])


def test_forward_rule_inside_while_loop():
    x = np.array([0.5, 1.0, 1.5])
    t = np.array([1.0, 0.0, -1.0])
    z, trips = x, 0                       # the trip count, for a reverse-mode reference JAX can build
    while z.sum() < 20.0:
        z, trips = z * np.sin(z) * 0.1 + z * 1.5, trips + 1
    assert trips > 1

    def unrolled(y):
        for _ in range(trips):
            y = R.xsin_jax(y) * 0.1 + y * 1.5
        return (y * y).sum()
    jdot, jg = jax.jit(lambda x, t: (jax.jvp(R.in_while_loop_jax, (x,), (t,))[1], jax.grad(unrolled)(x)))(x, t)
    close(tl.jvp(R.in_while_loop, (x,), (t,))[1], jdot)
    close(tl.grad(R.in_while_loop)(x), jg)


@pytest.mark.parametrize("a", [0.7, -0.7], ids=["if-true", "if-false"])
def test_hessian_with_forward_rules_in_branches(a):
    a = np.float64(a)
    close(tl.hessian(R.fwd_rules_in_branch)(X, a), _compiled(jax.hessian, R.fwd_rules_in_branch_jax)(X, a))


def test_reverse_over_reverse_uses_the_rule_code():
    d = tl.grad(R.softplus_loss)

    def outer(x, w):
        return (d(x, w) * d(x, w)).sum()
    jd = jax.grad(R.softplus_loss_jax)
    close(tl.grad(outer)(X, W), jax.jit(jax.grad(lambda x, w: (jd(x, w) ** 2).sum()))(X, W))


# -- refusal of the mode a rule does not supply -------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: tl.jvp(R.softplus),
    lambda: tl.jacfwd(R.softplus_loss),
    lambda: tl.hessian(R.softplus_loss),
    lambda: tl.hessian(R.in_for_loop),
    lambda: tl.hessian(R.in_branch),
], ids=["jvp", "jacfwd", "hessian", "hessian-loop", "hessian-branch"])
def test_forward_mode_over_vjp_only_rule_is_refused_by_name(make):
    with pytest.raises(tl.NoRuleError) as info:
        make()                                   # refused when the transform is applied
    msg = str(info.value)
    assert "custom_vjp function `softplus`" in msg
    assert "defjvp" in msg and "forward mode" in msg
    assert f"{R.__file__}:" in msg                           # where the rule is defined


def test_forward_mode_passes_a_rule_no_tangent_reaches():
    def f(x):
        return R.softplus(tl.stop_gradient(x)).sum() * x.sum()
    _, dot = tl.jvp(f, (X,), (np.ones(3),))
    close(dot, R.softplus(X).sum() * 3.0)


def _marker(marker):
    lines = inspect.getsource(R).splitlines()
    hits = [i + 1 for i, l in enumerate(lines) if l.rstrip().endswith(f"# REFUSE: {marker}")]
    assert len(hits) == 1
    return hits[0]


@pytest.mark.parametrize("fn,marker,words", [
    (R.uses_no_rule, "no rule", ["no_rule", "defvjp"]),
    (R.uses_bad_fwd, "bad fwd", ["fwd rule of `bad_fwd`", "(out, residuals)"]),
    (R.uses_bad_shape, "bad shape", ["bwd rule of `scale_rows`", "F64[batch, n]", "F64[n]"]),
])
def test_malformed_rules_refused_at_the_call(fn, marker, words):
    with pytest.raises(tl.FenceError) as info:
        tl.grad(fn)
    err = info.value
    assert os.path.samefile(err.filename, R.__file__)
    assert err.lineno == _marker(marker)
    for w in words:
        assert w in str(err), (w, str(err))


# -- edge cases --------------------------------------------------------------------------------------------

def test_closed_over_arrays_are_constants_of_the_rule():
    def f(x):
        return R.weighted(x).sum()
    close(tl.grad(f)(X), R.W)


def test_none_cotangent_means_zero():
    def f(x, y):
        return R.only_first(x, y).sum()
    gx, gy = tl.grad(f, argnums=(0, 1))(X, W)
    close(gx, W)
    np.testing.assert_array_equal(gy, np.zeros(3))


def test_stop_gradient_in_grad_jvp_and_hessian():
    f, twin = R.stop_gradient_program, R.stop_gradient_program_jax
    t = np.array([1.0, 2.0, -1.0])
    jg, jdot, jh = jax.jit(lambda x, t: (jax.grad(twin)(x), jax.jvp(twin, (x,), (t,))[1],
                                         jax.hessian(twin)(x)))(X, t)
    close(tl.grad(f)(X), jg)
    close(tl.grad(f)(X), X * X + 1.0)                        # x² treated as a constant
    close(tl.jvp(f, (X,), (t,))[1], jdot)
    close(tl.hessian(f)(X), jh)
    np.testing.assert_array_equal(tl.hessian(f)(X), np.zeros((3, 3)))


# -- other passes ------------------------------------------------------------------------------------------

def test_vmap_keeps_the_rule():
    xs = np.stack([X, 2 * X, -X])
    got = tl.vmap(R.sum_clipped_square)(xs)
    close(got, (xs * xs).sum(axis=1))
    close(tl.vmap(tl.grad(R.softplus_loss), in_axes=(0, None))(xs, W),
          jax.jit(jax.vmap(jax.grad(R.softplus_loss_jax), in_axes=(0, None)))(xs, W))


def test_batched_rule_is_used_when_the_batched_graph_is_differentiated():
    from tlaloc._ad.batching import batch_graph
    from tlaloc._ad.reverse import vjp_graph
    from tlaloc._core.aval import AbstractValue
    g = R.clipped_square.__tlaloc_lower__(None, None).graph
    f64 = np.dtype(np.float64)
    bg, dims = batch_graph(g, [0], [AbstractValue(f64, (2, 3))], 2)
    assert dims == [0] and bg.nodes[0].prim.name == "custom_vjp_call"
    vg, _ = vjp_graph(bg)
    xs = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    out, bar = tl.eval_graph(vg, xs, np.ones((2, 3)))
    np.testing.assert_array_equal(out, xs * xs)
    np.testing.assert_array_equal(bar, np.full((2, 3), 3.0))          # the rule, per example
