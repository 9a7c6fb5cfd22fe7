"""Second order over the whole reverse-mode case table (tests/ad/cases.py).

For every grad-like row (``grad``, ``value_and_grad``; every ``argnums`` form,
pytree parameters included) at its first argument point:

* reverse over reverse: ``tl.vjp(tl.grad(f, argnums), *args)`` pulled back along a
  random cotangent, against ``jax.vjp(jax.grad(twin, argnums), *args)``;
* forward over reverse: ``tl.jvp(tl.grad(f, argnums), args, tangents)`` against
  ``jax.jvp(jax.grad(twin, argnums), ...)``, and (where the row is smooth there)
  against central differences of the first-order gradient, an oracle with no
  second-order rule in it.

JAX float64, rtol 1e-9 and atol 1e-9 · max(1, max|reference|); differences
rtol 1e-5. Integer arguments (indices) get no tangent or cotangent (JAX gives them
``float0``). The rows with matmul, batched matmul, einsum-style contractions and
every control-flow construct are here, so a wrong transpose rule of a contraction
(whose first-order check passes) shows up as a wrong Hessian-vector product.
"""
from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl

from tests.ad.cases import CASES
from tests.jit.jax_twin import call

jax.config.update("jax_enable_x64", True)
RTOL = 1e-9
FD_RTOL, FD_STEP = 1e-5, 1e-6
POINTS = 1          # argument points per row (the first-order tables sweep them all)

ROWS = [c for c in CASES if c.mode in ("grad", "value_and_grad")]

def _params():
    return [pytest.param(c, id=c.name) for c in ROWS]


def _flat(tree):
    return jax.tree_util.tree_flatten(tree)


def _random_like(tree, rng):
    leaves, t = _flat(tree)
    return jax.tree_util.tree_unflatten(
        t, [rng.standard_normal(np.shape(v)) if np.asarray(v).dtype.kind == "f" else np.zeros(np.shape(v),
                                                                                              np.asarray(v).dtype)
            for v in leaves])


def _float_mask(args):
    return [np.asarray(v).dtype.kind == "f" for v in _flat(args)[0]]


def _split(args):
    """The float leaves of ``args`` (as JAX arrays), the others, and how to merge them back."""
    leaves, tree = _flat(args)
    mask = _float_mask(args)

    def merge(floats, others):
        it_f, it_o = iter(floats), iter(others)
        return jax.tree_util.tree_unflatten(tree, [next(it_f) if m else next(it_o) for m in mask])
    floats = [jnp.asarray(v) for v, m in zip(leaves, mask) if m]
    others = [jnp.asarray(v) for v, m in zip(leaves, mask) if not m]
    return floats, others, merge


def _jax_second(case, args, kind):
    """JAX's reverse-over-reverse (``kind="vjp"``: ``(floats, others, v) -> cotangents``) or
    forward-over-reverse (``"jvp"``: ``(floats, others, tangents) -> (grad, its tangent)``) of
    the row's twin, as a function of the float leaves (integer leaves held fixed); through
    ``jax.jit`` where the twin traces, eagerly where it branches on values."""
    floats, others, merge = _split(args)
    grad = jax.grad(case.twin, argnums=case.argnums)

    def make():
        def of_floats(ot):
            return lambda *fl: grad(*merge(fl, ot))
        if kind == "vjp":
            return lambda fl, ot, v: jax.vjp(of_floats(ot), *fl)[1](v)
        return lambda fl, ot, t: jax.jvp(of_floats(ot), tuple(fl), tuple(t))
    return lambda x: call((kind, case.name, tuple(_float_mask(args))), make, floats, others, x)


def _close(got, want, what, rtol=RTOL):
    g, w = _flat(got)[0], _flat(want)[0]
    assert len(g) == len(w), f"{what}: {len(g)} leaves, reference {len(w)}"
    for k, (a, b) in enumerate(zip(g, w)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        assert a.shape == b.shape, f"{what}: leaf {k} shape {a.shape}, reference {b.shape}"
        assert np.isfinite(a).all() and np.isfinite(b).all(), f"{what}: leaf {k} not finite"
        scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale, err_msg=f"{what}: leaf {k}")


def _float_leaves(tree, mask):
    return [v for v, m in zip(_flat(tree)[0], mask) if m]


@pytest.mark.parametrize("case", _params())
def test_reverse_over_reverse_matches_jax(case):
    rng = np.random.default_rng(7)
    g = tl.grad(case.fn, argnums=case.argnums)
    for i, args in enumerate(case.args_list()[:POINTS]):
        mask = _float_mask(args)
        first = g(*copy.deepcopy(args))
        v = _random_like(first, rng)
        _, pullback = tl.vjp(g, *copy.deepcopy(args))
        got = pullback(v)
        want = _jax_second(case, args, "vjp")(jax.tree_util.tree_map(jnp.asarray, v))
        _close(_float_leaves(got, mask), list(want), f"{case.name}[point {i}] vjp(grad)")


@pytest.mark.parametrize("case", _params())
def test_forward_over_reverse_matches_jax_and_differences(case):
    rng = np.random.default_rng(8)
    g = tl.grad(case.fn, argnums=case.argnums)
    for i, args in enumerate(case.args_list()[:POINTS]):
        mask = _float_mask(args)
        tangents = _random_like(args, rng)
        got_g, got_dot = tl.jvp(g, tuple(copy.deepcopy(args)), tuple(tangents))
        dots = [jnp.asarray(t) for t in _float_leaves(tangents, mask)]
        want_g, want_dot = _jax_second(case, args, "jvp")(dots)
        _close(got_g, want_g, f"{case.name}[point {i}] grad")
        _close(got_dot, want_dot, f"{case.name}[point {i}] jvp(grad)")
        if case.fd:
            plus, minus = [], []
            for sign, out in ((1.0, plus), (-1.0, minus)):
                moved = jax.tree_util.tree_map(
                    lambda a, t: a + sign * FD_STEP * t if np.asarray(a).dtype.kind == "f" else a, args, tangents)
                out.append(g(*moved))
            fd = jax.tree_util.tree_map(lambda p, m: (np.asarray(p) - np.asarray(m)) / (2 * FD_STEP),
                                        plus[0], minus[0])
            _close(got_dot, fd, f"{case.name}[point {i}] jvp(grad) vs differences", rtol=FD_RTOL)


def test_the_table_covers_contractions_and_control_flow():
    names = {c.name for c in ROWS}
    assert {"matmul_1d", "matmul_batched", "tnp_library", "while_value", "for_break", "if_elif_else",
            "nested_closure", "setitem_loop", "dict_params_and_x", "rnn"} <= names, sorted(names)


def test_negative_control_first_order_is_not_second_order():
    case = next(c for c in ROWS if c.name == "matmul_batched")
    args = case.args_list()[0]
    _, want_dot = _jax_second(case, args, "jvp")([jnp.ones_like(a) for a in args])
    with pytest.raises(AssertionError):
        _close(tl.grad(case.fn, argnums=case.argnums)(*args), want_dot, "control")
