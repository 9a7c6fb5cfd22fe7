"""Reverse mode through a data-dependent ``while`` under tl.jit with no declared bound.

JAX refuses reverse mode through ``lax.while_loop``; tl.jit keeps the residuals in
stacks that start at ``START_ROWS`` trips and grow (twice the rows, compile, run
again) when a run fills them (``tlaloc._jit.residuals``). The oracle is JAX in
float64 on the same loop written as a ``fori_loop`` of the trip count measured on
the host (JAX differentiates that), and central differences.
"""
import logging

import numpy as np
import pytest

import tlaloc as tl
from tlaloc._jit import residuals

from tests.ad.programs_while import f_while_value as doubling

from . import programs as P

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


# -- programs, their trip counts, and their JAX twins with that trip count ---------------------

def doubling_trips(x):
    s, n = x[0] * x[1], 0
    while s < 10.0:
        s, n = s * 2.0 + x[1] * s * 0.1, n + 1
    return n


def doubling_jax(x, n):
    s = jax.lax.fori_loop(0, n, lambda i, s: s * 2.0 + x[1] * s * 0.1, x[0] * x[1])
    return s + n


def compound(x, r):
    # an array carry, a nonlinear update and a few hundred trips: the stacks grow 32 -> 512
    s = x
    while np.sum(s) < 100.0:
        s = s * (1.0 + r) + 0.01 * np.tanh(x) * s[0]
    return np.sum(s * s)


def compound_trips(x, r):
    s, n = x.copy(), 0
    while np.sum(s) < 100.0:
        s, n = s * (1.0 + r) + 0.01 * np.tanh(x) * s[0], n + 1
    return n


def compound_jax(x, r, n):
    s = jax.lax.fori_loop(0, n, lambda i, s: s * (1.0 + r) + 0.01 * jnp.tanh(x) * s[0], x)
    return jnp.sum(s * s)


def central(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


DOUBLING_POINTS = [np.array(v) for v in ([1.3, 0.8], [0.4, 2.1], [3.0, 4.0], [1e-12, 1.0])]


@pytest.mark.parametrize("backend", ["xla", "iree"])
def test_grad_of_a_value_dependent_while_equals_jax(backend):
    if backend == "iree":
        pytest.importorskip("iree.runtime", reason="backend='iree' needs iree-base-runtime")
    g = tl.jit(tl.grad(doubling), backend=backend)
    for x in DOUBLING_POINTS if backend == "xla" else DOUBLING_POINTS[:3]:
        n = doubling_trips(x)
        want = np.asarray(jax.grad(doubling_jax)(jnp.asarray(x), n))
        np.testing.assert_allclose(np.asarray(g(x)), want, rtol=1e-12, err_msg=f"x={x}, {n} trips")
    # away from the points where the trip count changes, the loop is smooth: central differences
    x = DOUBLING_POINTS[0]
    np.testing.assert_allclose(np.asarray(g(x)), central(doubling, x), rtol=1e-6)


def test_float32_grad_through_jit_equals_jax_float64_to_float32_accuracy():
    x = np.array([1.3, 0.8])
    got = np.asarray(tl.jit(tl.grad(doubling))(x.astype(np.float32)))
    assert got.dtype == np.float32
    want = np.asarray(jax.grad(doubling_jax)(jnp.asarray(x), doubling_trips(x)))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_stacks_grow_until_the_loop_fits_and_stay_grown(caplog):
    x, r = np.array([0.5, 0.3, 0.2]), np.array(0.01)
    n = compound_trips(x, r)
    assert 256 < n <= 512, n                      # four doublings past START_ROWS
    g = tl.jit(tl.grad(compound, argnums=(0, 1)))
    with caplog.at_level(logging.DEBUG, logger="tlaloc.jit"):
        gx, gr = g(x, r)
    grown = [m for m in caplog.messages if "grown to" in m]
    assert [m.split("grown to ")[1].split()[0] for m in grown] == ["64", "128", "256", "512"], grown
    wx, wr = jax.grad(compound_jax, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(r), n)
    np.testing.assert_allclose(np.asarray(gx), np.asarray(wx), rtol=1e-11)
    np.testing.assert_allclose(np.asarray(gr), np.asarray(wr), rtol=1e-11)
    # negative control: the twin with one trip fewer is far from it (the trip count matters)
    wx1 = jax.grad(compound_jax)(jnp.asarray(x), jnp.asarray(r), n - 1)
    assert not np.allclose(np.asarray(gx), np.asarray(wx1), rtol=1e-6)
    # a second call compiles nothing: the capacity is kept (the hit path)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="tlaloc.jit"):
        gx2, _ = g(x * 1.01, r)
    assert not [m for m in caplog.messages if "compiled" in m], caplog.messages
    wx2 = jax.grad(compound_jax)(jnp.asarray(x * 1.01), jnp.asarray(r), compound_trips(x * 1.01, r))
    np.testing.assert_allclose(np.asarray(gx2), np.asarray(wx2), rtol=1e-11)


def test_value_and_grad_and_the_original_refusal_case():
    x = np.array([1.0, 2.0])
    v, g = tl.jit(tl.value_and_grad(P.while_unbounded_grad))(x)
    n, y = 0, x.copy()
    while (y * y).sum() > 0.5:
        y, n = y * 0.7, n + 1
    np.testing.assert_allclose(np.asarray(v), y.sum(), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g), np.full(2, 0.7 ** n), rtol=1e-12)


def test_a_program_compiled_ahead_of_time_cannot_grow_and_says_so():
    x = np.array([1e-12, 1.0])                     # about 40 trips, past START_ROWS
    assert doubling_trips(x) > residuals.START_ROWS
    compiled = tl.jit(tl.grad(doubling)).lower(x).compile()
    with pytest.raises(tl.TlalocError, match=r"filled its residual stack of 32 trips.*max_trips=N"):
        compiled(x)
    np.testing.assert_allclose(np.asarray(compiled(DOUBLING_POINTS[0])),
                               np.asarray(tl.grad(doubling)(DOUBLING_POINTS[0])), rtol=1e-12)


def test_donated_arguments_are_not_read_twice():
    x = np.array([1e-12, 1.0])
    with pytest.raises(tl.TlalocError, match=r"ran more than 32 trips.*donated arguments"):
        tl.jit(tl.grad(doubling), donate_argnums=(0,))(x)


def test_growth_stops_at_max_rows(monkeypatch):
    monkeypatch.setattr(residuals, "MAX_ROWS", 64)
    x = np.array([1e-30, 1.0])                     # about 100 trips
    with pytest.raises(tl.TlalocError, match=r"ran more than 64 trips, past the 64 .*max_trips=N"):
        tl.jit(tl.grad(doubling))(x)


def test_specializing_outside_tl_jit_still_refuses_by_name():
    from tlaloc._core.aval import AbstractValue
    from tlaloc._core.specialize import specialize
    low = tl.jit(tl.grad(doubling), backend="interpreter")
    low(np.array([1.3, 0.8]))
    src = next(iter(low._sources.values()))       # the DXIR of the gradient, before specialisation
    with pytest.raises(tl.NoRuleError, match="reverse-mode while loop needs a bound"):
        specialize(src.graph, [AbstractValue(np.dtype(np.float64), (2,))])


def test_the_interpreter_keeps_a_python_float_counter_weak():
    # regression (issue 17): `n = n + 1.0` in a while became a float64 NumPy scalar in the
    # interpreter, so `s + n` with float32 `s` was refused (DTypeError) where eager code runs
    x = np.array([1.3, 0.8], np.float32)
    got = tl.jit(doubling, backend="interpreter")(x)
    assert np.asarray(got).dtype == np.float32
    np.testing.assert_allclose(got, doubling(x), rtol=1e-6)


def while_in_for(x):
    # the inner loop runs about 70 trips per row: its residual stacks grow inside a for, so
    # the run-time check that reports a full stack is carried out of the for's region
    t = 0.0
    for i in range(len(x)):
        s = x[i] * x[i] + 0.1
        while s < 100.0:
            s = s * 1.1 + x[i] * 0.01
        t = t + s * x[i]
    return t


def while_in_for_jax(x, trips):
    t = 0.0
    for i, n in enumerate(trips):
        s = jax.lax.fori_loop(0, n, lambda k, s: s * 1.1 + x[i] * 0.01, x[i] * x[i] + 0.1)
        t = t + s * x[i]
    return t


def while_in_for_trips(x):
    out = []
    for v in x:
        s, n = v * v + 0.1, 0
        while s < 100.0:
            s, n = s * 1.1 + v * 0.01, n + 1
        out.append(n)
    return out


@pytest.mark.parametrize("backend", ["xla", "iree"])
def test_a_while_nested_in_a_for_grows_its_stacks(backend):
    if backend == "iree":
        pytest.importorskip("iree.runtime", reason="backend='iree' needs iree-base-runtime")
    x = np.array([0.5, -1.2, 2.0])
    trips = while_in_for_trips(x)
    assert max(trips) > residuals.START_ROWS, trips         # the stacks must grow
    got = np.asarray(tl.jit(tl.grad(while_in_for), backend=backend)(x))
    want = np.asarray(jax.grad(while_in_for_jax)(jnp.asarray(x), trips))
    np.testing.assert_allclose(got, want, rtol=1e-11)


def nested_bounded_overflow(x):
    def cond(c):
        return c[1] < 20.0

    def body(c):
        return (c[0] * 0.5, c[1] + 1.0)
    t = 0.0
    for i in range(2):
        y, n = tl.while_loop(cond, body, (x, 0.0), max_trips=8)
        t = t + y.sum()
    return t


def test_a_declared_bound_overrun_inside_a_for_still_raises():
    # before the checks were carried out of regions, this StableHLO did not verify
    with pytest.raises(tl.TlalocError, match="max_trips=8"):
        tl.jit(nested_bounded_overflow)(np.ones(2))
