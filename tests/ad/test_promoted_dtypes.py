"""Derivatives through NumPy's integer promotion keep each primal's dtype.

NumPy (and so tlaloc) promotes ``float32 * int64`` to float64. Regression: the
gradient of a float32 argument came back float64, and ``jacrev``/``hessian``/
``vmap(grad)`` raised ``DTypeError: safe_mul: operand 0 is float64 but operand 1
is float32`` from derivative code, blaming the user's line (``n / x``, ``x ** n``,
``maximum``/``minimum`` and ``remainder`` with an integer ``n`` raised in every
mode). Convention (JAX's): a cotangent has its primal's dtype, and a tangent has
its primal's dtype; here the primal output is float64 (NumPy's promotion), where
JAX's is float32.

Oracle: JAX with x64 enabled. Values: JAX on the float64 copy of ``x`` (the
computation tlaloc's promoted primal does), compared within float32 tolerance.
dtypes: JAX on the float32 ``x`` for cotangents (grad, jacrev, hessian); the
primal output's dtype for tangents (jvp, jacfwd).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl

jax.config.update("jax_enable_x64", True)

X = np.linspace(0.1, 1.0, 6).astype(np.float32)
N = np.arange(1, 7)
RTOL, ATOL = 2e-6, 1e-6


def mul_slice(x, n):
    return np.sum((x * np.arange(6))[1:3])


def mul_arg(x, n):
    return np.sum(x * n)


def int_over_x(x, n):
    return np.sum(n / x)


def pow_int(x, n):
    return np.sum(x ** n)


def sin_add_int(x, n):
    return np.sum(np.sin(x + n) + n * x)


def max_int(x, n):
    return np.sum(np.maximum(x, n - 3) * n + np.minimum(x, n - 4))


def rem_int(x, n):
    return np.sum(np.remainder(n, x + 0.013) + np.remainder(x * n, 7))


def matmul_int(x, n):
    return np.sum((x * x) @ np.outer(n, n[:3]))


def where_int(x, n):
    return np.sum(np.where(x > 0.5, x * x, n))


def concat_int(x, n):
    return np.sum(np.concatenate([x, n]) ** 2 * np.concatenate([n, x]))


def _jnp(name):
    return {"mul_slice": lambda x, n: jnp.sum((x * jnp.arange(6))[1:3]),
            "mul_arg": lambda x, n: jnp.sum(x * n),
            "int_over_x": lambda x, n: jnp.sum(n / x),
            "pow_int": lambda x, n: jnp.sum(x ** n),
            "sin_add_int": lambda x, n: jnp.sum(jnp.sin(x + n) + n * x),
            "max_int": lambda x, n: jnp.sum(jnp.maximum(x, n - 3) * n + jnp.minimum(x, n - 4)),
            "rem_int": lambda x, n: jnp.sum(jnp.remainder(n, x + 0.013) + jnp.remainder(x * n, 7)),
            "matmul_int": lambda x, n: jnp.sum((x * x) @ jnp.outer(n, n[:3])),
            "where_int": lambda x, n: jnp.sum(jnp.where(x > 0.5, x * x, n)),
            "concat_int": lambda x, n: jnp.sum(jnp.concatenate([x, n]) ** 2 * jnp.concatenate([n, x]))}[name]


FUNCS = [mul_slice, mul_arg, int_over_x, pow_int, sin_add_int, max_int, rem_int, matmul_int, where_int,
         concat_int]


def _close(got, want, dtype):
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), f"dtype {got.dtype}, expected {np.dtype(dtype)}"
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=RTOL, atol=ATOL)


def _jax_grad(f, x):
    return jax.grad(_jnp(f.__name__))(jnp.asarray(x), N)


@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_reverse_modes(f):
    want = _jax_grad(f, X.astype(np.float64))
    dtype = _jax_grad(f, X).dtype                       # float32: JAX x64's cotangent dtype
    assert dtype == np.float32
    _close(tl.grad(f)(X, N), want, dtype)
    _close(tl.jacrev(f)(X, N), want, dtype)
    _close(tl.jit(tl.grad(f))(X, N), want, dtype)
    batched = tl.vmap(tl.grad(f), in_axes=(0, None))(np.stack([X, X[::-1]]), N)
    _close(batched[0], want, dtype)
    _close(batched[1], _jax_grad(f, X[::-1].astype(np.float64)), dtype)


@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_hessian(f):
    want = jax.hessian(_jnp(f.__name__))(jnp.asarray(X, jnp.float64), N)
    dtype = jax.hessian(_jnp(f.__name__))(jnp.asarray(X), N).dtype
    got = np.asarray(tl.hessian(f)(X, N))
    assert got.dtype == dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_forward_modes(f):
    out_dtype = np.asarray(f(X, N)).dtype               # float64: NumPy's promotion
    assert out_dtype == np.float64
    v = np.linspace(-1.0, 1.0, 6).astype(np.float32)
    _, want = jax.jvp(lambda x: _jnp(f.__name__)(x, N), (jnp.asarray(X, jnp.float64),),
                      (jnp.asarray(v, jnp.float64),))
    _, t = tl.jvp(lambda x: f(x, N), (X,), (v,))
    _close(t, want, out_dtype)
    _close(tl.jacfwd(f)(X, N), _jax_grad(f, X.astype(np.float64)), out_dtype)


def test_no_promotion_keeps_dtypes_and_values():
    # float32 with float32 (and float64 with an integer) promote nothing: results as before
    y = X[::-1].copy()
    got = tl.grad(lambda x, y: np.sum(x * y / (x + y)))(X, y)
    want = jax.grad(lambda x, y: jnp.sum(x * y / (x + y)))(jnp.asarray(X), jnp.asarray(y))
    _close(got, want, np.float32)
    g64 = tl.grad(mul_arg)(X.astype(np.float64), N)
    assert g64.dtype == np.float64 and np.array_equal(g64, N.astype(np.float64))


def test_complex_and_integer_unchanged():
    c = np.full(6, 1 + 2j, np.complex64)
    g = tl.grad(lambda x, c: np.sum(np.abs(x * c)))(X, c)
    assert g.dtype == np.complex64                      # as before this fix (JAX gives the real part)
    with pytest.raises(tl.errors.GradientError, match="int64"):
        tl.grad(mul_arg, argnums=1)(X, N)


def test_negative_control():
    # the comparison rejects a float64 gradient (the bug) and a value off by 1e-4
    want = _jax_grad(mul_arg, X.astype(np.float64))
    with pytest.raises(AssertionError, match="dtype"):
        _close(np.asarray(want, np.float64), want, np.float32)
    with pytest.raises(AssertionError):
        _close(np.asarray(want, np.float32) * np.float32(1 + 1e-4), want, np.float32)
    # and a float mix the user writes is refused in strict mode (tests/ad/test_float_promotion.py)
    with tl.numpy_dtype_promotion("strict"), pytest.raises(tl.errors.DTypeError, match="float dtypes never mix"):
        tl.grad(mul_arg)(X, N.astype(np.float64))
