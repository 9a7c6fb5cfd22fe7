"""float32 meeting float64 promotes as NumPy does, and derivatives keep each primal's dtype.

Before this, tlaloc refused any float32/float64 mix (``DTypeError: float dtypes never mix
implicitly``) where NumPy, JAX (x64) and PyTorch promote. That stopped the programs people
write: ``np.sqrt(2 / np.pi)`` is fine, but ``np.zeros(n)`` beside float32 data, a float64
weight matrix applied to float32 inputs, or a float64 buffer filled from float32 values
were all refused. ``tl.numpy_dtype_promotion("strict")`` keeps the refusal for code that
must stay in one precision (``jax.numpy_dtype_promotion("strict")``).

Oracle: JAX with x64 enabled, on the same mixed-dtype inputs (JAX promotes float32 with
float64 to float64, as NumPy does, and its cotangents and tangents have their primals'
dtypes). Primal values: NumPy running the function itself, bit for bit.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl

jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(7)
X = RNG.normal(size=6).astype(np.float32)               # float32 data
Y = RNG.normal(size=6)                                   # float64 parameters
W = RNG.normal(size=(6, 3))


def gelu_matmul(x, y):
    h = np.tanh(x[:3] @ W[:3] * y[:3]) * np.sqrt(2 / np.pi)
    return np.sum(h * h)


def zeros_beside(x, y):
    z = x * y[0] + np.zeros(x.shape)                     # np.zeros is float64
    return np.sum(np.sin(z) * x)


def concat(x, y):
    c = np.concatenate([x, y])
    return np.sum(c ** 2 * np.concatenate([y, x]))


def einsum(x, y):
    return np.einsum("i,i->", x, y) ** 2 + np.einsum("i,ij,j->", x, W @ W.T, y)


def where(x, y):
    return np.sum(np.where(x > 0, x * x, y) * y)


def buffer64(x, y):
    z = np.zeros(6)                                      # a float64 buffer filled from float32
    z[:3] = x[:3] * 2
    z[3:] = y[3:] * x[3:]
    return np.sum(z * z)


def buffer32(x, y):
    z = x.copy()                                         # a float32 buffer: y's values are rounded in
    z[1:3] = y[1:3]
    return np.sum(z ** 2 + z * x)


def loop_carry(x, y):
    acc = x                                              # float32 on entry, float64 after one trip
    for k in range(3):
        acc = acc * y + 0.5
    return np.sum(acc)


def branch(x, y):
    if x.sum() > 0:                                      # float32 on one path, float64 on the other
        z = x * 2
    else:
        z = y
    return np.sum(z * y)


def mean_std(x, y):
    return np.mean(x) * np.std(y) + np.var(x - y)


FUNCS = [gelu_matmul, zeros_beside, concat, einsum, where, buffer64, buffer32, loop_carry, branch, mean_std]


def _jnp(f):
    Wj = jnp.asarray(W)

    def buffer64(x, y):
        z = jnp.zeros(6).at[:3].set(x[:3] * 2).at[3:].set(y[3:] * x[3:])
        return jnp.sum(z * z)

    def buffer32(x, y):
        z = x.at[1:3].set(y[1:3])                        # JAX casts the value to x's dtype, as NumPy
        return jnp.sum(z ** 2 + z * x)

    def loop_carry(x, y):
        acc = x
        for k in range(3):
            acc = acc * y + 0.5
        return jnp.sum(acc)
    return {"gelu_matmul": lambda x, y: jnp.sum((jnp.tanh(x[:3] @ Wj[:3] * y[:3]) * np.sqrt(2 / np.pi)) ** 2),
            "zeros_beside": lambda x, y: jnp.sum(jnp.sin(x * y[0] + jnp.zeros(x.shape)) * x),
            "concat": lambda x, y: jnp.sum(jnp.concatenate([x, y]) ** 2 * jnp.concatenate([y, x])),
            "einsum": lambda x, y: (jnp.einsum("i,i->", x, y) ** 2
                                    + jnp.einsum("i,ij,j->", x, Wj @ Wj.T, y)),
            "where": lambda x, y: jnp.sum(jnp.where(x > 0, x * x, y) * y),
            "buffer64": buffer64, "buffer32": buffer32, "loop_carry": loop_carry,
            "branch": lambda x, y: jnp.sum(jnp.where(x.sum() > 0, x * 2, y) * y),
            "mean_std": lambda x, y: jnp.mean(x) * jnp.std(y) + jnp.var(x - y)}[f.__name__]


def _close(got, want):
    """``got`` has ``want``'s dtype and its values (float32 to float32 rounding)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"dtype {got.dtype}, expected {want.dtype}"
    rtol = 2e-6 if want.dtype == np.float32 else 1e-11
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())


@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_eager_value_is_numpys(f):
    want = np.asarray(f(X, Y))
    value = np.asarray(tl.value_and_grad(f)(X, Y)[0])
    assert value.dtype == want.dtype == (np.float32 if f is buffer32 else np.float64)
    if f is einsum:      # a contraction, not np.einsum's loop: same as for float64 alone
        np.testing.assert_allclose(value, want, rtol=4e-16)
    else:
        assert value.tobytes() == want.tobytes()


@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_reverse_modes(f):
    want = jax.grad(_jnp(f), argnums=(0, 1))(jnp.asarray(X), jnp.asarray(Y))
    assert (want[0].dtype, want[1].dtype) == (np.float32, np.float64)     # each primal's dtype
    for name, t in [("grad", tl.grad(f, argnums=(0, 1))), ("jit", tl.jit(tl.grad(f, argnums=(0, 1)))),
                    ("jacrev", tl.jacrev(f, argnums=(0, 1)))]:
        got = t(X, Y)
        _close(got[0], want[0]), _close(got[1], want[1])
    batched = tl.vmap(tl.grad(f), in_axes=(0, None))(np.stack([X, -X]), Y)
    _close(batched[0], want[0])
    _close(batched[1], jax.grad(_jnp(f))(jnp.asarray(-X), jnp.asarray(Y)))


@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_forward_modes(f):
    v = np.linspace(-1.0, 1.0, 6).astype(np.float32)
    _, want = jax.jvp(lambda x: _jnp(f)(x, jnp.asarray(Y)), (jnp.asarray(X),), (jnp.asarray(v),))
    _, got = tl.jvp(lambda x: f(x, Y), (X,), (v,))
    _close(got, want)
    hess = jax.hessian(_jnp(f))(jnp.asarray(X), jnp.asarray(Y))
    _close(tl.hessian(f)(X, Y), hess)


def wloop(x, y):
    acc = x                                              # a while carry promoted on its first trip
    while np.sum(acc) < 40:
        acc = acc * 2 + y
    return np.sum(acc * acc)


def test_while_carry_promotes():
    X = np.abs(globals()["X"]) + np.float32(0.1)        # positive: the loop ends for every example
    trips, acc = 0, X
    while np.sum(acc) < 40:
        acc, trips = acc * 2 + Y, trips + 1
    assert trips >= 2

    def oracle(x, y):
        acc = x
        for _ in range(trips):
            acc = acc * 2 + y
        return jnp.sum(acc * acc)
    want = jax.grad(oracle, argnums=(0, 1))(jnp.asarray(X), jnp.asarray(Y))
    for t in (tl.grad(wloop, argnums=(0, 1)), tl.jit(tl.grad(wloop, argnums=(0, 1))),
              tl.jacrev(wloop, argnums=(0, 1))):
        got = t(X, Y)
        _close(got[0], want[0]), _close(got[1], want[1])
    _close(tl.vmap(tl.grad(wloop), in_axes=(0, None))(np.stack([X, X]), Y)[1], want[0])
    assert np.asarray(tl.jit(wloop)(X, Y)).dtype == np.float64


def test_jit_output_dtype_is_numpys():
    for f in FUNCS:
        got = tl.jit(f)(X, Y)
        want = np.asarray(f(X, Y))
        assert np.asarray(got).dtype == want.dtype, f.__name__
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_bfloat16_and_float16_promote_as_numpy():
    import ml_dtypes
    xb = X.astype(ml_dtypes.bfloat16)
    xh = X.astype(np.float16)
    for a, b in [(xb, X), (xh, X), (xh, Y), (xb, Y)]:
        f = lambda a, b: np.sum(a * b)                                     # noqa: E731
        want_dtype = np.result_type(a.dtype, b.dtype)
        assert np.asarray(f(a, b)).dtype == want_dtype
        ga, gb = tl.grad(f, argnums=(0, 1))(a, b)
        assert (ga.dtype, gb.dtype) == (a.dtype, b.dtype)
        np.testing.assert_allclose(ga.astype(np.float64), b.astype(np.float64), rtol=1e-2)


def test_strict_mode_refuses_and_names_both_operands():
    with tl.numpy_dtype_promotion("strict"):
        with pytest.raises(tl.DTypeError, match=r"x is float32 but y is float64.*strict"):
            tl.grad(lambda x, y: np.sum(x * y))(X, Y)
        with pytest.raises(tl.DTypeError, match="never mix"):
            tl.jit(concat)(X, Y)
        with pytest.raises(tl.DTypeError, match="never mix"):
            tl.numpy.add(X, Y)                                             # eager, too
    # and outside the block the same program promotes again
    assert tl.grad(lambda x, y: np.sum(x * y))(X, Y).dtype == np.float32


def test_strict_mode_is_not_answered_from_the_standard_memo():
    # regression guard: abstract evaluation is memoized per (primitive, avals); a mix
    # evaluated under "standard" must still be refused under "strict"
    tl.grad(lambda x, y: np.sum(x * y - y))(X, Y)
    with tl.numpy_dtype_promotion("strict"):
        with pytest.raises(tl.DTypeError):
            tl.grad(lambda x, y: np.sum(x * y - y))(X, Y)


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="standard.*strict"):
        with tl.numpy_dtype_promotion("loose"):
            pass


def test_negative_control():
    # the comparison rejects a cotangent in the wrong dtype (what a missing cast gives)
    # and a value off by 1e-5
    want = jax.grad(_jnp(gelu_matmul))(jnp.asarray(X), jnp.asarray(Y))
    with pytest.raises(AssertionError, match="dtype"):
        _close(np.asarray(want, np.float64), want)
    with pytest.raises(AssertionError):
        _close(np.asarray(want) * np.float32(1 + 1e-5), want)


def math_scale(x, y):
    s = math.exp(x[0]) * 2.0                             # a Python float in NumPy's eyes
    return np.sum(s + x * x) + float(x[1]) * np.sum(x)


def test_a_math_result_acts_as_a_python_float():
    # math.exp(x[0]) is a Python float: with a float32 array NumPy computes in float32 (NEP 50).
    # tlaloc's math result is a 0-d float64, converted to the array's dtype where it meets one.
    want = np.asarray(math_scale(X, Y))
    assert want.dtype == np.float32
    value, g = tl.value_and_grad(math_scale)(X, Y)
    assert np.asarray(value).dtype == np.float32 and np.asarray(value).tobytes() == want.tobytes()
    x64 = jnp.asarray(X, jnp.float64)
    oracle = jax.grad(lambda x: jnp.sum(jnp.exp(x[0]) * 2.0 + x * x) + x[1] * jnp.sum(x))(x64)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, oracle, rtol=2e-6)
    np.testing.assert_allclose(np.asarray(tl.jit(math_scale)(X, Y)), want, rtol=1e-6)
    assert np.asarray(tl.jit(math_scale)(X, Y)).dtype == np.float32
    np.testing.assert_allclose(tl.jit(tl.grad(math_scale))(X, Y), oracle, rtol=2e-6)
    # control: the 0-d float64 left as it is (not converted) gives float64, which the dtype check catches
    unconverted = np.sum(np.asarray(math.exp(X[0]) * 2.0) + X * X) + np.asarray(float(X[1])) * np.sum(X)
    assert unconverted.dtype == np.float64


def inplace_array(x, y):
    z = x.copy()
    z += y                                               # writes into a float32 array: float32
    z *= y[0]
    return np.sum(z * z)


def inplace_scalar(x, y):
    s = np.sum(x)                                        # a NumPy float32 scalar: `+=` rebinds, float64
    s += np.sum(y)
    t = np.max(x)
    t *= y[1]
    return s * t


def _jnp_inplace(f):
    if f is inplace_array:
        def g(x, y):
            z = (x + y).astype(x.dtype)
            z = (z * y[0]).astype(x.dtype)
            return jnp.sum(z * z)
        return g
    return lambda x, y: (jnp.sum(x) + jnp.sum(y)) * (jnp.max(x) * y[1])


@pytest.mark.parametrize("f", [inplace_array, inplace_scalar], ids=lambda f: f.__name__)
def test_augmented_assignment_keeps_an_arrays_dtype(f):
    # NumPy: `z += y64` into a float32 array casts back (same_kind) and stays float32; a float32
    # NumPy scalar is rebound and promotes (regression: the array case gave float64)
    want = np.asarray(f(X, Y))
    assert want.dtype == (np.float32 if f is inplace_array else np.float64)
    value, g = tl.value_and_grad(f, argnums=(0, 1))(X, Y)
    assert np.asarray(value).dtype == want.dtype and np.asarray(value).tobytes() == want.tobytes()
    jv = np.asarray(tl.jit(f)(X, Y))
    assert jv.dtype == want.dtype
    np.testing.assert_allclose(jv, want, rtol=1e-6)
    oracle = jax.grad(_jnp_inplace(f), argnums=(0, 1))(jnp.asarray(X), jnp.asarray(Y))
    for got in (g, tl.jit(tl.grad(f, argnums=(0, 1)))(X, Y)):
        _close(got[0], oracle[0]), _close(got[1], oracle[1])
    batched = tl.vmap(f, in_axes=(0, None))(np.stack([X, -X]), Y)
    assert np.asarray(batched).dtype == want.dtype
    np.testing.assert_allclose(np.asarray(batched)[1], np.asarray(f(-X, Y)), rtol=1e-6)
