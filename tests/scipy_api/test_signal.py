"""``tlaloc.scipy.signal.convolve``: SciPy's values, autograd's ``axes``/``dot_axes`` extension,
and gradients against autograd's convolve (float64)."""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest
import scipy.signal
from autograd.scipy.signal import convolve as a_convolve

import tlaloc as tl
from tlaloc.scipy.signal import convolve

r = np.random.RandomState(5)
SHAPES = [((7,), (3,)), ((3,), (7,)), ((5, 6), (3, 2)), ((2, 3), (4, 5)), ((4, 4), (4, 4)), ((3, 5), (4, 2))]


@pytest.mark.parametrize("mode", ["full", "valid", "same"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_values_equal_scipy(shapes, mode):
    A, B = r.randn(*shapes[0]), r.randn(*shapes[1])
    try:
        want = scipy.signal.convolve(A, B, mode=mode, method="direct")
    except ValueError:                     # valid mode needs one array inside the other
        with pytest.raises(tl.ArgumentError, match="at least as large"):
            convolve(A, B, mode=mode)
        return
    np.testing.assert_allclose(convolve(A, B, mode=mode), want, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(convolve(A, B, mode), want, rtol=1e-12, atol=1e-13)    # SciPy's positional mode


CONV_KW = [dict(axes=([2, 3], [2, 3]), dot_axes=([1], [0])),        # convnet: (N, Cin, H, W) * (Cin, Cout, kh, kw)
           dict(axes=([1], [0]), dot_axes=([0], [2])),
           dict(axes=([0, 2], [1, 3]), dot_axes=([], []))]
SHAPE_PAIRS = [((2, 3, 7, 6), (3, 4, 3, 2)), ((3, 5, 2), (4, 2, 3)), ((4, 2, 5), (3, 3, 2, 2))]


@pytest.mark.parametrize("mode", ["full", "valid", "same"])
@pytest.mark.parametrize("case", range(3))
def test_axes_and_dot_axes_match_autograd_values_and_gradients(case, mode):
    kw, (sa, sb) = CONV_KW[case], SHAPE_PAIRS[case]
    A, B = r.randn(*sa), r.randn(*sb)
    want = a_convolve(A, B, mode=mode, **kw)
    np.testing.assert_allclose(convolve(A, B, mode=mode, **kw), want, rtol=1e-12, atol=1e-13)
    weights = r.randn(*want.shape)

    def loss(A, B):
        return np.sum(np.tanh(convolve(A, B, mode=mode, **kw)) * weights)

    def a_loss(A, B):
        return anp.sum(anp.tanh(a_convolve(A, B, mode=mode, **kw)) * weights)
    got = tl.grad(loss, argnums=(0, 1))(A, B)
    for g, w in zip(got, autograd.grad(a_loss, argnum=(0, 1))(A, B)):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-13)


def scipy_same_loss(A, B):
    return np.sum(scipy.signal.convolve(A, B, "same") ** 2)


def test_scipy_convolve_in_user_code_is_mapped():
    A, B = r.randn(6, 5), r.randn(3, 2)
    want = autograd.grad(lambda A: anp.sum(a_convolve(A, B, mode="same") ** 2))(A)
    np.testing.assert_allclose(tl.grad(scipy_same_loss)(A, B), want, rtol=1e-12)


def test_bad_arguments_are_refused_by_name():
    A, B = np.ones((3, 4)), np.ones((2, 2))
    with pytest.raises(tl.ArgumentError, match="mode must be one of"):
        convolve(A, B, mode="circular")
    with pytest.raises(tl.ArgumentError, match="equally long"):
        convolve(A, B, axes=([0, 1], [0]))
    with pytest.raises(tl.ArgumentError, match="dot axis 1 of A has size 4"):
        convolve(A, B, axes=([0], [0]), dot_axes=([1], [1]))
    with pytest.raises(tl.ArgumentError, match="same number"):
        convolve(np.ones(3), B)
