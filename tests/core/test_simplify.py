"""The clean-up passes on generated derivatives (``_core/simplify.py``): CSE and
pruning of loop carries, and the ``del`` of dead temporaries in rendered code.

The derivative must keep its values (checked against hand-written gradients and
the reference interpreter) while the repeated and dead work disappears from the
source."""
import numpy as np

import tlaloc as tl
from tlaloc._core.control import for_range_p


def euler(c, v0, g):
    v = v0
    p = v0 * 0.0
    for t in range(5):
        a = g - c * v * v
        p = p + 0.1 * v
        v = v + 0.1 * a
    d = p - 1.0
    return np.sum(d * d)


def euler_grad_by_hand(c, v0, g):
    vs, v, p = [], v0, v0 * 0.0
    for t in range(5):
        vs.append(v)
        p = p + 0.1 * v
        v = v + 0.1 * (g - c * v * v)
    p_bar, v_bar, c_bar = 2.0 * (p - 1.0), np.zeros_like(v0), 0.0
    for t in reversed(range(5)):
        v = vs[t]
        a_bar = 0.1 * v_bar
        c_bar = c_bar - np.sum(a_bar * v * v)
        v_bar = v_bar + 0.1 * p_bar - 2.0 * c * v * a_bar
    return c_bar, v_bar


def _graph(g):
    return next(iter(g._entries.values()))["graphs"][0][0]


def test_unread_cotangent_carry_is_dropped_and_values_kept():
    c, v0, g = np.array(0.3), np.array([1.0, -2.0, 0.5]), np.array(-1.0)
    dg = tl.grad(euler, argnums=(0, 1))
    loops = [n for n in _graph(dg).nodes if n.prim is for_range_p]
    assert len(loops) == 2
    backward = loops[1]
    assert backward.params["n_carry"] == 3        # p_bar, v_bar, c_bar: not g's cotangent
    assert "g_bar" not in tl.source(dg)
    got = dg(c, v0, g)
    want = euler_grad_by_hand(c, v0, g)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_repeated_products_are_computed_once():
    def f(x):
        d = x - 1.0
        return np.sum(d * d)
    src = tl.source(tl.grad(f))
    products = [line for line in src.splitlines() if "safe_mul(" in line or "multiply(" in line]
    assert len(products) == 2, src                # d * d forward, one safe_mul backward
    x = np.array([0.5, 2.0, -1.0])
    np.testing.assert_array_equal(tl.grad(f)(x), 2.0 * (x - 1.0))


def test_rendered_code_frees_dead_temporaries_and_runs_standalone():
    def mlp(w1, w2, x):
        h = np.tanh(x @ w1)
        return np.mean((h @ w2) ** 2)
    dg = tl.grad(mlp, argnums=(0, 1))
    src = tl.source(dg)
    assert "    del " in src
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), rng.standard_normal((5, 3)))
    ns = {}
    exec(compile(src, "<standalone>", "exec"), ns)
    standalone = ns[dg.__name__](*args)
    for a, b in zip(standalone, dg(*args)):
        assert a.tobytes() == b.tobytes()
