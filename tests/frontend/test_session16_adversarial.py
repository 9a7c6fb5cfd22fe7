"""Crashes and wrong results an adversarial helper found (session 16), each now fixed.

- zero-size Jacobians came back with the wrong shape eagerly (a (0, 0) constant rendered as
  ``np.asarray([])``, of shape (0,)); oracle: JAX's shapes;
- under tl.jit an index out of range was clamped for the value but its gradient was 0 (the
  scatter dropped the write); oracle: JAX (which clamps both);
- a Python int beyond int64 wrapped silently under tl.jit (2**63 -> -2**63 + 1);
- bare internal errors: a list given to an nn layer, non-str checkpoint metadata, a write out of
  range and a matmul shape mismatch in eager generated code (no user location), and a checkpoint
  write that failed naming the hidden temporary file.
"""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import ArgumentError, ShapeError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


def test_zero_size_jacobians_have_jax_shapes():
    assert tl.jacrev(lambda x: x ** 2)(np.zeros(0)).shape == (0, 0)
    assert tl.jacfwd(lambda x: x ** 2)(np.zeros(0)).shape == (0, 0)
    assert tl.hessian(lambda x: np.sum(x ** 2))(np.zeros((0, 2))).shape == (0, 2, 0, 2)
    assert tl.jacrev(lambda x: np.sum(x ** 2))(np.zeros((0, 3))).shape == (0, 3)


def test_out_of_range_index_under_jit_is_clamped_for_the_gradient_too():
    def f(x, i):
        return np.sum(x[i] ** 2)

    x = np.arange(10.0)
    want = np.asarray(jax.grad(lambda x, i: jnp.sum(x[i] ** 2))(x, 20))
    assert float(tl.jit(f)(x, 20)) == 81.0
    np.testing.assert_array_equal(np.asarray(tl.jit(tl.grad(f))(x, 20)), want)
    np.testing.assert_array_equal(np.asarray(tl.jit(tl.grad(f))(x, 3)), 6.0 * (np.arange(10) == 3))   # control


def test_python_ints_beyond_int64_are_refused():
    with pytest.raises(ArgumentError, match="does not fit in int64"):
        tl.jit(lambda x: x + 1)(2 ** 63)
    with pytest.raises(ArgumentError, match="does not fit in int64"):
        tl.grad(lambda x, n: np.sum(x) * n)(np.ones(2), 2 ** 64 + 5)
    assert int(tl.jit(lambda x: x + 1)(2 ** 62)) == 2 ** 62 + 1                # control


def test_errors_name_the_argument_and_the_user_line(tmp_path):
    with pytest.raises(ArgumentError, match="got a Python list; convert it first"):
        tl.nn.MLP((2, 3), key=0)([[0.1, 0.2]])
    with pytest.raises(ArgumentError, match="metadata keys must be str"):
        tl.save_checkpoint(tmp_path / "a.safetensors", {"a": np.ones(1)}, None, metadata={1: 2})
    with pytest.raises(ArgumentError, match="metadata must be a dict"):
        tl.save_checkpoint(tmp_path / "a.safetensors", {"a": np.ones(1)}, None, metadata="abc")

    def write(x, i):
        y = x * 1.0
        y[i] = 0.0
        return np.sum(y ** 2)

    with pytest.raises(ShapeError, match=r"out of bounds.*test_session16_adversarial.py:\d+: y\[i\] = 0.0"):
        tl.grad(write)(np.ones(3), 20)
    with pytest.raises(ShapeError, match=r"matmul.*at: test_session16_adversarial.py"):
        tl.grad(lambda w, x: np.sum(x @ w))(np.ones((2, 2)), np.ones((4, 3)))


def test_a_directory_that_cannot_hold_files_is_named():
    with pytest.raises(OSError, match="cannot write '/proc/c.safetensors'"):
        tl.save_checkpoint("/proc/c.safetensors", {"a": np.ones(1)}, None)


def test_a_transform_of_something_not_callable_is_refused_where_applied():
    with pytest.raises(ArgumentError, match="vmap: expected a function to transform, got ndarray"):
        tl.vmap(None)(np.ones(2))
    with pytest.raises(ArgumentError, match="jit: expected a function to transform, got str"):
        tl.jit("f")
    with pytest.raises(ArgumentError, match="grad: expected a function"):
        tl.grad(3.0)
