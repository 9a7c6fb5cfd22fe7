"""In-place writes into an array that another name also holds.

Regression: with ``a = np.zeros(3); b = a``, a write ``b += x`` or ``b[1] = v`` left ``a``
holding the old constant, so ``np.sum(a * x)`` came back with a silently wrong value and
gradient (both 0 here). Aliases of computed arrays were already rebound; those of arrays
built from constants were not. Now every name bound to that array sees the write, as in
NumPy; a write through a name that shares only part of such an array (a view) is refused at
the line, as for computed arrays, and so is a write through a local name into a global's
array (``w = W; w += x``), which NumPy would make to ``W`` itself. The same holds across an
``if`` on an array (the alias, assigned by no statement of the branch, was not merged) and a
loop (aliases are carried as one value; a view written in the body, or an alias rebound there,
is refused at the loop). JAX ``.at[]`` twins are the oracle.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import FenceError

jax.config.update("jax_enable_x64", True)

X = np.array([0.5, -1.0, 2.0])


def alias_augassign(x):
    a = np.zeros(3)
    b = a
    b += x
    return np.sum(a * x)


def j_alias_augassign(x):
    a = jnp.zeros(3) + x
    return jnp.sum(a * x)


def alias_setitem(x):
    a = np.ones(3)
    b = a
    b[1] = x[0] * 5.0
    return np.sum(a * x)


def j_alias_setitem(x):
    a = jnp.ones(3).at[1].set(x[0] * 5.0)
    return jnp.sum(a * x)


def alias_constant_write(x):
    a = np.zeros(3)
    b = a
    b += 1.0
    b[0] = 4.0
    return np.sum(a * x)


def j_alias_constant_write(x):
    return jnp.sum(jnp.array([4.0, 1.0, 1.0]) * x)


def alias_zero_d(x):
    a = np.array(0.0)
    b = a
    b += x[0]
    return a * x[1]


def j_alias_zero_d(x):
    return x[0] * x[1]


def alias_in_branch(x):
    a = np.zeros(3)
    b = a
    if x[2] > 0:
        b += x * x
    return np.sum(a * x)


def j_alias_in_branch(x):
    return jnp.sum(x * x * x)


def computed_alias_in_branch(x):
    a = x * 1.0
    b = a
    if x[2] > 0:
        b[0] = 3.0
    return np.sum(a * x)


def j_computed_alias_in_branch(x):
    return jnp.sum((x * 1.0).at[0].set(3.0) * x)


def alias_in_loop(x):
    a = np.zeros(3)
    b = a
    for i in range(3):
        b[i] = x[i] * 2.0
    return np.sum(a * x)


def j_alias_in_loop(x):
    return jnp.sum(2.0 * x * x)


@pytest.mark.parametrize("f, j", [(alias_augassign, j_alias_augassign), (alias_setitem, j_alias_setitem),
                                  (alias_constant_write, j_alias_constant_write), (alias_zero_d, j_alias_zero_d),
                                  (alias_in_branch, j_alias_in_branch),
                                  (computed_alias_in_branch, j_computed_alias_in_branch),
                                  (alias_in_loop, j_alias_in_loop)],
                         ids=lambda f: getattr(f, "__name__", ""))
def test_every_name_of_a_constant_array_sees_an_in_place_write(f, j):
    value, grad = tl.value_and_grad(f)(X.copy())
    assert value == pytest.approx(float(f(X.copy())), rel=1e-14)
    np.testing.assert_allclose(grad, jax.grad(j)(X), rtol=1e-14, atol=0)


def write_into_a_row_view(x):
    a = np.zeros((2, 3))
    r = a[0]
    r[1] = x[0]
    return np.sum(a * a)


def augassign_into_a_row_view(x):
    a = np.zeros((2, 3))
    r = a[1]
    r += x
    return np.sum(a ** 2)


def write_in_a_loop_into_a_row_view(x):
    a = np.zeros((2, 3))
    r = a[0]
    for i in range(3):
        r[i] = x[i]
    return np.sum(a * x)


def write_in_a_branch_into_a_computed_view(x):
    A = np.stack([x, x]) * 1.0
    r = A[0]
    if x[2] > 0:
        r[1] = 2.0
    return np.sum(A * x)


def alias_rebound_in_the_loop(x):
    a = x * 1.0
    b = a
    for i in range(3):
        b[i] = 2.0 * b[i]
        a = a + 1.0
    return np.sum(a * x) + np.sum(b)


W = np.zeros(3)


def augassign_through_a_global(x):
    w = W
    w += x
    return np.sum(W * x)


@pytest.mark.parametrize("f, message", [
    (write_into_a_row_view, r"`r` and `a` share memory"),
    (augassign_into_a_row_view, r"`r` and `a` share memory"),
    (augassign_through_a_global, r"`w` is the array `W` from outside the function"),
    (write_in_a_loop_into_a_row_view, r"`r` and `a` share memory"),
    (write_in_a_branch_into_a_computed_view, r"`r` is a view of `A`"),
    (alias_rebound_in_the_loop, r"`b` is written in place in this loop while it names the same array as `a`"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_write_numpy_would_make_elsewhere_is_refused_at_the_line(f, message):
    with pytest.raises(FenceError, match=rf"test_inplace_aliases\.py:\d+:\d+: {message}"):
        tl.grad(f)(X.copy())
    assert not W.any()


def computed_alias_augassign(x):
    y = x * 2.0
    z = y
    z += 1.0           # in place on an array: y sees it, as in NumPy
    return np.sum(y * z)


def test_augassign_on_an_alias_of_unknown_rank_is_built_at_the_first_call():
    # Regression (a new user's program, session 15): with an unannotated x the rank of y is not
    # known when the function is defined, and this was refused ("depends on its rank ... annotate
    # the rank"); the rank is known at the first call, where NumPy's answer is decided.
    for x in (X, np.ones((2, 2))):
        want = jax.grad(lambda v: jnp.sum((2.0 * v + 1.0) ** 2))(x)
        value, g = tl.value_and_grad(computed_alias_augassign)(x)
        assert value == computed_alias_augassign(x.copy())
        np.testing.assert_allclose(g, np.asarray(want), rtol=1e-15)
        # control: the result when y did not see the write (NumPy's answer for a scalar) differs
        assert not np.allclose(g, np.asarray(jax.grad(lambda v: jnp.sum(2.0 * v * (2.0 * v + 1.0)))(x)))
    # a 0-d value: NumPy scalar or 0-d array, which the code cannot tell; refused at the line
    with pytest.raises(FenceError, match=r"test_inplace_aliases.py:\d+:\d+: `z` and `y` name the same 0-d value"):
        tl.grad(computed_alias_augassign)(np.array(1.5))


def first_item_scaled(x, y):
    t = x[0]
    t *= y             # x 1-d: x[0] is a NumPy scalar, rebound; x 2-d: a row of x, written through
    return np.sum(t + x[1])


def test_augassign_on_an_index_that_is_a_scalar_or_a_view_by_rank_is_built_at_the_first_call():
    # Regression (session 18): with x unannotated, `t = x[0]` may be a view (x of rank >= 2) or a
    # NumPy scalar (x 1-d), and `t *= y` was refused as a write through a view for both; the rank
    # is known at the first call: a scalar is rebound as NumPy does, a row is still refused.
    def j(x, y):
        return jnp.sum(x[0] * y + x[1])
    for transform in (lambda f: f, tl.jit):
        assert transform(first_item_scaled)(X, 3.0) == first_item_scaled(X.copy(), 3.0)
    for argnums in (0, 1):
        np.testing.assert_allclose(tl.grad(first_item_scaled, argnums=argnums)(X, 3.0),
                                   np.asarray(jax.grad(j, argnums=argnums)(X, 3.0)), rtol=1e-15)
    rows = np.arange(6.0).reshape(2, 3)
    ys = np.array([2.0, 3.0])
    np.testing.assert_allclose(tl.vmap(tl.grad(first_item_scaled))(rows, ys),
                               np.asarray(jax.vmap(jax.grad(j))(rows, ys)), rtol=1e-15)
    # control: the gradient had x[0] not been scaled differs
    assert not np.allclose(tl.grad(first_item_scaled)(X, 3.0), [1.0, 1.0, 0.0])
    for transform in (tl.grad, tl.jit):
        with pytest.raises(FenceError, match=r"test_inplace_aliases.py:\d+:\d+: `t` is a view of `x` \(NumPy "
                                             r"would write through to `x`\)"):
            transform(first_item_scaled)(rows, 3.0)


def list_item_augassign(x):
    y = x * 2.0
    items = [y]
    items[0] += 1.0        # NumPy writes into y itself
    return np.sum(y * items[0])


def dict_item_augassign(x):
    y = x * 2.0
    d = {"a": y}
    d["a"] += 1.0
    return np.sum(y * d["a"])


def scalar_terms(x):
    terms = [0.0, 0.0]
    for i in range(3):
        terms[0] += np.sum(x ** i)         # Python / NumPy scalars: the item alone changes
        terms[1] += np.sum(x) * i
    return terms[0] + terms[1]


def starred_row_write(x):
    first, *rest = x
    rest[0] += 10.0        # a row of x: NumPy would write through to x
    return np.sum(x)


def test_augassign_on_a_container_item_writes_the_array():
    # Regression (adversarial pass, session 15): the container's item alone changed, y kept its old
    # value (for x = [.5, -1.5, 2]: 28 and [6, -10, 18] where NumPy gives 33 and [8, -8, 20]).
    want = jax.grad(lambda v: jnp.sum((2.0 * v + 1.0) ** 2))(X)
    for f in (list_item_augassign, dict_item_augassign):
        value, g = tl.value_and_grad(f)(X)
        assert value == f(X.copy())
        np.testing.assert_allclose(g, np.asarray(want), rtol=1e-15)
    value, g = tl.value_and_grad(scalar_terms)(X)
    assert value == scalar_terms(X.copy())
    np.testing.assert_allclose(g, np.asarray(jax.grad(lambda v: jnp.sum(v ** 0) + jnp.sum(v) + jnp.sum(v ** 2)
                                                      + 3 * jnp.sum(v))(X)), rtol=1e-15)
    with pytest.raises(FenceError, match=r"`rest\[0\]` is a view of `x`"):
        tl.grad(starred_row_write)(np.ones((3, 2)))


def grows_in_place(x: tl.F64["n"]):
    z = x * 2.0
    z += np.ones((2, 3))   # NumPy: non-broadcastable output operand
    return np.sum(z)


def test_in_place_result_of_another_rank_is_refused():
    with pytest.raises(FenceError, match=r"`z` is f64\[n\], and the in-place result is f64\[2,n=3\]: NumPy refuses"):
        tl.grad(grows_in_place)
