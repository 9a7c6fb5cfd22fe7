"""jacfwd / jacrev / hessian are DXIR transforms (a vmap over a basis), so they nest.

Over the rows of tests/ad/cases.py that test_table_forward.py uses (float64 array
arguments, one argnum): ``tl.jacfwd(tl.jacrev(f))`` and ``tl.jit(tl.hessian(f))``
against ``jax.hessian``, ``tl.vmap(tl.jacrev(f))`` against a loop of ``jax.jacrev``,
and ``tl.grad`` of a function that calls ``tl.hessian`` against JAX's, all float64.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl
import tlaloc.numpy as tnp

from tests.forward.test_table_forward import ROWS, hessian_key
from tests.jit.jax_twin import call

jax.config.update("jax_enable_x64", True)
RTOL, ATOL = 1e-9, 1e-10


def _jargs(args):
    return [jnp.asarray(a) for a in args]


@pytest.mark.parametrize("case,points", ROWS)
def test_jacfwd_of_jacrev_equals_jax_hessian(case, points):
    args = points[0]
    a = case.argnums % len(args)
    got = tl.jacfwd(tl.jacrev(case.fn, argnums=a), argnums=a)(*args)
    want = call(hessian_key(case), lambda: jax.hessian(case.twin, argnums=case.argnums), *_jargs(args))
    np.testing.assert_allclose(got, np.asarray(want), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case,points", ROWS)
def test_vmap_of_jacrev_equals_jax(case, points):
    args = points[0]
    a = case.argnums % len(args)
    rng = np.random.default_rng(3)
    batch = np.stack([args[a] + 0.01 * rng.standard_normal(args[a].shape) for _ in range(2)])
    in_axes = tuple(0 if k == a else None for k in range(len(args)))
    batched = [batch if k == a else x for k, x in enumerate(args)]
    got = tl.vmap(tl.jacrev(case.fn, argnums=a), in_axes=in_axes)(*batched)
    want = np.stack([np.asarray(call(("jacrev", case.name, a), lambda: jax.jacrev(case.twin, argnums=a),
                                     *_jargs([row if k == a else x for k, x in enumerate(args)]))) for row in batch])
    np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case,points", ROWS)
def test_jit_of_hessian_equals_jax(case, points):
    args = points[0]
    a = case.argnums % len(args)
    got = tl.jit(tl.hessian(case.fn, argnums=a))(*args)
    want = call(hessian_key(case), lambda: jax.hessian(case.twin, argnums=case.argnums), *_jargs(args))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=RTOL, atol=ATOL)


def _prod_rows(x):
    return tnp.sum(tnp.prod(x, axis=1) * tnp.arange(1.0, 1.0 + x.shape[0]))


def _prod_rows_jax(x):
    return jnp.sum(jnp.prod(x, axis=1) * jnp.arange(1.0, 1.0 + x.shape[0]))


#: no zero, one zero per row, two zeros in a row (the Hessian of a product is exact only without division)
_PROD_POINTS = [np.array([[1.5, -2.0, 0.5], [0.7, 3.0, -1.1]]),
                np.array([[1.5, 0.0, 0.5], [0.0, 3.0, -1.1]]),
                np.array([[0.0, 0.0, 0.5], [0.7, 3.0, -1.1]])]


@pytest.mark.parametrize("k", range(len(_PROD_POINTS)))
def test_derivatives_of_prod_with_zeros_equal_jax(k):
    """The second derivative of prod is a composite (a division-free product of all others):
    compiled, and differentiated once more eagerly, it equals JAX where entries are zero."""
    x = _PROD_POINTS[k]
    want = np.asarray(jax.hessian(_prod_rows_jax)(jnp.asarray(x)))
    np.testing.assert_allclose(np.asarray(tl.jit(tl.hessian(_prod_rows))(x)), want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(tl.hessian(_prod_rows)(x), want, rtol=RTOL, atol=ATOL)
    third = np.asarray(jax.jacfwd(jax.hessian(_prod_rows_jax))(jnp.asarray(x)))
    np.testing.assert_allclose(tl.jacfwd(tl.hessian(_prod_rows))(x), third, rtol=RTOL, atol=ATOL)
    assert np.abs(want).max() > 0 and np.abs(third).max() > 0       # negative control: not all zeros


def _f(x):
    return tnp.sum(tnp.sin(x) * x[0]) + tnp.sum(tnp.exp(x) * x)


def _f_jax(x):
    return jnp.sum(jnp.sin(x) * x[0]) + jnp.sum(jnp.exp(x) * x)


def _trace_of_hessian(x):
    return tnp.sum(tnp.diagonal(tl.hessian(_f)(x)) * x)


def test_grad_of_a_function_calling_hessian():
    x = np.array([0.3, -1.2, 0.7])
    got = tl.grad(_trace_of_hessian)(x)
    want = jax.grad(lambda x: jnp.sum(jnp.diagonal(jax.hessian(_f_jax)(x)) * x))(jnp.asarray(x))
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12, atol=1e-12)
    # the same derivative at another shape: built again for that shape, not reused
    x4 = np.array([0.1, 0.2, -0.3, 0.4])
    want4 = jax.grad(lambda x: jnp.sum(jnp.diagonal(jax.hessian(_f_jax)(x)) * x))(jnp.asarray(x4))
    np.testing.assert_allclose(tl.grad(_trace_of_hessian)(x4), np.asarray(want4), rtol=1e-12, atol=1e-12)


def test_jacobians_are_one_graph_with_a_source():
    x = np.array([0.3, -1.2, 0.7])
    j = tl.jacrev(_f)
    j(x)
    assert "def jacrev__f" in tl.source(j) and "for " not in tl.source(j)   # a vmap, not a loop


def test_negative_control_a_perturbed_hessian_is_caught():
    case, points = ROWS[0].values
    args = points[0]
    a = case.argnums % len(args)
    got = tl.jacfwd(tl.jacrev(case.fn, argnums=a), argnums=a)(*args)
    want = np.asarray(jax.hessian(case.twin, argnums=a)(*_jargs(args)))
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(got, want * (1 + 1e-7) + 1e-7, rtol=RTOL, atol=ATOL)
