"""autograd's helper modules under tlaloc's names (issue 14): ``tlaloc.misc`` (flatten,
flatten_func, optimizers), ``tlaloc.extend`` (primitive/defvjp/defjvp), grad of a size-1
output, and ``f(x, *args)`` -- each checked against autograd in float64."""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from autograd.extend import defvjp as a_defvjp, primitive as a_primitive
from autograd.misc import flatten as a_flatten
from autograd.misc import optimizers as a_optimizers
from autograd.misc.flatten import flatten_func as a_flatten_func

import tlaloc as tl
from tlaloc.extend import defjvp, defvjp, primitive
from tlaloc.misc import flatten, optimizers
from tlaloc.misc.flatten import flatten_func

r = np.random.RandomState(3)
PARAMS = [(r.randn(3, 4), r.randn(4)), (r.randn(4, 2), r.randn(2))]
X = r.randn(5, 3)


def mlp_loss(params, x):
    h = x
    for W, b in params:
        h = np.tanh(np.dot(h, W) + b)
    flat, _ = flatten(params)
    return np.sum(h ** 2) + 0.1 * np.dot(flat, flat)


def a_mlp_loss(params, x):
    h = x
    for W, b in params:
        h = anp.tanh(anp.dot(h, W) + b)
    flat, _ = a_flatten(params)
    return anp.sum(h ** 2) + 0.1 * anp.dot(flat, flat)


def _same(got, want, rtol=1e-12):
    np.testing.assert_allclose(flatten(got)[0], a_flatten(want)[0], rtol=rtol, atol=1e-14)


# -- flatten / ravel_pytree -------------------------------------------------------------------------

def test_flatten_matches_autograds_order_and_round_trips():
    tree = {"b": np.arange(3.0), "a": (np.ones((2, 2)), 2.5)}
    flat, unflatten = flatten(tree)
    np.testing.assert_array_equal(flat, a_flatten(tree)[0])      # dict keys sorted, as autograd
    back = unflatten(flat * 2)
    np.testing.assert_array_equal(back["a"][0], 2 * np.ones((2, 2)))
    assert back["a"][1].shape == () and back["b"].shape == (3,)
    import tlaloc.misc
    assert tl.ravel_pytree is tlaloc.misc.ravel_pytree


def test_unflatten_restores_each_leafs_dtype_and_refuses_a_wrong_length():
    flat, unflatten = tl.ravel_pytree((np.arange(3, dtype=np.int64), np.ones(2, np.float32)))
    assert flat.dtype == np.float64
    ints, floats = unflatten(flat)
    assert ints.dtype == np.int64 and floats.dtype == np.float32
    with pytest.raises(tl.ArgumentError, match=r"shape \(5,\)"):
        unflatten(np.zeros(4))


def test_grad_through_flatten_matches_autograd():
    _same(tl.grad(mlp_loss)(PARAMS, X), autograd.grad(a_mlp_loss)(PARAMS, X))


def test_flatten_func_differentiates_through_unflatten():
    flat_loss, unflatten, x0 = flatten_func(mlp_loss, PARAMS)
    a_flat_loss = a_flatten_func(a_mlp_loss, PARAMS)[0]
    np.testing.assert_allclose(tl.grad(flat_loss)(x0, X), autograd.grad(a_flat_loss)(x0, X), rtol=1e-12)
    v = r.randn(x0.size)
    np.testing.assert_allclose(tl.hessian_vector_product(flat_loss)(x0, X, v),
                               autograd.hessian_vector_product(a_flat_loss)(x0, X, v), rtol=1e-10)
    assert flat_loss(x0, X).shape == (1,)         # a scalar objective flattened, as in autograd


# -- optimizers -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sgd", "rmsprop", "adam"])
def test_optimizers_take_autograds_steps(name):
    seen = []

    def grad(params, i):
        return tl.grad(mlp_loss)(params, X + 0.01 * i)

    def a_grad(params, i):
        return autograd.grad(a_mlp_loss)(params, X + 0.01 * i)

    got = getattr(optimizers, name)(grad, PARAMS, num_iters=4, step_size=0.05,
                                    callback=lambda p, i, g: seen.append(i))
    want = getattr(a_optimizers, name)(a_grad, PARAMS, num_iters=4, step_size=0.05)
    _same(got, want, rtol=1e-11)
    assert seen == [0, 1, 2, 3]
    assert not np.allclose(flatten(got)[0], flatten(PARAMS)[0])     # it moved


# -- grad of a size-1 output (autograd's rule) -------------------------------------------------------

def keepdims_energy(x):
    return np.sum(x ** 2, axis=0, keepdims=True) * 0.5


def vector_energy(x):
    return x ** 2


def test_grad_of_a_size_one_output_is_autograds():
    x = r.randn(4)
    want = autograd.grad(lambda x: anp.sum(x ** 2, axis=0, keepdims=True) * 0.5)(x)
    np.testing.assert_allclose(tl.grad(keepdims_energy)(x), want, rtol=1e-14)
    value, g = tl.value_and_grad(keepdims_energy)(x)
    assert value.shape == (1,)
    np.testing.assert_allclose(tl.jit(tl.grad(keepdims_energy))(x), want, rtol=1e-14)
    np.testing.assert_allclose(tl.vmap(tl.grad(keepdims_energy))(np.stack([x, 2 * x])), [want, 2 * want],
                               rtol=1e-14)


@pytest.mark.parametrize("transform", [tl.grad, lambda f: tl.jit(tl.grad(f))])
def test_grad_of_a_larger_output_is_still_refused(transform):
    with pytest.raises(tl.GradientError, match=r"scalar output.*shape \(3,\)"):
        transform(vector_energy)(np.ones(3))


# -- f(x, *args) ------------------------------------------------------------------------------------

def weighted(x, *args):
    return np.sum(args[0] * x ** 2) + (args[1] if len(args) > 1 else 0.0)


def test_star_args_receive_the_extra_arguments():
    x, w = r.randn(3), r.randn(3)
    np.testing.assert_allclose(tl.grad(weighted)(x, w), 2 * w * x, rtol=1e-14)
    np.testing.assert_allclose(tl.grad(weighted, argnums=1)(x, w, 1.0), x ** 2, rtol=1e-14)


# -- tlaloc.extend ----------------------------------------------------------------------------------

@primitive
def lse(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


def lse_vjp(ans, x):
    return lambda g: np.full(x.shape, g) * np.exp(x - np.full(x.shape, ans))


defvjp(lse, lse_vjp)


@a_primitive
def a_lse(x):
    m = anp.max(x)
    return m + anp.log(anp.sum(anp.exp(x - m)))


a_defvjp(a_lse, lambda ans, x: lambda g: anp.full(x.shape, g) * anp.exp(x - anp.full(x.shape, ans)))


@primitive
def scaled_identity(x):
    return x


defvjp(scaled_identity, lambda ans, x: lambda g: 3.0 * g)     # deliberately not the true derivative
defjvp(scaled_identity, lambda g, ans, x: 5.0 * g)


def uses_lse(y):
    return lse(y ** 2) * 2.0


def uses_identity(x):
    return np.sum(scaled_identity(x))


def test_defvjp_rule_matches_autograd_first_and_second_order():
    y = r.randn(6)
    want = autograd.grad(lambda y: a_lse(y ** 2) * 2.0)(y)
    np.testing.assert_allclose(tl.grad(uses_lse)(y), want, rtol=1e-12)
    v = r.randn(6)
    # reverse over reverse differentiates the rule's own code, as autograd does (forward mode
    # needs defjvp: tl.hessian_vector_product is forward over reverse)
    np.testing.assert_allclose(tl.grad(lse_gradient_along)(y, v),
                               autograd.hessian_vector_product(lambda y: a_lse(y ** 2) * 2.0)(y, v), rtol=1e-10)
    tl.check_grads(uses_lse, modes=["rev"])(y)


def lse_gradient_along(y, v):
    return np.sum(tl.grad(uses_lse)(y) * v)


def test_the_users_rules_are_the_ones_applied():
    # negative control: the identity's true derivative is 1; its rules say 3 (reverse) and 5 (forward)
    x = r.randn(4)
    np.testing.assert_allclose(tl.grad(uses_identity)(x), np.full(4, 3.0))
    np.testing.assert_allclose(tl.jvp(uses_identity, (x,), (np.ones(4),))[1], 20.0)


@primitive
def two_args(x, y):
    return np.sum(x * y)


defvjp(two_args, lambda ans, x, y: lambda g: g * y)             # no maker for y


def uses_two_args(x, y):
    return two_args(x, y)


@pytest.mark.parametrize("argnums", [0, 1])
def test_a_missing_vjp_maker_for_a_float_argument_is_refused_not_zero(argnums):
    # tlaloc lowers the rule once for all arguments, so it refuses whichever is asked for
    # (autograd refuses only argument 1); a zero would be a silently wrong gradient
    x, y = r.randn(3), r.randn(3)
    with pytest.raises(tl.NoRuleError, match="no VJP for argument 1"):
        tl.grad(uses_two_args, argnums=argnums)(x, y)


def tanh_by_exp(x):
    return (1.0 - np.exp(-2 * x)) / (1.0 + np.exp(-2 * x))


def only_star(*xs):
    return np.sum(xs[0] * xs[1])


def test_nested_elementwise_grad_matches_autograd_to_the_fourth_derivative():
    x = np.linspace(-3, 3, 9)
    a_tanh = lambda x: (1.0 - anp.exp(-2 * x)) / (1.0 + anp.exp(-2 * x))   # noqa: E731
    got, want = tanh_by_exp, a_tanh
    for _ in range(4):
        got, want = tl.elementwise_grad(got), autograd.elementwise_grad(want)
        np.testing.assert_allclose(got(x), want(x), rtol=1e-10, atol=1e-12)


def test_a_function_of_star_args_only():
    np.testing.assert_allclose(tl.grad(only_star)(np.ones(2), np.arange(2.0)), [0.0, 1.0])
