"""tl.check_grads, tl.check_custom_vjp, tl.check_custom_jvp: pass on right
derivatives, fail (AssertionError, with a clear message) on wrong ones."""
import numpy as np
import pytest

import tlaloc as tl

from . import rules as R

X = np.array([0.3, -0.7, 1.1])
Y = np.array([1.5, 2.0, -0.4])


def smooth(x, y):
    return np.sin(x) * y + x ** 3 / (1.0 + y * y)


def smooth_total(x, y):
    return smooth(x, y).sum()


def with_matmul(a, b):
    return np.tanh(a @ b).sum(axis=0)


# -- right derivatives pass ----------------------------------------------------------------------------

@pytest.mark.parametrize("order", [1, 2])
def test_passes_on_smooth_functions(order):
    tl.check_grads(smooth, (X, Y), order=order)
    a = np.arange(6.0).reshape(2, 3) / 7.0
    tl.check_grads(with_matmul, (a, a.T.copy()), order=order)


def test_passes_in_float32_with_float32_tolerances():
    tl.check_grads(smooth, (X.astype(np.float32), Y.astype(np.float32)), order=2)


def test_passes_on_correct_custom_rules():
    tl.check_grads(R.softplus_loss, (X, Y), order=2, modes=("rev",))   # vjp-only: reverse modes
    tl.check_grads(R.xsin_loss, (X,), order=2)                          # jvp rule, both modes
    tl.check_grads(R.scaled_exp_loss, (X, np.float64(0.7)), order=2)
    tl.check_grads(R.in_for_loop, (X, Y), order=1, modes=("rev",))
    tl.check_custom_vjp(R.softplus, (X,))
    tl.check_custom_vjp(R.scaled_exp, (X, np.float64(0.7)))
    tl.check_custom_jvp(R.xsin, (X,))
    tl.check_custom_jvp(R.scaled_exp, (X, np.float64(0.7)))


def test_checks_transformed_functions_too():
    tl.check_grads(tl.grad(smooth_total, argnums=(0, 1)), (X, Y), order=2, modes=("fwd",))


def test_curried_form_as_autograd_spells_it():
    # autograd.test_util.check_grads(f, modes=...)(*args) ports by import; a wrong rule still fails
    tl.check_grads(smooth, modes=["rev"])(X, Y)
    with pytest.raises(AssertionError, match="check_grads of `clipped_square`"):
        tl.check_grads(R.clipped_square, modes=["rev"], order=1)(X)


# -- wrong derivatives fail ----------------------------------------------------------------------------

def test_fails_on_a_wrong_custom_rule_in_reverse_mode():
    with pytest.raises(AssertionError) as info:
        tl.check_grads(R.clipped_square, (X,), order=1, modes=("rev",))
    msg = str(info.value)
    assert "check_grads of `clipped_square`" in msg and "reverse mode (order 1)" in msg


def test_fails_on_a_wrong_custom_rule_in_forward_mode():
    with pytest.raises(AssertionError) as info:
        tl.check_grads(R.tripled_square, (X,), order=1, modes=("fwd",))
    assert "forward mode (order 1)" in str(info.value)


def test_second_order_catches_a_rule_right_only_at_first_order():
    # the reverse rule is right, the jvp rule it is paired with is not: only the
    # forward-over-reverse check (order 2) sees it
    wrong = tl.custom_vjp_jvp(R._scaled_exp, fwd=R._scaled_exp_fwd, bwd=R._scaled_exp_bwd,
                              jvp=_wrong_jvp)
    tl.check_grads(wrong, (X, np.float64(0.7)), order=1, modes=("rev",))
    with pytest.raises(AssertionError):
        tl.check_grads(wrong, (X, np.float64(0.7)), order=1, modes=("fwd",))


def _wrong_jvp(primals, tangents):
    (x, a), (tx, _ta) = primals, tangents
    y = np.exp(a * x)
    return y, y * a * tx                       # forgets the tangent of a


@pytest.mark.parametrize("f", [R.clipped_square, R.weighted_stop])
def test_check_custom_vjp_fails_a_rule_that_is_not_the_derivative(f):
    with pytest.raises(AssertionError) as info:
        tl.check_custom_vjp(f, (X,))
    msg = str(info.value)
    assert f"check_custom_vjp of `{f.__name__}`" in msg
    assert "worst at index" in msg and "by design" in msg


def test_check_custom_jvp_fails_a_wrong_forward_rule():
    with pytest.raises(AssertionError) as info:
        tl.check_custom_jvp(R.tripled_square, (X,))
    assert "check_custom_jvp of `tripled_square`" in str(info.value)


def test_check_grads_detects_a_wrong_primitive_rule():
    # negative control for the machinery itself: a hand-broken derivative is caught
    @tl.custom_jvp
    def off_by_a_bit(x):
        return np.sin(x)

    @off_by_a_bit.defjvp
    def _rule(p, t):
        return np.sin(p[0]), t[0] * np.cos(p[0]) * 1.001
    with pytest.raises(AssertionError):
        tl.check_grads(off_by_a_bit, (X,), order=1)


# -- refusals ----------------------------------------------------------------------------------------

def test_forward_mode_of_a_vjp_only_rule_is_refused():
    with pytest.raises(tl.NoRuleError, match="softplus"):
        tl.check_grads(R.softplus_loss, (X, Y), order=1, modes=("fwd",))


def test_bad_arguments():
    with pytest.raises(tl.ArgumentError):
        tl.check_grads(smooth, (X, Y), modes=("sideways",))
    with pytest.raises(tl.ArgumentError):
        tl.check_custom_vjp(smooth, (X, Y))
    with pytest.raises(tl.ArgumentError):
        tl.check_custom_jvp(R.softplus, (X,))
