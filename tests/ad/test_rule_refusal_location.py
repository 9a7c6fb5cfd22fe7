"""A primitive's rule that refuses its parameters names the user's ``file:line:col``.

Regression: ``np.einsum('ii->', A)`` under ``tl.grad``, and a boolean-mask index
``x[x > 0]`` under ``tl.vmap(tl.grad(f))`` or ``tl.jit(tl.grad(f))``, were refused with the
rule's message alone (``no VJP rule for `einsum` with a repeated index ...``), with no location;
the refusal now starts with the line of the call in the user's code.

Also: ``tl.hessian`` (and ``tl.vmap(tl.grad(f))``) of a loop that keeps a value of a
different shape from each trip (``np.sum(x[: i + 1] ** 2)``) failed inside tlaloc with
``TypeError: 'NoneType' object is not iterable``; the hessian now takes the route that
needs no stack (checked against JAX), and vmap refuses at the line.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import NoRuleError, ShapeError

jax.config.update("jax_enable_x64", True)


def einsum_trace(a):
    # the primitive itself (np.einsum takes the diagonal first, and differentiates)
    return tl.numpy.lax.einsum(a, spec="ii->") * 2.0


def masked_sum(x):
    pos = x[x > 0]
    return np.sum(pos ** 2)


def _line(f, text):
    import inspect
    lines, first = inspect.getsourcelines(f)
    return first + next(k for k, l in enumerate(lines) if text in l)


def test_a_vjp_rule_refusal_names_the_users_line():
    line = _line(einsum_trace, "einsum(")
    with pytest.raises(NoRuleError, match=rf"^\S*test_rule_refusal_location\.py:{line}:\d+: no VJP rule for "
                                          r"`einsum` with a repeated index"):
        tl.grad(einsum_trace)(np.eye(3))


def test_a_batching_rule_refusal_names_the_users_line():
    line = _line(masked_sum, "x[x > 0]")
    with pytest.raises(NoRuleError, match=rf"^\S*test_rule_refusal_location\.py:{line}:\d+: no batching rule for "
                                          r"`getitem` with a boolean mask"):
        tl.vmap(tl.grad(masked_sum))(np.arange(6.0).reshape(2, 3) - 2.0)


def test_a_lowering_rule_refusal_names_the_users_line():
    line = _line(masked_sum, "x[x > 0]")
    with pytest.raises(NoRuleError, match=rf"^\S*test_rule_refusal_location\.py:{line}:\d+: boolean-mask indexing"):
        tl.jit(tl.grad(masked_sum))(np.arange(3.0) - 1.0)


def prefix_sums(x):
    acc = np.zeros(len(x))
    for i in range(len(x)):
        acc[i] = np.sum(x[: i + 1] ** 2)
    return np.sum(acc * x)


def j_prefix_sums(x):
    acc = jnp.zeros(len(x))
    for i in range(len(x)):
        acc = acc.at[i].set(jnp.sum(x[: i + 1] ** 2))
    return jnp.sum(acc * x)


def test_a_loop_keeping_a_value_whose_shape_changes_per_trip():
    x = np.array([0.5, -1.0, 2.0, 0.3])
    np.testing.assert_allclose(tl.hessian(prefix_sums)(x), jax.hessian(j_prefix_sums)(x), rtol=1e-12, atol=1e-12)
    line = _line(prefix_sums, "x[: i + 1]")
    with pytest.raises(ShapeError, match=rf"^\S*test_rule_refusal_location\.py:{line}:\d+: vmap: the rank"):
        tl.vmap(tl.grad(prefix_sums))(np.stack([x, 2 * x]))
