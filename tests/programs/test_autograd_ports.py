"""autograd's API spellings and its examples' loop shape, checked against autograd (issue 14).

autograd programs port by changing imports only: ``grad(f, argnum=...)``,
``elementwise_grad``, ``hessian_vector_product``, and ``for x in xs`` over the
rows of an argument while appending to a Python list.
"""
import autograd
import numpy as np
import pytest

import tlaloc as tl

from . import port_programs as pp
from .twin import autograd_twin

r = np.random.RandomState(7)


@pytest.mark.parametrize("steps", [3, 5])
def test_loop_over_rows_appending_to_a_list_matches_autograd(steps):
    W, U, xs = 0.5 * r.randn(4, 3), 0.5 * r.randn(3, 3), r.randn(steps, 2, 4)
    got = tl.grad(pp.sequence_loss, argnums=(0, 1))(W, U, xs)
    want = autograd.grad(autograd_twin(pp.sequence_loss), argnum=(0, 1))(W, U, xs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_loop_over_rows_respecialises_for_a_new_length():
    # negative control: one grad object, two sequence lengths; a frozen unroll would reuse 3 steps
    W, U = 0.5 * r.randn(4, 3), 0.5 * r.randn(3, 3)
    g = tl.grad(pp.sequence_loss)
    short, long = r.randn(3, 2, 4), r.randn(6, 2, 4)
    oracle = autograd.grad(autograd_twin(pp.sequence_loss))
    np.testing.assert_allclose(g(W, U, short), oracle(W, U, short), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g(W, U, long), oracle(W, U, long), rtol=1e-10, atol=1e-12)
    assert not np.allclose(g(W, U, long), oracle(W, U, short))


@pytest.mark.parametrize("transform", ["grad", "value_and_grad"])
def test_argnum_is_autograds_spelling_of_argnums(transform):
    alpha, beta, counts = np.exp(r.randn(4)), r.randn(4), r.poisson(3.0, 4).astype(float)
    got = getattr(tl, transform)(pp.pair_loss, argnum=(0, 1))(alpha, beta, counts)
    want = getattr(autograd, transform)(autograd_twin(pp.pair_loss), argnum=(0, 1))(alpha, beta, counts)
    got_g, want_g = (got[1], want[1]) if transform == "value_and_grad" else (got, want)
    for g, w in zip(got_g, want_g):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    np.testing.assert_allclose(tl.grad(pp.pair_loss, argnum=1)(alpha, beta, counts), want_g[1], rtol=1e-12)


def test_argnum_and_argnums_together_are_refused():
    with pytest.raises(tl.ArgumentError, match="either argnums= or autograd's argnum="):
        tl.grad(pp.pair_loss, argnums=1, argnum=0)


def test_elementwise_grad_matches_autograd():
    x = r.randn(3, 4)
    got = tl.elementwise_grad(pp.softplus_sq)(x)
    np.testing.assert_allclose(got, autograd.elementwise_grad(autograd_twin(pp.softplus_sq))(x), rtol=1e-12)
    s = 1.0 / (1.0 + np.exp(-x))                       # d/dx log1p(e^x)^2 = 2 log1p(e^x) sigmoid(x)
    np.testing.assert_allclose(got, 2 * np.log1p(np.exp(x)) * s, rtol=1e-12)


def test_elementwise_grad_is_the_jacobian_column_sum_when_not_diagonal():
    # autograd's definition (VJP with ones), not the diagonal: cumsum mixes positions
    x = r.randn(5)
    got = tl.elementwise_grad(pp.smoothed_cumsum)(x)
    np.testing.assert_allclose(got, autograd.elementwise_grad(autograd_twin(pp.smoothed_cumsum))(x), rtol=1e-12)
    jac = tl.jacrev(pp.smoothed_cumsum)(x)
    np.testing.assert_allclose(got, jac.sum(axis=0), rtol=1e-12)
    assert not np.allclose(got, np.diag(jac))


def test_hessian_vector_product_matches_autograd_and_the_hessian():
    x, v, A = r.randn(4), r.randn(4), r.randn(4, 4)
    got = tl.hessian_vector_product(pp.quartic_energy)(x, A, v)
    want = autograd.hessian_vector_product(autograd_twin(pp.quartic_energy))(x, A, v)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    np.testing.assert_allclose(got, tl.hessian(pp.quartic_energy)(x, A) @ v, rtol=1e-10)


def test_hessian_vector_product_refuses_a_vector_of_another_shape():
    x, A = r.randn(4), r.randn(4, 4)
    with pytest.raises(tl.ArgumentError, match=r"shape of argument 0, \(4,\), got \(3,\)"):
        tl.hessian_vector_product(pp.quartic_energy)(x, A, np.ones(3))
