"""NumPy forms from a new user's programs that crashed or were refused (session 16).

Each was a crash with an internal error, a wrong refusal, or a message naming the wrong thing:
``np.tensordot`` with a constant made in the function (AttributeError in the VJP rule), a frozen
SciPy distribution with a differentiated parameter (RecursionError), ``x.real`` ("returns a
function"), a Python list as an operand (``x * [1, 2, 3]``, ``np.concatenate([x, [1.0]])``),
``np.r_`` / ``np.c_`` (rank unknown), and ``scipy.stats.laplace.logpdf`` refused as
"scipy.stats.logpdf". Oracle: JAX float64; forward values against NumPy itself.
"""
import numpy as np
import pytest
import scipy.stats

import tlaloc as tl
from tlaloc.errors import FenceError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy
jstats = pytest.importorskip("jax.scipy.stats")

X = np.array([0.3, 1.2, -0.5])
M = np.arange(6.0).reshape(3, 2)


def _grads(f, f_jax, x=X):
    want = np.asarray(jax.grad(f_jax)(x))
    np.testing.assert_allclose(tl.grad(f)(x), want, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(tl.jit(tl.grad(f))(x), want, rtol=1e-13, atol=1e-15)
    assert float(tl.jit(f)(x)) == pytest.approx(float(f(x)), rel=1e-13)


def test_tensordot_with_a_constant_made_inside():
    _grads(lambda x: np.sum(np.tensordot(x, M, axes=1) ** 2), lambda x: jnp.sum(jnp.tensordot(x, M, axes=1) ** 2))
    _grads(lambda x: np.sum(np.tensordot(np.ones((2, 3)), x, axes=1) ** 3),
           lambda x: jnp.sum(jnp.tensordot(jnp.ones((2, 3)), x, axes=1) ** 3))


def test_frozen_distribution_with_a_differentiated_parameter():
    _grads(lambda x: np.sum(scipy.stats.norm(x[0], 2.0).logpdf(x)),
           lambda x: jnp.sum(jstats.norm.logpdf(x, x[0], 2.0)))
    _grads(lambda x: np.sum(scipy.stats.norm(loc=0.0, scale=np.exp(x[1])).logpdf(x)),
           lambda x: jnp.sum(jstats.norm.logpdf(x, 0.0, jnp.exp(x[1]))))


def test_real_imag_conjugate_of_real_arrays():
    _grads(lambda x: np.sum(x ** 2).real + np.sum(x.imag) + np.sum(x.conjugate() * x),
           lambda x: jnp.sum(x ** 2).real + jnp.sum(x.imag) + jnp.sum(x.conjugate() * x))


def test_python_lists_as_operands():
    _grads(lambda x: np.sum(x * [1.0, 2.0, 3.0]) + np.sum(np.concatenate([x, [1.0, 4.0]]) ** 2),
           lambda x: jnp.sum(x * jnp.array([1.0, 2.0, 3.0])) + jnp.sum(jnp.concatenate([x, jnp.array([1.0, 4.0])]) ** 2))
    _grads(lambda x: np.sum(np.where(x > 0, x, [0.5, 0.5, 0.5]) ** 2),
           lambda x: jnp.sum(jnp.where(x > 0, x, jnp.array([0.5, 0.5, 0.5])) ** 2))


def test_index_concatenation_r_and_c():
    _grads(lambda x: np.sum(np.r_[x, 1.0, x[:1]] ** 2), lambda x: jnp.sum(jnp.r_[x, 1.0, x[:1]] ** 2))
    _grads(lambda x: np.sum((np.c_[np.ones(3), x] @ np.array([1.0, 2.0])) ** 2),
           lambda x: jnp.sum((jnp.c_[jnp.ones(3), x] @ jnp.array([1.0, 2.0])) ** 2))
    np.testing.assert_array_equal(np.asarray(tl.jit(lambda x: np.c_[np.ones(3), x])(X)), np.c_[np.ones(3), X])


def test_refusals_name_what_they_refuse():
    with pytest.raises(FenceError, match="np.vectorize"):
        tl.grad(lambda x: np.sum(np.vectorize(lambda t: t ** 2)(x)))(X)
    with pytest.raises(FenceError, match=r"`scipy\.stats\.laplace\.logpdf` has no tlaloc equivalent"):
        tl.grad(lambda x: np.sum(scipy.stats.laplace.logpdf(x)))(X)
