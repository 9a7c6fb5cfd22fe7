"""Arguments a transform cannot take as given: None, masked arrays, np.matrix.

Regressions:
* ``tl.grad(f)(None, x)`` returned None without running ``f``, and ``tl.grad(f, argnums=1)(None, x)``
  with ``a * x`` in ``f`` folded the None into the graph and failed at run time with NumPy's
  TypeError and no location. Now a None at a differentiated position is refused by name at the
  call, and a None used as an array is refused at the user's ``file:line:col`` where it is used;
  a None that ``f`` ignores, tests with ``is None`` or uses as an index (``np.newaxis``) runs as
  in NumPy. JAX (the oracle) returns None for a None at argnums (an empty pytree) and raises
  TypeError where a None is used as an array.
* ``np.ma.MaskedArray`` and ``np.matrix`` arguments were differentiated as their plain data,
  silently (the mask ignored; ``*`` elementwise, not np.matrix's product): refused by name.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import ArgumentError, FenceError

jax.config.update("jax_enable_x64", True)
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")   # np.matrix itself

X = np.linspace(0.2, 1.4, 4)
HERE = r"test_call_arguments\.py:\d+:\d+: "


def ignores_a(a, x):
    return np.sum(np.sin(x) * x)


def scales_by_a(a, x):
    return np.sum(a * x)


def dot_with_a(a, x):
    return np.dot(a, x)


def optional_weight(a, x):
    w = 1.0 if a is None else a
    return np.sum(w * x ** 3)


def newaxis_index(a, x):
    return np.sum(x[a] * np.cos(x))


def test_none_argument_not_differentiated_runs_as_in_jax():
    want = jax.grad(lambda a, x: jnp.sum(jnp.sin(x) * x), argnums=1)(None, X)
    np.testing.assert_allclose(tl.grad(ignores_a, argnums=1)(None, X), want, rtol=1e-14)
    np.testing.assert_allclose(tl.grad(optional_weight, argnums=1)(None, X), 3 * X ** 2, rtol=1e-14)
    np.testing.assert_allclose(tl.grad(optional_weight, argnums=1)(2.0, X), 6 * X ** 2, rtol=1e-14)
    want = jax.grad(lambda a, x: jnp.sum(x[a] * jnp.cos(x)), argnums=1)(None, X)
    np.testing.assert_allclose(tl.grad(newaxis_index, argnums=1)(None, X), want, rtol=1e-14)
    # jacfwd/jacrev take arrays only (as before): a None elsewhere is refused by name, with the fix
    with pytest.raises(ArgumentError, match=HERE + r"jacrev: argument `a` is None; jacrev takes array "
                                                   r"arguments only. Bind it first"):
        tl.jacrev(ignores_a, argnums=1)(None, X)


@pytest.mark.parametrize("transform", [tl.grad, tl.value_and_grad, tl.jacfwd, tl.jacrev, tl.hessian],
                         ids=lambda t: t.__name__)
def test_none_at_a_differentiated_position_is_refused_by_name(transform):
    assert jax.grad(ignores_a)(None, X) is None          # JAX: an empty pytree, an empty gradient
    with pytest.raises(ArgumentError, match=HERE + r"\w+: argument `a` \(argnums=0\) is None.*"
                                                   r"needs a floating-point array; pass an array"):
        transform(ignores_a)(None, X)


@pytest.mark.parametrize("f, text", [(scales_by_a, r"a \* x"), (dot_with_a, r"np.dot\(a, x\)")],
                         ids=["operator", "call"])
def test_none_used_as_an_array_is_refused_where_it_is_used(f, text):
    with pytest.raises(TypeError):                        # NumPy and JAX refuse it too
        jax.grad(lambda a, x: jnp.sum(a * x), argnums=1)(None, X)
    line = f.__code__.co_firstlineno + 1
    for call in (lambda: tl.grad(f, argnums=1)(None, X), lambda: tl.jit(f)(None, X),
                 lambda: tl.value_and_grad(f, argnums=1)(None, X)):
        with pytest.raises(FenceError, match=rf"test_call_arguments\.py:{line}:\d+: `a` is None here, "
                                             rf"but `{text}` needs an array; pass an array for `a`"):
            call()


def square_sum(x, scale):
    return np.sum(x * x) * scale


@pytest.mark.parametrize("call", [
    lambda x: tl.grad(square_sum)(x, 2.0), lambda x: tl.value_and_grad(square_sum)(x, 2.0),
    lambda x: tl.jacfwd(square_sum)(x, 2.0), lambda x: tl.hessian(square_sum)(x, 2.0),
    lambda x: tl.jvp(square_sum, (x, 2.0), (x, 0.0)), lambda x: tl.vmap(square_sum)(x, np.ones(1)),
    lambda x: tl.jit(square_sum)(x, 2.0), lambda x: tl.grad(square_sum, argnums=1)(X, x),
    lambda x: tl.vjp(square_sum, x, 2.0)], ids=["grad", "value_and_grad", "jacfwd", "hessian", "jvp", "vmap",
                                               "jit", "nondiff", "vjp"])
def test_masked_arrays_and_matrices_are_refused_by_name(call):
    masked = np.ma.masked_array(X.reshape(1, 4), [[0, 1, 0, 0]])
    with pytest.raises(ArgumentError, match=HERE + r"\w+: argument `(x|scale)` is a masked array "
                                                   r"\(np.ma.MaskedArray\).*ignore its mask.*\.data"):
        call(masked)
    with pytest.raises(ArgumentError, match=HERE + r"\w+: argument `(x|scale)` is an np.matrix.*"
                                                   r"np.asarray\((x|scale)\)"):
        call(np.matrix(X.reshape(1, 4)))


def test_a_masked_leaf_of_a_pytree_is_refused():
    masked = np.ma.masked_array(X, [0, 1, 0, 0])
    with pytest.raises(ArgumentError, match=r"argument `p` \(a leaf of it\) is a masked array"):
        tl.grad(lambda p: np.sum(p["w"] ** 2))({"w": masked})


def test_the_data_of_either_matches_jax_and_negative_control():
    masked = np.ma.masked_array(X, [0, 1, 0, 0])
    want = jax.grad(lambda x: jnp.sum(x * x) * 2.0)(X)
    np.testing.assert_allclose(tl.grad(square_sum)(masked.data, 2.0), want, rtol=1e-14)
    np.testing.assert_allclose(tl.grad(square_sum)(np.asarray(np.matrix(X)), 2.0), [want], rtol=1e-14)
    # why refusing matters: NumPy's own results differ from the plain data's
    assert not np.isclose(square_sum(masked, 2.0), square_sum(masked.data, 2.0))
    m = np.matrix(X.reshape(1, 4))
    assert (m * m.T).shape == (1, 1) and (np.asarray(m) * np.asarray(m)).shape == (1, 4)
    # and the comparison above rejects a value 1e-12 off
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(want * (1 + 1e-12), want, rtol=1e-14)
