"""Keyword arguments to transformed functions: ``tl.grad(f)(x, scale=2.0)``, as JAX takes them.

Regression (session 16): every transform refused a call with keywords ("pass arguments
positionally"), keyword-only parameters could never be given at all, ``tl.jit(f)(x, "mean")``
leaked an internal ShapeNeeded, and ``tl.jit(h)`` of ``def h(*xs)`` refused every call ("takes 0
positional arguments"). Keywords are now bound as Python binds them
(``_frontend/call_binding.py``); a ``str`` argument under ``tl.jit`` is static.

Oracle: JAX float64 (``jax.grad(f)(x, scale=2.0)`` passes keywords through undifferentiated);
negative controls: each keyword's value changes the result, so a keyword dropped in favour of
its default would be caught.
"""
import functools

import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import ArgumentError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

X = np.array([0.3, -1.2, 2.0])
W = np.array([1.0, 2.0, 3.0])


def loss(x, a=1.0, b=2.0):
    return np.sum(x * a + np.sin(x) ** 2 * b)


def loss_jax(x, a=1.0, b=2.0):
    return jnp.sum(x * a + jnp.sin(x) ** 2 * b)


def weighted(x, shift=0.0, *, mode="sum", w=None, scale=1.0):
    y = np.tanh(x + shift) * scale
    if w is not None:
        y = y * w
    if mode == "sum":
        return np.sum(y)
    return np.mean(y)


def weighted_jax(x, shift=0.0, *, mode="sum", w=None, scale=1.0):
    y = jnp.tanh(x + shift) * scale
    if w is not None:
        y = y * w
    return jnp.sum(y) if mode == "sum" else jnp.mean(y)


def _jax_grad(f, *args, **kwargs):
    return np.asarray(jax.grad(f)(*args, **kwargs))


@pytest.mark.parametrize("wrap", [lambda g: g, tl.jit], ids=["eager", "jit"])
def test_grad_takes_keywords_of_positional_parameters(wrap):
    g = wrap(tl.grad(loss))
    np.testing.assert_allclose(g(X, b=3.0), _jax_grad(loss_jax, X, b=3.0), rtol=1e-14)
    np.testing.assert_allclose(g(X, b=3.0, a=-2.0), _jax_grad(loss_jax, X, b=3.0, a=-2.0), rtol=1e-14)
    np.testing.assert_allclose(g(x=X, a=0.5), _jax_grad(loss_jax, X, a=0.5), rtol=1e-14)
    assert not np.allclose(g(X, b=3.0), g(X))                 # control: b reached the function


@pytest.mark.parametrize("wrap", [lambda g: g, tl.jit], ids=["eager", "jit"])
def test_keyword_only_parameters(wrap):
    g = wrap(tl.grad(weighted))
    # regression: a keyword-only argument once took the place of `shift`, left out before it
    for kw in ({}, {"w": W}, {"mode": "mean"}, {"w": W, "mode": "mean", "scale": 3.0}, {"scale": 0.5},
               {"shift": 0.25, "scale": 2.0}):
        np.testing.assert_allclose(g(X, **kw), _jax_grad(weighted_jax, X, **kw), rtol=1e-14, err_msg=str(kw))
    assert not np.allclose(g(X, w=W), g(X))                   # controls
    assert not np.allclose(g(X, mode="mean"), g(X))
    # the same jitted function again with the first keywords: no stale program
    np.testing.assert_allclose(g(X, w=W), _jax_grad(weighted_jax, X, w=W), rtol=1e-14)


def test_jit_of_the_function_itself_takes_keywords_and_strings():
    f = tl.jit(weighted)
    assert float(f(X, mode="mean", w=W)) == pytest.approx(float(weighted_jax(X, mode="mean", w=W)), rel=1e-14)
    assert float(f(X)) == pytest.approx(float(weighted_jax(X)), rel=1e-14)

    def pick(x, how="sum"):
        return np.sum(x) if how == "sum" else np.max(x)

    j = tl.jit(pick)
    assert float(j(X, "max")) == 2.0 and float(j(X, "sum")) == pytest.approx(X.sum())   # a str is static
    assert float(tl.jit(tl.grad(pick))(X, "max")[2]) == 1.0


def test_static_argnames():
    def power(x, n):
        out = x
        for _ in range(n - 1):        # a Python loop over n: needs its value
            out = out * x
        return np.sum(out)

    f = tl.jit(power, static_argnames="n")
    assert float(f(X, 3)) == pytest.approx(np.sum(X ** 3), rel=1e-14)
    assert float(f(X, n=2)) == pytest.approx(np.sum(X ** 2), rel=1e-14)
    g = tl.jit(tl.grad(power), static_argnames=("n",))
    np.testing.assert_allclose(g(X, n=4), 4 * X ** 3, rtol=1e-14)
    with pytest.raises(ArgumentError, match="not a parameter of `power`"):
        tl.jit(power, static_argnames="m")


def test_value_and_grad_jacobians_and_hessian_take_keywords():
    value, g = tl.value_and_grad(loss)(X, b=3.0)
    assert value == pytest.approx(float(loss_jax(X, b=3.0)), rel=1e-14)
    np.testing.assert_allclose(g, _jax_grad(loss_jax, X, b=3.0), rtol=1e-14)

    def field(x, k=1.0):
        return np.sin(x) * k

    want = np.asarray(jax.jacfwd(lambda x, k=1.0: jnp.sin(x) * k)(X, k=2.5))
    np.testing.assert_allclose(tl.jacfwd(field)(X, k=2.5), want, rtol=1e-14)
    np.testing.assert_allclose(tl.jacrev(field)(X, k=2.5), want, rtol=1e-14)
    np.testing.assert_allclose(tl.hessian(loss)(X, b=3.0), np.asarray(jax.hessian(loss_jax)(X, b=3.0)),
                               rtol=1e-13, atol=1e-15)


def test_vmap_batches_keywords_along_axis_0_as_jax():
    xs = np.stack([X, 2 * X])
    bs = np.array([1.0, -3.0])
    want = np.asarray(jax.vmap(loss_jax)(xs, b=bs))
    np.testing.assert_allclose(tl.vmap(loss)(xs, b=bs), want, rtol=1e-14)
    # in_axes counts the positional arguments; a parameter left out keeps its default, unbatched
    want = np.asarray(jax.vmap(loss_jax, in_axes=(0, None))(xs, 2.0, b=bs))
    np.testing.assert_allclose(tl.vmap(loss, in_axes=(0, None))(xs, 2.0, b=bs), want, rtol=1e-14)
    with pytest.raises(ArgumentError, match="batched along axis 0, as in JAX"):
        tl.vmap(loss)(xs, b=2.0)


def test_nested_transforms_pass_keywords_inward():
    def outer(x, c=1.0):
        return np.sum(tl.grad(loss)(x, b=c) * x)

    want = np.asarray(jax.grad(lambda x, c=1.0: jnp.sum(jax.grad(loss_jax)(x, b=c) * x))(X, c=2.0))
    np.testing.assert_allclose(tl.grad(outer)(X, c=2.0), want, rtol=1e-13)
    np.testing.assert_allclose(tl.jit(tl.grad(outer))(X, c=2.0), want, rtol=1e-13)


def test_star_args_under_jit():
    def total(*xs):
        return sum(np.sum(x ** 2) for x in xs)

    assert float(tl.jit(total)(X, W)) == pytest.approx(np.sum(X ** 2) + np.sum(W ** 2), rel=1e-14)
    gx, gw = tl.jit(tl.grad(total, argnums=(0, 1)))(X, W)
    np.testing.assert_allclose(gx, 2 * X, rtol=1e-15)
    np.testing.assert_allclose(gw, 2 * W, rtol=1e-15)


def test_bad_keywords_are_refused_like_python():
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'c'.*x, a=1.0, b=2.0"):
        tl.grad(loss)(X, c=1.0)
    with pytest.raises(ArgumentError, match="multiple values for argument 'a'"):
        tl.jit(loss)(X, 1.0, a=2.0)
    with pytest.raises(ArgumentError, match="takes 2 positional arguments but 3 were given"):
        tl.jit(weighted)(X, 0.0, W)
    with pytest.raises(ArgumentError, match="takes 2 positional arguments but 3 were given"):
        tl.grad(weighted)(X, 0.0, W)
    with pytest.raises(ArgumentError, match=r"\*\*kw"):
        tl.grad(lambda x, **kw: np.sum(x))(X, q=1.0)
    with pytest.raises(ArgumentError, match="not those of the function it wraps"):
        tl.jit(tl.jvp(loss))((X,), (X,), b=1.0)


def test_functools_partial_is_transformed():
    """Regression: tl.grad / tl.jit / tl.vmap of a functools.partial were refused ("cannot read the
    source", "expected a Python function")."""
    want = _jax_grad(loss_jax, X, b=3.0)
    for wrap in (lambda g: g, tl.jit):
        np.testing.assert_allclose(wrap(tl.grad(functools.partial(loss, b=3.0)))(X), want, rtol=1e-14)
        np.testing.assert_allclose(wrap(tl.grad(functools.partial(loss, b=3.0)))(X, b=-1.0),
                                   _jax_grad(loss_jax, X, b=-1.0), rtol=1e-14)
    assert float(tl.jit(functools.partial(loss, a=2.0))(X)) == pytest.approx(float(loss_jax(X, a=2.0)), rel=1e-14)
    np.testing.assert_allclose(tl.grad(functools.partial(weighted, mode="mean"))(X),
                               _jax_grad(weighted_jax, X, mode="mean"), rtol=1e-14)
    xs = np.stack([X, 2 * X])
    np.testing.assert_allclose(tl.vmap(functools.partial(loss, b=3.0))(xs),
                               np.asarray(jax.vmap(functools.partial(loss_jax, b=3.0))(xs)), rtol=1e-14)

    def scaled(k, x):
        return np.sum(np.sin(x) * k)

    np.testing.assert_allclose(tl.grad(functools.partial(scaled, 2.0))(X), 2.0 * np.cos(X), rtol=1e-15)
    with pytest.raises(ArgumentError, match="multiple values for argument 'b'|takes 2 positional"):
        tl.grad(functools.partial(loss, b=3.0))(X, 1.0, 5.0)
