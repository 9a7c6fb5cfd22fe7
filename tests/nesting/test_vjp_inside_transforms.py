"""``tl.vjp`` inside a transformed function, and a ``vjp_fn`` compiled or differentiated.

Regressions (session 16, an adversarial helper):
- ``tl.vjp`` called inside ``tl.jit`` / ``tl.grad`` / ``tl.vmap`` failed: its pullback's values
  "escaped the function that built it";
- ``tl.jit(vjp_fn)`` compiled the forward pass of the function instead and returned
  ``(ones, <_VJPFunction>)`` where ``([2, 4],)`` was due: silently wrong;
- ``tl.grad`` of a function calling a ``vjp_fn`` crashed with an AttributeError.

Oracle: JAX float64 (``jax.vjp`` in the same places); control: cotangents that differ give
results that differ.
"""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import FenceError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

X = np.array([1.0, 2.0, -0.3])
CT = np.array([1.0, -0.5, 2.0])


def pull_sin(x):
    y, f = tl.vjp(np.sin, x)
    return f(np.ones_like(y))[0]


def closure_vjp(x):
    y, f = tl.vjp(lambda z: z ** 2 * x, x)
    return np.sum(f(y)[0] * x)


def closure_vjp_jax(x):
    y, f = jax.vjp(lambda z: z ** 2 * x, x)
    return jnp.sum(f(y)[0] * x)


def with_aux(x):
    y, f, aux = tl.vjp(lambda z: (np.sum(np.exp(z)), z * 2), x, has_aux=True)
    return np.sum(f(1.0)[0] * aux)


def with_aux_jax(x):
    y, f, aux = jax.vjp(lambda z: (jnp.sum(jnp.exp(z)), z * 2), x, has_aux=True)
    return jnp.sum(f(1.0)[0] * aux)


def test_vjp_inside_jit_and_vmap():
    np.testing.assert_allclose(tl.jit(pull_sin)(X), np.cos(X), rtol=1e-15)
    np.testing.assert_allclose(tl.vmap(pull_sin)(np.stack([X, 2 * X])), np.cos(np.stack([X, 2 * X])), rtol=1e-15)


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_grad_of_a_function_using_vjp(wrap):
    np.testing.assert_allclose(wrap(tl.grad(closure_vjp))(X), np.asarray(jax.grad(closure_vjp_jax)(X)), rtol=1e-13)
    np.testing.assert_allclose(wrap(tl.grad(with_aux))(X), np.asarray(jax.grad(with_aux_jax)(X)), rtol=1e-13)


def test_the_pullback_cannot_leave_the_function():
    with pytest.raises(FenceError, match="returns a SymbolicPullback"):
        tl.jit(lambda x: tl.vjp(np.sin, x)[1])(X)


def test_jit_of_vjp_fn_and_grad_through_it():
    y, vf = tl.vjp(lambda x: x ** 2 * np.sin(x), X)
    _, vf_jax = jax.vjp(lambda x: x ** 2 * jnp.sin(x), X)
    want = np.asarray(vf_jax(CT)[0])
    (got,) = tl.jit(vf)(CT)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-14)
    assert not np.allclose(np.asarray(tl.jit(vf)(2 * CT)[0]), want)            # control
    g = tl.grad(lambda c: np.sum(vf(c)[0] ** 2))(CT)
    np.testing.assert_allclose(g, np.asarray(jax.grad(lambda c: jnp.sum(vf_jax(c)[0] ** 2))(CT)), rtol=1e-13)
    assert "Backward pass" in tl.source(vf)
