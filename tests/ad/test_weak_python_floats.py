"""A Python float argument is weak, as NumPy (NEP 50) and JAX take it: ``f(x32, 0.5)`` is float32.

Regression (session 16, an adversarial helper): ``tl.grad(f)(x32, 2.0)`` with ``f = sum(x * s)``
raised DTypeError ("x is float32 but y is float64"), as did ``tl.vmap`` and ``tl.jacfwd``, while
``tl.jit(tl.grad(f))`` and NumPy itself accepted it: the eager call turned the float into a
float64 array. A learning rate or scale passed as a float is the common case.

Oracle: NumPy's own result dtype for the primal, JAX float64 for the values; control: a float64
array for ``s`` is still refused with float32 data (tlaloc's one rule beyond NumPy's), so the
float is not simply cast whatever it is.
"""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import DTypeError

X32 = np.array([0.5, -1.0, 2.0], np.float32)


def scaled(x, s):
    return np.sum(np.sin(x) * s)


def test_numpy_keeps_float32():
    assert scaled(X32, 2.0).dtype == np.float32          # the oracle for the dtypes below


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_grad_value_and_grad_with_a_python_float(wrap):
    g = wrap(tl.grad(scaled))(X32, 2.0)
    assert np.asarray(g).dtype == np.float32
    np.testing.assert_allclose(np.asarray(g), 2.0 * np.cos(X32), rtol=1e-6)
    v, g = wrap(tl.value_and_grad(scaled))(X32, 2.0)
    assert np.asarray(v).dtype == np.float32 and float(v) == pytest.approx(float(scaled(X32, 2.0)), rel=1e-6)


def test_vmap_and_jacobians_with_a_python_float():
    xs = np.stack([X32, 2 * X32])
    out = tl.vmap(scaled, in_axes=(0, None))(xs, 0.5)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [scaled(x, 0.5) for x in xs], rtol=1e-6)

    def field(x, s):
        return np.sin(x) * s

    j = tl.jacfwd(field)(X32, 3.0)
    assert j.dtype == np.float32
    np.testing.assert_allclose(j, np.diag(3.0 * np.cos(X32)), rtol=1e-6)
    np.testing.assert_allclose(tl.jacrev(field)(X32, 3.0), j, rtol=1e-6)


def test_a_float64_array_promotes_float32_data_and_strict_mode_refuses_it():
    s64 = np.float64(2.0) * np.ones(())
    g = tl.grad(scaled)(X32, s64)
    assert g.dtype == np.float32                     # the cotangent has its primal's dtype
    with tl.numpy_dtype_promotion("strict"), pytest.raises(DTypeError, match="float dtypes never mix"):
        tl.grad(scaled)(X32, s64)
