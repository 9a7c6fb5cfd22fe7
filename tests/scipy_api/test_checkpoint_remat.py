"""tl.checkpoint: identical gradients with and without it (bitwise in the interpreter where the
operations are the same), under grad, jvp, vmap and jit; every=k segments; policies; refusals."""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import ArgumentError


def step(x, W):
    return np.tanh(W @ x) + 0.5 * x


step_ck = tl.checkpoint(step)
step_dots = tl.checkpoint(step, policy=tl.checkpoint_policies.dots_saveable)


def loss(x, W):
    for i in range(100):
        x = step(x, W)
    return (x * x).sum()


def loss_ck(x, W):
    for i in range(100):
        x = step_ck(x, W)
    return (x * x).sum()


def loss_dots(x, W):
    for i in range(100):
        x = step_dots(x, W)
    return (x * x).sum()


rng = np.random.default_rng(0)
x0 = rng.standard_normal(6)
W0 = rng.standard_normal((6, 6)) * 0.3


def _grads(f):
    return tl.grad(f, argnums=(0, 1))(x0, W0)


REF = None


def _ref():
    global REF
    if REF is None:
        REF = _grads(loss)
    return REF


@pytest.mark.parametrize("f", [loss_ck, loss_dots, tl.checkpoint(loss), tl.checkpoint(loss, every=1),
                               tl.checkpoint(loss, policy=tl.checkpoint_policies.everything_saveable)],
                         ids=["step", "step-dots", "whole", "every1", "everything"])
def test_gradients_bitwise_equal(f):
    for g, r in zip(_grads(f), _ref()):
        np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("every", [3, 7, 10, 32, 100, 1000, (30, 7), (50, 10, 3)])
def test_every_k_gradients_equal(every):
    """Segments sum W's cotangent per segment first: equal to rounding (1e-12 relative)."""
    gx, gW = _grads(tl.checkpoint(loss, every=every))
    np.testing.assert_array_equal(gx, _ref()[0])
    np.testing.assert_allclose(gW, _ref()[1], rtol=1e-12, atol=1e-14 * np.abs(_ref()[1]).max())


def test_jit_jvp_vmap():
    gx, gW = tl.jit(tl.grad(loss_ck, argnums=(0, 1)))(x0, W0)
    np.testing.assert_allclose(gx, _ref()[0], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(gW, _ref()[1], rtol=1e-12, atol=1e-15)
    for every in (7, 10, (30, 7)):                 # a tail of 2 iterations, none, two levels
        gx, gW = tl.jit(tl.grad(tl.checkpoint(loss, every=every), argnums=(0, 1)))(x0, W0)
        np.testing.assert_allclose(gx, _ref()[0], rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(gW, _ref()[1], rtol=1e-12, atol=1e-15)
    _, t0 = tl.jvp(loss, (x0, W0), (x0, W0))
    _, t1 = tl.jvp(loss_ck, (x0, W0), (x0, W0))
    assert t0 == t1
    per = tl.vmap(tl.grad(loss_ck), in_axes=(0, None))(np.stack([x0, 2 * x0]), W0)
    np.testing.assert_allclose(per[0], _ref()[0], rtol=1e-13)


def test_residual_stacks_shrink():
    """The checkpointed loop stores fewer per-iteration stacks (the carry only) than the plain one;
    every=10 runs 10 segments."""
    plain = tl.source(tl.grad(loss))
    ck = tl.source(tl.grad(loss_ck))
    seg = tl.source(tl.grad(tl.checkpoint(loss, every=10)))
    assert ck.count("_stack[k") < plain.count("_stack[k")
    assert "for segment in range(0, 10, 1)" in seg and "for j in range(0, 10, 1)" in seg


def test_control_a_wrong_gradient_is_caught():
    """Negative control: a gradient from a different W differs by far more than the tolerances."""
    g = tl.grad(loss, argnums=(0, 1))(x0, W0 * 1.0001)
    assert np.abs(g[1] - _ref()[1]).max() > 1e-9 * np.abs(_ref()[1]).max()


def test_bad_arguments():
    for bad in (0, True, (7, 30), (10, 10), (), 2.5):
        with pytest.raises(ArgumentError, match="every must be a positive int"):
            tl.checkpoint(loss, every=bad)
    with pytest.raises(ArgumentError, match="policy must be callable"):
        tl.checkpoint(loss, policy="dots")
    assert tl.checkpoint(step)(x0, W0).tolist() == step(x0, W0).tolist()


def loss_dynamic(x, W):
    for i in range(len(x) * 10):                   # the trip count is a run-time value here
        x = step(x, W)
    return (x * x).sum()


def test_every_k_with_run_time_bounds():
    """Run-time loop bounds: segments with value bounds (interpreter and generated Python); compiled
    reverse mode refuses them by name."""
    want = tl.grad(loss_dynamic, argnums=(0, 1))(x0, W0)
    got = tl.grad(tl.checkpoint(loss_dynamic, every=7), argnums=(0, 1))(x0, W0)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14 * np.abs(want[1]).max())
    from tlaloc.errors import NoRuleError
    with pytest.raises(NoRuleError, match="trip count is only known at run time"):
        tl.jit(tl.grad(tl.checkpoint(loss_dynamic, every=7)))(x0, W0)


def test_hessian_and_grad_of_grad():
    small = W0[:3, :3]
    x = x0[:3]
    np.testing.assert_allclose(tl.hessian(loss_ck)(x, small), tl.hessian(loss)(x, small), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(tl.grad(grad_sum_ck)(x, small), tl.grad(grad_sum)(x, small), rtol=1e-12, atol=1e-15)


def grad_sum(x, W):
    return tl.grad(loss)(x, W).sum()


def grad_sum_ck(x, W):
    return tl.grad(loss_ck)(x, W).sum()


G = np.linspace(0.1, 1.0, 6)


@tl.checkpoint
def two_outputs(x, y):
    return np.sin(x * G) * y, (x * y).sum()


def uses_two(p):
    a, b = two_outputs(p["x"], p["y"])
    return a.sum() + b


def uses_two_plain(p):
    a, b = np.sin(p["x"] * G) * p["y"], (p["x"] * p["y"]).sum()
    return a.sum() + b


def test_closure_arrays_tuples_and_pytrees():
    p = {"x": x0, "y": np.cos(x0)}
    got, want = tl.grad(uses_two)(p), tl.grad(uses_two_plain)(p)
    for k in p:
        np.testing.assert_array_equal(got[k], want[k])
