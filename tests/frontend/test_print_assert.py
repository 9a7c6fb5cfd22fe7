"""``print`` and ``assert`` of computed values run when the transformed function is called,
once per call, in program order, as the plain function does (issue 14). The oracle is the
plain NumPy function's own output."""
import numpy as np
import pytest

import tlaloc as tl

X = np.array([0.1, 0.2, 0.3])


def printing(x):
    y = np.sin(x)
    print("y is", y)
    print("y is", y)                        # twice: effects are never merged (CSE)
    print("sum", np.sum(y), sep=": ", end=";\n")
    return np.sum(y ** 2)


def positive_sum(x):
    assert np.all(x > 0), "x must be positive"
    return np.sum(np.log(x))


def loop_printing(x):
    for i in range(3):
        x = x * 2.0
        print(i, x[0])
    return np.sum(x)


def branch_printing(x):
    if np.sum(x) > 0:
        print(x)
    return np.sum(x)


def plain_output(capsys, f, *args):
    capsys.readouterr()
    f(*args)
    return capsys.readouterr().out


CASES = {"grad": (tl.grad, X), "value_and_grad": (tl.value_and_grad, X),
         "grad_of_grad": (lambda f: tl.grad(tl.grad(f)), 0.3)}


@pytest.mark.parametrize("case", CASES)
def test_prints_what_the_function_prints_once_per_call(capsys, case):
    transform, arg = CASES[case]
    want = plain_output(capsys, printing, arg)
    assert want.count("y is") == 2
    g = transform(printing)
    capsys.readouterr()
    g(arg)
    assert capsys.readouterr().out == want
    g(arg)
    assert capsys.readouterr().out == want           # the next call prints again


def test_prints_in_a_static_loop_once_per_iteration(capsys):
    want = plain_output(capsys, loop_printing, X)
    tl.grad(loop_printing)(X)
    assert capsys.readouterr().out == want


def test_assert_is_checked_at_every_call():
    np.testing.assert_allclose(tl.grad(positive_sum)(X), 1 / X)
    with pytest.raises(AssertionError, match="x must be positive"):
        tl.grad(positive_sum)(-X)
    np.testing.assert_allclose(tl.grad(positive_sum)(2 * X), 1 / (2 * X))     # and passes again


def test_refusals_name_the_construct():
    with pytest.raises(tl.FenceError, match=r"test_print_assert\.py:\d+:\d+: `print` of a computed value "
                                            r"inside an `if`"):
        tl.grad(branch_printing)(X)
    with pytest.raises(tl.NoRuleError, match="debug_print.*print outside the jitted function"):
        tl.jit(tl.grad(printing))(X)
    with pytest.raises(tl.NoRuleError, match="debug_assert"):
        tl.vmap(tl.grad(positive_sum))(np.ones((2, 3)))
