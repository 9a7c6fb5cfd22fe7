"""Regression tests for bugs found while building on the engine (one test per bug)."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl
import tlaloc.numpy as tnp

jax.config.update("jax_enable_x64", True)


def relu_sum(x):
    return tnp.maximum(x, 0.0).sum()


def test_max_tie_weights_keep_float32():
    # the tie mask was a float64 where(...) over Python scalars -> f32/f64 mix error
    g = tl.grad(relu_sum)(np.array([1.0, 0.0, -1.0], np.float32))
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, np.array([1.0, 0.5, 0.0], np.float32))


def colmax_sum(x):
    return tnp.max(x, axis=0).sum()


def test_reduce_max_ties_keep_float32():
    g = tl.grad(colmax_sum)(np.array([[1.0, 2.0], [1.0, 0.0]], np.float32))
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, [[0.5, 1.0], [0.5, 0.0]])


def einsum_ellipsis(w, x):
    return tnp.sum(tnp.einsum("...c,oc->...o", x, w) ** 2)


def test_einsum_vjp_with_ellipsis_next_to_plain_operand():
    rng = np.random.default_rng(0)
    w, x = rng.normal(size=(2, 3)), rng.normal(size=(2, 5, 3))
    got = tl.grad(einsum_ellipsis, argnums=(0, 1))(w, x)
    want = jax.grad(lambda w, x: jnp.sum(jnp.einsum("...c,oc->...o", x, w) ** 2), argnums=(0, 1))(w, x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def optional_bias(x, b):
    y = x * 2.0
    if b is not None:
        y = y + b
    return y.sum()


def test_is_none_on_an_array_is_static():
    np.testing.assert_array_equal(tl.grad(optional_bias)(np.ones(2), np.ones(2)), [2.0, 2.0])


def list_in_static_loop(x):
    outs = []
    for k in range(3):
        outs.append(x * k)
    return (outs[0] + outs[1] + outs[2]).sum()


def list_in_array_loop(x):
    outs = []
    for i in range(len(x)):
        outs.append(x[i])
    return x.sum()


def test_list_append_in_a_static_range_unrolls():
    np.testing.assert_array_equal(tl.grad(list_in_static_loop)(np.ones(2)), [3.0, 3.0])


def list_in_array_if(x):
    outs = []
    if x.sum() > 0:
        outs.append(x)
    return x.sum()


def test_list_append_in_a_loop_over_the_data_length_unrolls_at_the_first_call():
    # issue 14: the length is read at the first call, and the loop unrolls for it
    np.testing.assert_array_equal(tl.grad(list_in_array_loop)(np.arange(3.0)), np.ones(3))


def test_list_append_in_an_if_on_an_array_is_refused():
    with pytest.raises(tl.FenceError, match="`append` on a Python list") as e:
        tl.grad(list_in_array_if)
    assert f"{__file__}:{list_in_array_if.__code__.co_firstlineno + 3}:" in str(e.value)


def dict_built_in_a_loop(w):
    d = {}
    for k, i in (("a", 0), ("b", 1)):
        d[k] = w[i] ** 2
    d["a"] += d["b"]
    return d["a"] * w[2]


def list_argument_item_assign(w, lst):
    lst[0] = w[0] * 2.0
    return lst[0] * w[1]


def test_item_assignment_into_a_local_dict_or_a_list_argument():
    # `d[k] = v` reached index_set: `TypeError: cannot use dict {} as an array operand`, no location
    w = np.array([0.3, -0.7, 1.1])
    want = jax.grad(lambda w: (w[0] ** 2 + w[1] ** 2) * w[2])(w)
    np.testing.assert_allclose(tl.grad(dict_built_in_a_loop)(w), want, rtol=1e-13)
    assert not np.allclose(want, jax.grad(lambda w: w[0] ** 2 * w[2])(w))       # negative control
    np.testing.assert_allclose(tl.grad(list_argument_item_assign)(w, [1.0, 2.0]),
                               jax.grad(lambda w: w[0] * 2.0 * w[1])(w), rtol=1e-13)


CALLS = {"n": 0, "last": 0.0}


def writes_a_global_dict(w):
    CALLS["n"] += 1
    CALLS["last"] = 5.0
    return tnp.sum(w ** 2)


def accumulates_an_array_in_a_global_dict(w):
    CALLS["last"] += tnp.sum(w)
    return tnp.sum(w ** 2)


def stores_an_array_in_a_global_dict(w):
    CALLS["last"] = tnp.sum(w)
    return tnp.sum(w ** 2)


def test_global_dict_items_change_at_call_time_and_computed_arrays_are_refused_at_the_line():
    CALLS.update(n=0, last=0.0)
    g = tl.grad(writes_a_global_dict)
    g(np.ones(2)), g(np.ones(2))
    assert CALLS == {"n": 2, "last": 5.0}
    # `+=` of an array failed with "a symbolic value was used outside the function being lowered"
    for f, text in ((accumulates_an_array_in_a_global_dict, "CALLS['last'] +="),
                    (stores_an_array_in_a_global_dict, "CALLS['last'] =")):
        with pytest.raises(tl.errors.FenceError, match=r"test_regressions\.py:\d+:\d+: `" + re.escape(text)):
            tl.grad(f)(np.ones(2))


def scaled_dot(x, y):
    return tnp.sum(x * y)


def test_a_list_or_string_operand_is_refused_at_the_users_line():
    # was `TypeError: cannot use list [Value(...), ...] as an array operand`, with no location
    for bad, kind in (([1.0, 2.0, 3.0], "a Python list of 3 items"), ("abc", "a str")):
        with pytest.raises(tl.errors.FenceError,
                           match=r"test_regressions\.py:\d+:\d+: `x \* y` combines " + kind + " and an array"):
            tl.grad(scaled_dot)(bad, np.ones(3))
    np.testing.assert_array_equal(tl.grad(scaled_dot)(np.ones(3), np.arange(3.0)), [0.0, 1.0, 2.0])


def numpy_scalar_types_of_computed_values(x):
    return np.float64(x[0]) * np.float64(np.sum(np.float32(x) ** 2)) + np.float64(np.sum(x ** 2))


def j_numpy_scalar_types_of_computed_values(x):
    return x[0] * jnp.sum(x.astype(jnp.float32).astype(jnp.float64) ** 2) + jnp.sum(x ** 2)


def test_numpy_scalar_types_convert_a_computed_value():
    # np.float64(x) of a value computed in the function was refused as
    # "bad call: 'numpy.dtypes.Float64DType' object is not callable"
    x = np.array([1.5, -2.0, 0.25])
    value, grad = tl.value_and_grad(numpy_scalar_types_of_computed_values)(x)
    assert value == pytest.approx(numpy_scalar_types_of_computed_values(x), rel=1e-7)
    np.testing.assert_allclose(grad, jax.grad(j_numpy_scalar_types_of_computed_values)(x), rtol=1e-7)


def table_of_the_data_length(x):
    n = len(x)
    d = np.zeros((n + 1, n + 1))
    for i in range(1, n + 1):
        d[i, 0] = d[i - 1, 0] + x[i - 1] ** 2
        d[0, i] = d[0, i - 1] + 1.0
    for i in range(1, n + 1):
        for j in range(1, n + 1):
            d[i, j] = min(d[i - 1, j] + 1.0, d[i, j - 1] + 1.0, d[i - 1, j - 1] + (x[i - 1] - j) ** 2)
    return d[n, n] + np.sum(np.full((n, 2), x[0]) * np.ones((n, n))[:, :2])


def j_table_of_the_data_length(x):
    n = len(x)
    d = jnp.zeros((n + 1, n + 1))
    for i in range(1, n + 1):
        d = d.at[i, 0].set(d[i - 1, 0] + x[i - 1] ** 2)
        d = d.at[0, i].set(d[0, i - 1] + 1.0)
    for i in range(1, n + 1):
        for j in range(1, n + 1):
            d = d.at[i, j].set(jnp.minimum(jnp.minimum(d[i - 1, j] + 1.0, d[i, j - 1] + 1.0),
                                           d[i - 1, j - 1] + (x[i - 1] - j) ** 2))
    return d[n, n] + jnp.sum(jnp.full((n, 2), x[0]))


def test_a_shape_tuple_of_the_data_length_stays_a_shape():
    # np.zeros((n + 1, n + 1)) with n = len(x) had its shape stacked into a 1-d array, and the
    # derivative failed when run: "TypeError: only 0-dimensional arrays can be converted to Python scalars"
    x = np.array([0.3, 2.2, 2.9, 4.4])
    value, grad = tl.value_and_grad(table_of_the_data_length)(x)
    assert value == pytest.approx(table_of_the_data_length(x), rel=1e-12)
    np.testing.assert_allclose(grad, jax.grad(j_table_of_the_data_length)(x), rtol=1e-12)
