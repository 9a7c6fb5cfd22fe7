"""Issue 14, part 3: Python constructs of real programs (containers, *args, raise, side effects).

Gradients are checked against autograd in float64; side effects and raised
exceptions are checked to happen at call time, once per call, as in plain Python.
"""
import functools

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import tlaloc as tl


class Objective:
    """A library-style objective: validates its input, raises on bad sizes, counts its calls."""

    def __init__(self, ndim):
        self.ndim = ndim
        self.n_calls = 0
        self.last_size = None

    def evaluate(self, x, *args, **kwargs):
        if len(x) != self.ndim:
            raise ValueError(f"expected {self.ndim} values, got {len(x)}")
        self.n_calls += 1
        self.last_size = len(x)
        return np.sum((x[1:] - x[:-1] ** 2) ** 2) + np.sum((1 - x[:-1]) ** 2)


def a_rosen(x):
    return anp.sum((x[1:] - x[:-1] ** 2) ** 2) + anp.sum((1 - x[:-1]) ** 2)


def through_wrapper(obj, x):
    return obj.evaluate(x, "unused", 3, scale=2.0)


def test_validating_counting_method_with_star_args():
    obj = Objective(3)
    g = tl.grad(obj.evaluate)
    x = np.array([0.3, -0.5, 1.2])
    np.testing.assert_allclose(g(x), autograd.grad(a_rosen)(x), rtol=1e-13)
    assert obj.n_calls == 1 and obj.last_size == 3            # the side effects ran at the call, once
    g(x)
    assert obj.n_calls == 2
    with pytest.raises(ValueError, match="expected 3 values, got 4"):
        g(np.ones(4))                                         # the user's exception, at call time
    assert obj.n_calls == 2                                   # the raise comes before the count
    w = tl.grad(through_wrapper, argnums=1)
    np.testing.assert_allclose(w(obj, x), autograd.grad(a_rosen)(x), rtol=1e-13)
    assert obj.n_calls == 3


def containers(x):
    states = []
    for i in range(len(x)):
        states.append(np.tanh(x[i] * 2.0))
    pairs = [a * b for a, b in zip(x, states)]
    table = {k: v ** 2 for k, v in enumerate(states)}
    t = tuple(states)
    assert isinstance(t, tuple)
    total = np.sum(np.array(pairs)) + sum(table.values()) + max(x) + min(x) + abs(t[0])
    return total + np.sum([np.sum(x), np.mean(x)]) + sum(list(x[1::2]))


def a_containers(x):
    states = [anp.tanh(x[i] * 2.0) for i in range(len(x))]
    pairs = [a * b for a, b in zip(x, states)]
    total = anp.sum(anp.array(pairs)) + sum(s ** 2 for s in states) + anp.max(x) + anp.min(x) + anp.abs(states[0])
    return total + anp.sum(x) + anp.mean(x) + anp.sum(x[1::2])


def test_containers_comprehensions_and_builtins_over_arrays():
    x = np.array([0.3, -0.7, 1.1, 0.2])
    np.testing.assert_allclose(tl.grad(containers)(x), autograd.grad(a_containers)(x), rtol=1e-12)


def refuses_raise_on_values(x):
    if np.sum(x) > 0:
        raise ValueError("positive")
    return np.sum(x)


def test_raise_under_a_condition_on_array_values_is_refused_at_the_users_line():
    with pytest.raises(tl.FenceError, match="`raise` under a condition on array values") as e:
        tl.grad(refuses_raise_on_values)(np.ones(2))
    assert f"{__file__}:{refuses_raise_on_values.__code__.co_firstlineno + 2}:" in str(e.value)


DATA = np.array([1.0, 2.0, 3.0])


def shape_changing_carry(r):
    a = 1.0
    for i in range(1, 3):
        a = a + 1.0 / (r + DATA + i)       # a: a Python float on trip 1, then an array of 3
    return np.sum(a)


def a_shape_changing_carry(r):
    a = 1.0
    for i in range(1, 3):
        a = a + 1.0 / (r + DATA + i)
    return anp.sum(a)


def test_second_order_through_a_loop_whose_carry_changes_shape():
    want = autograd.grad(autograd.grad(a_shape_changing_carry))(0.5)
    np.testing.assert_allclose(tl.grad(tl.grad(shape_changing_carry))(0.5), want, rtol=1e-13)
    np.testing.assert_allclose(tl.grad(shape_changing_carry)(0.5), autograd.grad(a_shape_changing_carry)(0.5),
                               rtol=1e-13)


LOG = []
COUNTS = {"calls": 0}


def logs_and_counts(x):
    LOG.append("called")
    COUNTS["calls"] += 1
    local = []
    local.append(x * 2.0)
    return np.sum(local[0] ** 2)


def logs_computed(x):
    y = np.sum(x ** 2)
    LOG.append(y)
    return y


def test_mutations_of_outside_containers_happen_at_each_call():
    del LOG[:]
    COUNTS["calls"] = 0
    g = tl.grad(logs_and_counts)
    assert LOG == [] and COUNTS["calls"] == 0          # nothing happens when the transform is built
    np.testing.assert_array_equal(g(np.ones(2)), [8.0, 8.0])
    g(np.ones(2))
    assert LOG == ["called", "called"] and COUNTS["calls"] == 2


def test_storing_a_computed_array_outside_is_refused_at_the_users_line():
    with pytest.raises(tl.FenceError, match="has_aux") as e:
        tl.grad(logs_computed)
    assert f"{__file__}:{logs_computed.__code__.co_firstlineno + 2}:" in str(e.value)


def test_a_container_the_function_mutates_is_not_rebuilt_each_call(caplog, monkeypatch):
    import logging
    monkeypatch.setenv("TLALOC_LOG_COMPILES", "1")
    g = tl.grad(logs_and_counts)
    with caplog.at_level(logging.WARNING, logger="tlaloc"):
        g(np.ones(2))
        g(np.ones(2))
    assert not [r for r in caplog.records if "changed since" in r.getMessage()]


def scaled_square(a, x):
    return np.sum(a * x ** 2)


def through_partial(x):
    return functools.partial(scaled_square, 3.0)(x)


def test_grad_of_a_numpy_function_and_through_functools_partial():
    np.testing.assert_allclose(tl.grad(np.sqrt)(2.0), autograd.grad(anp.sqrt)(2.0), rtol=1e-15)
    np.testing.assert_allclose(tl.grad(tl.grad(np.sqrt))(2.0), autograd.grad(autograd.grad(anp.sqrt))(2.0),
                               rtol=1e-14)
    np.testing.assert_array_equal(tl.grad(through_partial)(np.array([1.0, -2.0])), [6.0, -12.0])


def unpack_layers(w, shapes):
    for m, n in shapes:
        yield w[:m * n].reshape(m, n)
        w = w[m * n:]


def generator_net(w, x):
    for W in unpack_layers(w, [(2, 3), (3, 1)]):
        x = np.tanh(np.dot(x, W))
    return np.sum(x)


def a_generator_net(w, x):
    for m, n in [(2, 3), (3, 1)]:
        x = anp.tanh(anp.dot(x, anp.reshape(w[:m * n], (m, n))))
        w = w[m * n:]
    return anp.sum(x)


def test_a_generator_used_by_the_function():
    w, x = np.linspace(-1, 1, 9), np.arange(8.0).reshape(4, 2) / 8
    np.testing.assert_allclose(tl.grad(generator_net)(w, x), autograd.grad(a_generator_net)(w, x), rtol=1e-13)


def log_norm(params, x):
    if isinstance(x, list):
        return sum(map(functools.partial(log_norm, params), x))
    return np.log(np.sum(np.exp(params * x)))


def a_log_norm(params, xs):
    return sum(anp.log(anp.sum(anp.exp(params * x))) for x in xs)


def test_map_over_a_list_with_a_partial():
    xs = [np.array([0.1, 0.2]), np.array([-0.3, 0.5])]
    p = np.array([1.0, -2.0])
    np.testing.assert_allclose(tl.grad(log_norm)(p, xs), autograd.grad(a_log_norm)(p, xs), rtol=1e-13)


def only_star_args(*args):
    return np.sum(args[0])


def test_a_transformed_function_with_only_star_args_is_built_at_the_first_call():
    g = tl.grad(only_star_args)                      # the number of arguments is known at the call
    np.testing.assert_array_equal(g(np.arange(3.0)), np.ones(3))
    np.testing.assert_array_equal(tl.grad(only_star_args, argnums=1)(np.ones(2), np.ones(3)), np.zeros(3))


TWO_LAMBDAS = [lambda x: np.sum(x * 2.0), lambda x: np.sum(x * 3.0)]
CURRIED = lambda a: lambda x: np.sum(a * x ** 2)   # noqa: E731


def test_lambdas_sharing_a_line_are_told_apart_by_parameters_and_position():
    x = np.arange(3.0)
    np.testing.assert_array_equal(tl.grad(TWO_LAMBDAS[1])(x), np.full(3, 3.0))
    np.testing.assert_array_equal(tl.grad(TWO_LAMBDAS[0])(x), np.full(3, 2.0))
    np.testing.assert_array_equal(tl.grad(CURRIED(5.0))(x), 10.0 * x)


LOSSES = {
    "quadratic": lambda w: np.sum(w ** 2),
    "cubic": lambda w: np.sum(w ** 3)
    + np.sum(w),                                     # a lambda over two lines, inside a dict
}
SCHEDULE = [(1, lambda w: np.sum(np.sin(w))),
            (2, lambda w: np.sum(np.cos(w)))]


def test_lambdas_whose_lines_do_not_parse_alone_are_found_in_their_file():
    """Regression: a lambda inside a dict or a list over several lines was refused ("cannot parse
    the source of `<lambda>` on its own"): its lines alone are not Python. The file is parsed and
    the lambda found by its parameters and its instructions' positions. Oracle: autograd."""
    x = np.array([0.5, -1.0, 2.0])
    for f, twin in ((LOSSES["quadratic"], lambda w: anp.sum(w ** 2)),
                    (LOSSES["cubic"], lambda w: anp.sum(w ** 3) + anp.sum(w)),
                    (SCHEDULE[0][1], lambda w: anp.sum(anp.sin(w))),
                    (SCHEDULE[1][1], lambda w: anp.sum(anp.cos(w)))):
        np.testing.assert_allclose(tl.grad(f)(x), autograd.grad(twin)(x), rtol=1e-12)
