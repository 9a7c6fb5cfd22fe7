"""What compiled code refuses, by name and with the fix; run-time checks that raise."""
import numpy as np
import pytest

import tlaloc as tl

from . import programs as P


def test_bounded_while_overflow_raises_at_run_time():
    with pytest.raises(tl.TlalocError, match="max_trips=8"):
        tl.jit(P.while_overflow)(np.ones(2))


def test_cond_branches_with_different_shapes_are_refused():
    def f(x):
        if x.sum() > 0:
            y = x * 2.0
        else:
            y = 0.0
        return y

    with pytest.raises(tl.ShapeError, match="one shape"):
        tl.jit(f)(np.ones(3))


def test_scalar_loop_start_is_peeled_exactly():
    def f(m, v):
        acc = 0.0
        for row in m:
            acc = np.tanh(acc + row * v)
        return acc.sum()

    m, v = np.arange(6.0).reshape(3, 2) / 7, np.array([0.5, -0.3])
    np.testing.assert_allclose(np.asarray(tl.jit(f)(m, v)), f(m, v), rtol=1e-12)
    with pytest.raises(tl.ShapeError, match="start the variable with its final shape"):
        tl.jit(tl.grad(f))(m, v)


def test_boolean_mask_indexing_is_refused():
    def f(x):
        return x[x > 0].sum()

    with pytest.raises(tl.TlalocError, match="mask"):
        tl.jit(f)(np.array([1.0, -1.0]))


def test_grad_of_a_jitted_function_says_what_to_write():
    def f(x):
        return (x * x).sum()

    with pytest.raises(tl.FenceError, match=r"tl\.jit\(tl\.grad\(f\)\)"):
        tl.grad(tl.jit(f))
    np.testing.assert_allclose(tl.jit(tl.grad(f))(np.arange(3.0)), 2 * np.arange(3.0))


def _prefix_energy(x, n):
    return np.sum(x[:n] ** 2)


def test_traced_integer_slice_bound_names_the_argument_and_static_argnums():
    # regression: the error said only "compiled code needs a size for every axis"
    with pytest.raises(tl.TlalocError, match=r"integer argument `n`: mark it static .*static_argnums"):
        tl.jit(_prefix_energy)(np.arange(5.0), 3)
    # the fix the message names works, and gives NumPy's value
    assert float(tl.jit(_prefix_energy, static_argnums=1)(np.arange(5.0), 3)) == 5.0


def test_unknown_size_without_an_integer_argument_does_not_blame_one():
    def f(x, y):
        return np.sum(x[: x.shape[0] // 2] * y)

    # negative control for the hint: a size that depends on no integer argument compiles
    assert float(tl.jit(f)(np.arange(4.0), 2.0)) == 2.0
