"""NumPy functions with no tlaloc equivalent, called on sizes read from the arguments' shapes.

``i, j = np.triu_indices(x.shape[0], k=1)`` (a pairwise energy) was refused ("`numpy.triu_indices`
has no tlaloc equivalent yet"), though the same call with a literal ``3`` ran: a size is known at
the first call, and the function is now built then, running NumPy's function on the number (found
by a new user's Lennard-Jones program, session 15).

Oracle: JAX float64 with the indices computed by NumPy. Negative control: a NumPy function with no
equivalent that is given an array of floats is still refused by name.
"""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import TlalocError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


def lennard_jones(pos):
    n = pos.shape[0]
    i, j = np.triu_indices(n, k=1)
    d = np.linalg.norm(pos[i] - pos[j], axis=-1)
    return np.sum(4.0 * (d ** -12 - d ** -6))


def lower_triangle_energy(x):
    r, c = np.tril_indices(len(x), -1)
    return np.sum(x[r, c] ** 2 * (r + 1))


P = np.array([[0.0, 0.0, 0.0], [1.1, 0.0, 0.0], [0.0, 1.2, 0.0], [0.3, 0.4, 1.0]])


def test_triu_indices_of_a_shape():
    i, j = np.triu_indices(4, k=1)
    want = jax.grad(lambda p: jnp.sum(4.0 * (jnp.linalg.norm(p[i] - p[j], axis=-1) ** -12
                                             - jnp.linalg.norm(p[i] - p[j], axis=-1) ** -6)))(P)
    np.testing.assert_allclose(tl.grad(lennard_jones)(P), np.asarray(want), rtol=1e-13)
    np.testing.assert_allclose(tl.jit(tl.grad(lennard_jones))(P), np.asarray(want), rtol=1e-13)
    # one build per shape: a 3-atom system gets its own 3 pairs
    i3, j3 = np.triu_indices(3, k=1)
    want3 = jax.grad(lambda p: jnp.sum(4.0 * (jnp.linalg.norm(p[i3] - p[j3], axis=-1) ** -12
                                              - jnp.linalg.norm(p[i3] - p[j3], axis=-1) ** -6)))(P[:3])
    np.testing.assert_allclose(tl.grad(lennard_jones)(P[:3]), np.asarray(want3), rtol=1e-13)


def test_tril_indices_of_a_length():
    x = np.arange(16.0).reshape(4, 4) / 7
    r, c = np.tril_indices(4, -1)
    want = np.zeros_like(x)
    want[r, c] = 2 * x[r, c] * (r + 1)
    np.testing.assert_allclose(tl.grad(lower_triangle_energy)(x), want, rtol=1e-15)


def unwrap_floats(x):
    return np.sum(np.unwrap(x))


def test_float_arrays_are_still_refused_by_name():
    with pytest.raises(TlalocError, match="`numpy.unwrap` has no tlaloc equivalent"):
        tl.grad(unwrap_floats)(np.ones(3))


def pair_energy(x, n):
    i, j = np.triu_indices(n, k=1)
    return np.sum(x[i, j] ** 2)


def test_a_size_given_as_an_integer_argument():
    # adversarial pass: `np.triu_indices(n)` with an integer argument n was refused at tl.grad(f)
    x = np.arange(16.0).reshape(4, 4) / 5
    for n in (3, 4):
        i, j = np.triu_indices(n, k=1)
        want = np.zeros_like(x)
        want[i, j] = 2 * x[i, j]
        np.testing.assert_allclose(tl.grad(pair_energy)(x, n), want, rtol=1e-15)
