"""Issue 14, part 1: calls whose result is not a function of the arguments run at call time.

A NumPy random draw inside a differentiated function must be made at every
call, in program order, exactly as plain NumPy makes it: the values are
checked against running ``f`` itself with an identically seeded generator,
and the gradients against autograd. Every build-time vs call-time difference
has a negative control (what a frozen value would give).
"""
import random
import time

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import tlaloc as tl

RS = np.random.RandomState(0)


def noisy(x):
    return np.sum(RS.randn(3) * x ** 2)


def test_fresh_draw_per_call_matches_numpy_and_autograd():
    RS.seed(3)
    g = tl.value_and_grad(noisy)
    x = np.array([0.5, -1.0, 2.0])
    got = [g(x) for _ in range(3)]
    ref_rs = np.random.RandomState(3)
    for value, grad in got:
        eps = ref_rs.randn(3)
        np.testing.assert_array_equal(value, np.sum(eps * x ** 2))      # the value of f itself
        np.testing.assert_allclose(grad, autograd.grad(lambda z: anp.sum(eps * z ** 2))(x), rtol=1e-12)
    # negative control: the draws really differ between calls (a frozen draw repeats)
    assert not np.array_equal(got[0][1], got[1][1])


def pytree_draw(p):
    return np.sum(RS.randn(2) * p["w"])


def test_a_pytree_argument_draws_once_per_call():
    RS.seed(5)
    g = tl.grad(pytree_draw)
    a, b = g({"w": np.ones(2)})["w"], g({"w": np.ones(2)})["w"]
    ref = np.random.RandomState(5)
    np.testing.assert_array_equal(a, ref.randn(2))
    np.testing.assert_array_equal(b, ref.randn(2))


def seeded_inside(x, n):
    rs = np.random.RandomState(7)
    eps = rs.randn(n, *x.shape)
    return np.sum(np.mean(eps, axis=0) * np.sin(x)) + np.sum(rs.normal(size=x.shape) * x)


def test_generator_made_inside_and_sizes_from_arguments():
    x = np.array([0.1, 0.2, 0.3, 0.4])
    g = tl.grad(seeded_inside)
    r = np.random.RandomState(7)
    eps, nrm = r.randn(5, 4), r.normal(size=4)
    want = np.mean(eps, axis=0) * np.cos(x) + nrm
    np.testing.assert_allclose(g(x, 5), want, rtol=1e-13)
    np.testing.assert_allclose(g(x, 5), want, rtol=1e-13)       # a fresh generator each call: same draws
    r = np.random.RandomState(7)
    np.testing.assert_allclose(g(x, 3), np.mean(r.randn(3, 4), 0) * np.cos(x) + r.normal(size=4), rtol=1e-13)


def generator_api(x):
    rng = np.random.default_rng(11)
    return np.sum(rng.standard_normal(x.shape) * x) + np.sum(rng.uniform(size=x.shape) * x ** 2)


def test_generator_api():
    x = np.array([1.0, 2.0])
    r = np.random.default_rng(11)
    a, b = r.standard_normal(2), r.uniform(size=2)
    np.testing.assert_allclose(tl.grad(generator_api)(x), a + 2 * b * x, rtol=1e-14)


def global_state(x):
    return np.sum(np.random.randn(*x.shape) * x)


def test_module_level_np_random_uses_the_global_state_at_call_time():
    g = tl.grad(global_state)
    np.random.seed(1)
    a = g(np.ones(3))
    np.random.seed(1)
    np.testing.assert_array_equal(a, np.random.randn(3))
    b = g(np.ones(3))                             # continues the global stream, as plain NumPy does
    np.random.seed(1)
    np.random.randn(3)
    np.testing.assert_array_equal(b, np.random.randn(3))


def draws_in_a_static_loop(x):
    s = 0.0
    for k in range(3):
        s = s + np.sum(RS.randn(*x.shape) * x) * (k + 1)
    return s


def test_draws_in_a_static_loop_are_made_in_order():
    RS.seed(2)
    got = tl.grad(draws_in_a_static_loop)(np.ones(2))
    r = np.random.RandomState(2)
    np.testing.assert_allclose(got, sum(r.randn(2) * (k + 1) for k in range(3)), rtol=1e-14)


def cubic_noise(z):
    return np.sum(RS.randn(2) * z ** 3)


def sum_of_grad(x):
    return np.sum(tl.grad(cubic_noise)(x))


def test_second_order_draws_at_call_time():
    g2 = tl.grad(sum_of_grad)
    x = np.array([1.0, 2.0])
    RS.seed(4)
    a, b = g2(x), g2(x)
    r = np.random.RandomState(4)
    np.testing.assert_allclose(a, 6 * r.randn(2) * x, rtol=1e-13)     # d/dx sum(3 e x^2) = 6 e x
    np.testing.assert_allclose(b, 6 * r.randn(2) * x, rtol=1e-13)


def clocked(x):
    return x * time.perf_counter()


def test_python_random_and_time_run_at_call_time():
    g = tl.grad(clocked)
    before = time.perf_counter()
    a = g(1.0)
    b = g(1.0)
    assert before < a < b          # read at each call (a clock frozen at build time is < before, and repeats)

    def pyrandom(x):
        return x * random.random()
    random.seed(0)
    a = tl.grad(pyrandom)(1.0)
    random.seed(0)
    assert a == random.random()


SCALE = 2.0
SIZES = [1.0, 2.0]


def reads_globals(x):
    return np.sum(x ** 2) * SCALE + x[0] * SIZES[-1]


def test_a_changed_global_is_read_again():
    global SCALE
    g = tl.grad(reads_globals)
    x = np.array([1.0, 3.0])
    np.testing.assert_array_equal(g(x), [6.0, 12.0])
    SCALE = 5.0
    try:
        np.testing.assert_array_equal(g(x), [12.0, 30.0])           # frozen: [6, 12]
        SIZES.append(7.0)                                             # a mutated list read by the code
        np.testing.assert_array_equal(g(x), [17.0, 30.0])
    finally:
        SCALE = 2.0
        del SIZES[2:]
    np.testing.assert_array_equal(g(x), [6.0, 12.0])


def draw_in_array_branch(x):
    if np.sum(x) > 0:
        return np.sum(RS.randn(2) * x)
    return np.sum(x)


def draw_of_computed(x):
    return np.sum(RS.normal(np.sin(x), 1.0))


def jitted_draw(x):
    return np.sum(RS.randn(2) * x)


def _loc(fn, line_offset):
    return f"{__file__}:{fn.__code__.co_firstlineno + line_offset}:"


def test_draw_inside_a_branch_on_an_array_is_refused_at_the_users_line():
    with pytest.raises(tl.FenceError, match="inside an `if` or loop on an array value") as e:
        tl.grad(draw_in_array_branch)
    assert _loc(draw_in_array_branch, 2) in str(e.value)


def test_draw_of_a_computed_array_is_refused_at_the_users_line():
    with pytest.raises(tl.FenceError, match="standard_normal") as e:
        tl.grad(draw_of_computed)(np.ones(2))      # refused once the argument is known to be an array
    assert _loc(draw_of_computed, 1) in str(e.value)


def test_jit_refuses_a_draw_by_name_and_points_to_tlaloc_random():
    RS.seed(0)
    before = RS.randn(1)
    RS.seed(0)
    for f in (tl.jit(jitted_draw), tl.jit(tl.grad(jitted_draw))):
        with pytest.raises(tl.FenceError, match="RandomState.randn.*tlaloc.random") as e:
            f(np.ones(2))
        assert _loc(jitted_draw, 1) in str(e.value)
    np.testing.assert_array_equal(RS.randn(1), before)         # nothing was drawn while refusing


def test_vmap_refuses_a_draw_by_name_without_drawing():
    RS.seed(0)
    before = RS.randn(1)
    RS.seed(0)
    with pytest.raises(tl.FenceError, match="RandomState.randn.*vmap") as e:
        tl.vmap(jitted_draw)(np.ones((3, 2)))
    assert _loc(jitted_draw, 1) in str(e.value)
    np.testing.assert_array_equal(RS.randn(1), before)


def test_jvp_and_vjp_draw_at_each_call():
    RS.seed(6)
    outs = [tl.jvp(jitted_draw, (np.ones(2),), (np.ones(2),))[1] for _ in range(2)]
    outs += [tl.vjp(jitted_draw, np.ones(2))[0] for _ in range(2)]
    r = np.random.RandomState(6)
    np.testing.assert_allclose(outs, [np.sum(r.randn(2)) for _ in range(4)], rtol=1e-14)


def weight_samples(mean, n):
    samples = RS.randn(n, len(mean)) + mean
    num = len(samples)                      # the draw's shape, known when built for these arguments
    return np.sum(samples.reshape(num, -1) ** 2) / num


def test_the_shape_of_a_draw_is_known_to_the_code_and_the_draw_is_made_once():
    mean = np.array([0.5, -1.0])
    RS.seed(9)
    got = tl.grad(weight_samples)(mean, 3)
    r = np.random.RandomState(9)
    np.testing.assert_allclose(got, 2 * np.mean(r.randn(3, 2) + mean, axis=0), rtol=1e-13)
    RS.seed(9)
    tl.grad(weight_samples)(mean, 3)
    np.testing.assert_array_equal(RS.randn(1), np.random.RandomState(9).randn(7)[6:])   # 6 drawn, not 12
