"""Python scalars of one example stay weak under batching: a ``for i in range(n)`` index
(an ``int``) or a ``0.0`` accumulator / ``n = n + 1.0`` counter meeting float32 data
stays float32 (NumPy's NEP 50 rule, JAX's weak types) under ``tl.vmap`` and the DXIR
transforms that batch over a basis (``tl.jacfwd``, ``tl.hessian``), eagerly and through
``tl.jit``.

Regression: the loop index was typed as a strong int64 (and the batched accumulator as a
strong float64 array), so ``x[i] * i`` became float64 and ``s + ...`` raised DTypeError
(the float32 rows of the AD table through jit were listed as refusals), or a loop with
per-example bounds silently returned float64. Each result is held to JAX float64 on the
same program and to JAX's float32 result dtype.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl
from tests.ad.programs_while import f_while_value as counter     # n = n + 1.0 next to float32 data

jax.config.update("jax_enable_x64", True)

RTOL = {np.float32: 2e-5, np.float64: 1e-12}


def index_times_float(x):
    s = 0.0
    for i in range(len(x)):
        s = s + np.cos(x[i]) * i
    return s


def j_index_times_float(x):
    s = 0.0
    for i in range(len(x)):
        s = s + jnp.cos(x[i]) * i
    return s


def j_counter(x):         # counter (tests/ad's while_value) with lax.while_loop, which jax.vmap traces
    def body(c):
        s, n = c
        return s * 2.0 + x[1] * s * 0.1, n + 1.0
    s, n = jax.lax.while_loop(lambda c: c[0] < 10.0, body, (x[0] * x[1], 0.0))
    return s + n


def ragged(x, n):
    s = 0.0
    for i in range(n):
        s = s + x[i] * i
    return s


def fori(x):
    return tl.fori_loop(0, 3, lambda i, s: s + x[i] * i, 0.0)


def j_fori(x):
    return jax.lax.fori_loop(0, 3, lambda i, s: s + x[i] * i, 0.0)


XS = np.array([[0.3, 1.2, -0.7], [0.9, 0.5, 2.0]])
CASES = {       # name: (tlaloc transform, JAX transform, argument)
    "vmap_index": (tl.vmap(index_times_float), jax.vmap(j_index_times_float), XS),
    "vmap_counter": (tl.vmap(counter), jax.vmap(j_counter), XS[:, :2] + 1.0),
    "vmap_fori": (tl.vmap(fori), jax.vmap(j_fori), XS),
    "jacfwd_index": (tl.jacfwd(index_times_float), jax.jacfwd(j_index_times_float), XS[0]),
    "hessian_index": (tl.hessian(index_times_float), jax.hessian(j_index_times_float), XS[0]),
    "hessian_counter": (tl.hessian(counter), jax.jacfwd(jax.jacfwd(j_counter)), XS[0, :2] + 1.0),
}


def _check(got, want_fn, x, dtype):
    want = want_fn(jnp.asarray(x.astype(dtype)))
    got = np.asarray(got)
    assert got.dtype == want.dtype == dtype, (got.dtype, want.dtype)
    ref = np.asarray(want_fn(jnp.asarray(x.astype(dtype).astype(np.float64))))   # JAX float64
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=RTOL[dtype], atol=RTOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_weak_scalars_keep_the_data_dtype_eagerly(name, dtype):
    t, j, x = CASES[name]
    _check(t(x.astype(dtype)), j, x, dtype)


@pytest.mark.parametrize("name", ["vmap_index", "vmap_counter", "hessian_index"])
def test_weak_scalars_keep_float32_through_jit(name):
    t, j, x = CASES[name]
    _check(tl.jit(t)(x.astype(np.float32)), j, x, np.float32)


def test_per_example_loop_bounds_keep_float32():
    # the bounds differ per example: the batched loop runs the longest range and computes each
    # example's index as an int64 array, which must still adopt float32 (it returned float64)
    x, ns = XS[0].astype(np.float32), np.array([1, 3])
    got = tl.vmap(ragged, in_axes=(None, 0))(x, ns)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, [ragged(x.astype(np.float64), int(n)) for n in ns], rtol=1e-6)


def test_negative_control_the_tolerance_sees_an_index_off_by_one():
    t, _, x = CASES["vmap_index"]

    def shifted(x):
        s = 0.0
        for i in range(len(x)):
            s = s + jnp.cos(x[i]) * (i + 1)
        return s
    with pytest.raises(AssertionError):
        _check(t(x.astype(np.float32)), jax.vmap(shifted), x, np.float32)
