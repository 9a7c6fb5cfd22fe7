"""``x.dtype`` read inside a differentiated function.

Regression: for an argument without an annotation, ``x.dtype`` was the aval's dtype when the
function was lowered, i.e. None, and ``np.zeros((2, 3), dtype=x.dtype)`` then built NumPy's
default float64 array: a float32 program computed in float64 (``np.array``, ``np.asarray``,
``np.arange``) or was refused by the float-mixing rule from generated code (``np.zeros``,
``np.ones``, ``np.full``, ``np.empty``, ``np.eye``, ``np.linspace``). The value read when the
transform is built must be the one the code reads when called: the dtype is now read at the
first call, and the function is built then, once per argument dtype.

Oracles: the plain NumPy function (value and dtype), and the float64 gradient by central
differences (the float32 gradient must be within float32's precision of it). The float64 cases
pass on the old code too (NumPy's default was the right dtype there): they are the controls.
"""
import numpy as np
import pytest

import tlaloc as tl

from .test_inplace_views import central_diff


def zeros_rows(x):
    X = np.zeros((2, 3), dtype=x.dtype)
    X[0] = x
    X[1] = x * 2
    return np.sum(X ** 2)


def ones_kw(x):
    return np.sum((np.ones((3,), dtype=x.dtype) + x) ** 2)


def full_kw(x):
    return np.sum(np.full((3,), 2.0, dtype=x.dtype) * x ** 2)


def eye_matmul(x):
    return np.sum((np.eye(3, dtype=x.dtype) * 3.0) @ x ** 2)


def arange_kw(x):
    return np.sum(np.arange(3, dtype=x.dtype) * x ** 2)


def array_kw(x):
    return np.sum(np.array([1.0, -2.0, 0.5], dtype=x.dtype) * np.sin(x))


def linspace_kw(x):
    return np.sum(np.linspace(0.0, 1.0, 3, dtype=x.dtype) * np.exp(x))


def zeros_positional(x):
    z = np.zeros((3,), x.dtype)
    z[1] = 1.0
    return np.sum((z + x) ** 3)


CASES = [zeros_rows, ones_kw, full_kw, eye_matmul, arange_kw, array_kw, linspace_kw, zeros_positional]
X = [0.3, -1.2, 0.8]


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_dtype_read_is_the_arguments(f, dtype):
    x = np.array(X, dtype)
    value, grad = tl.value_and_grad(f)(x)
    want = f(x.copy())
    assert np.asarray(value).dtype == np.asarray(want).dtype == dtype
    assert grad.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(value, want, rtol=tol)
    oracle = central_diff(f, np.array(X, np.float64))
    np.testing.assert_allclose(grad, oracle, rtol=10 * tol if dtype == np.float32 else 1e-7, atol=1e-6)


def test_one_function_called_with_both_dtypes_is_built_for_each():
    g = tl.grad(zeros_rows)
    g32, g64 = g(np.array(X, np.float32)), g(np.array(X, np.float64))
    assert g32.dtype == np.float32 and g64.dtype == np.float64
    np.testing.assert_allclose(g32, g64, rtol=1e-6)


def test_under_jit_and_vmap():
    x = np.array(X, np.float32)
    want = tl.grad(zeros_rows)(x)
    assert tl.jit(tl.grad(zeros_rows))(x).dtype == np.float32
    np.testing.assert_allclose(tl.jit(tl.grad(zeros_rows))(x), want, rtol=1e-6)
    batch = np.stack([x, 2 * x])
    out = tl.vmap(tl.grad(zeros_rows))(batch)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, np.stack([want, tl.grad(zeros_rows)(2 * x)]), rtol=1e-6)


def test_an_annotated_dtype_is_read_when_the_function_is_defined():
    from tlaloc.typing import F32

    @tl.grad
    def f(x: F32["n"]):
        return np.sum((np.ones(3, dtype=x.dtype) + x) ** 2)
    assert f(np.array(X, np.float32)).dtype == np.float32
