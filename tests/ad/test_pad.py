"""``np.pad`` / ``tnp.pad`` in differentiated code, every NumPy ``pad_width`` form, against JAX float64.

Regression: ``np.pad(x, 1)`` under ``tl.grad`` failed with "'int' object is not iterable".
"""
from __future__ import annotations

import numpy as np
import pytest

import tlaloc as tl
import tlaloc.numpy as tnp
from tlaloc.errors import ArgumentError

jax = pytest.importorskip("jax")
jnp = jax.numpy

W = np.linspace(-1.0, 2.0, 8 * 9).reshape(8, 9)       # weights so that every padded position matters


def f_int(x):
    return (np.pad(x, 1) ** 2 * W[:4, :5]).sum()


def f_pair(x):
    return (np.pad(x, (2, 1)) ** 2 * W[:5, :6]).sum()


def f_one_pair(x):
    return (np.pad(x, ((0, 3),)) ** 2 * W[:5, :6]).sum()


def f_per_axis(x):
    return (np.pad(x, ((1, 2), (0, 3)), constant_values=2.5) ** 2 * W[:5, :6]).sum()


def f_tnp(x):
    return (tnp.pad(x, [[3, 0], [1, 1]], mode="constant", constant_values=-1.0) ** 2 * W[:5, :5]).sum()


def _jax(f):
    """The same function written for JAX (np -> jnp)."""
    src = {f_int: lambda x: (jnp.pad(x, 1) ** 2 * W[:4, :5]).sum(),
           f_pair: lambda x: (jnp.pad(x, (2, 1)) ** 2 * W[:5, :6]).sum(),
           f_one_pair: lambda x: (jnp.pad(x, ((0, 3),)) ** 2 * W[:5, :6]).sum(),
           f_per_axis: lambda x: (jnp.pad(x, ((1, 2), (0, 3)), constant_values=2.5) ** 2 * W[:5, :6]).sum(),
           f_tnp: lambda x: (jnp.pad(x, [[3, 0], [1, 1]], constant_values=-1.0) ** 2 * W[:5, :5]).sum()}
    return src[f]


CASES = [f_int, f_pair, f_one_pair, f_per_axis, f_tnp]
X = np.arange(6.0).reshape(2, 3) - 2.5


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_pad_value_and_grad_match_jax(f):
    with jax.enable_x64(True):
        want_v = float(_jax(f)(jnp.asarray(X)))
        want_g = np.asarray(jax.grad(_jax(f))(jnp.asarray(X)))
    assert f(X) == pytest.approx(want_v, rel=1e-14)
    np.testing.assert_allclose(tl.grad(f)(X), want_g, rtol=1e-14, atol=0)
    np.testing.assert_allclose(tl.jit(tl.grad(f))(X), want_g, rtol=1e-13, atol=0)


def test_pad_forward_mode_and_vmap():
    with jax.enable_x64(True):
        want = np.asarray(jax.vmap(jax.grad(_jax(f_per_axis)))(jnp.stack([jnp.asarray(X), -jnp.asarray(X)])))
        t_want = jax.jvp(_jax(f_int), (jnp.asarray(X),), (jnp.ones_like(jnp.asarray(X)),))[1]
    np.testing.assert_allclose(tl.vmap(tl.grad(f_per_axis))(np.stack([X, -X])), want, rtol=1e-14)
    _, t = tl.jvp(f_int, (X,), (np.ones_like(X),))
    assert float(t) == pytest.approx(float(t_want), rel=1e-14)


def test_control_a_shifted_pad_is_detected():
    """Negative control: the gradient of a pad shifted by one differs from JAX's beyond the tolerance."""
    with jax.enable_x64(True):
        want = np.asarray(jax.grad(_jax(f_pair))(jnp.asarray(X)))
    wrong = tl.grad(f_one_pair)(X)
    assert not np.allclose(wrong, want, rtol=1e-14, atol=0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(pad_width=-1), "non-negative"),
    (dict(pad_width=((1, 2), (3, 4), (5, 6))), "one .before, after. pair of ints per axis"),
    (dict(pad_width=1.5), "pad_width must be an int"),
    (dict(pad_width=1, mode="linear_ramp"), "mode must be one of"),
    (dict(pad_width=1, constant_values=((1, 2), (3, 4))), "constant_values must be one static number"),
])
def test_bad_pad_arguments_are_refused(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        tnp.pad(X, **kwargs)
