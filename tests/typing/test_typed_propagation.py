"""Dtypes and axis names through DXIR, tl.contract / tl.named, and jaxtyping annotations."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.typing import F64, NamedArray, TensorType, type_str

import typed_programs as P

jax.config.update("jax_enable_x64", True)


def _out_types(fn):
    graph = tl.make_graph(fn)
    return [type_str(o.aval) for o in graph.outputs]


def test_names_propagate_through_the_rule_table():
    assert _out_types(P.propagates) == [
        "F32[batch, out]",            # contract, then + b
        "F32[out, batch]",            # transpose
        "F32[out]",                   # reduction drops the name
        "F32[out]",                   # integer index drops the axis
        "F32[batch, 1, out]",         # new axis is unnamed (size 1)
        "F32[1, hidden]",             # keepdims: unnamed size 1
    ]


def test_regions_keep_names_and_renaming():
    assert _out_types(P.loop_keeps_names) == ["F32[batch, hidden]"]
    assert _out_types(P.renamed) == ["F32[rows, cols]"]
    assert _out_types(P.reshape_names) == ["F32[a, 1, b]", "F32[3, 2]"]   # only trivial reshapes keep names


def test_grad_of_an_annotated_function_matches_jax():
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)

    def twin(x, w, b):
        h = jnp.tanh(jnp.einsum("bh,ho->bo", x, w) + b)
        return (h * h).sum()
    got = tl.grad(P.layer, argnums=(0, 1, 2))(x, w, b)
    want = jax.jit(jax.grad(twin, argnums=(0, 1, 2)))(x, w, b)
    for g, j in zip(got, want):
        np.testing.assert_allclose(g, j, rtol=1e-12, atol=1e-12)
    assert "einsum(x, w, spec='ab,bc->ac')" in tl.source(tl.grad(P.layer))


def test_hessian_and_jvp_of_annotated_functions():
    x, y = np.arange(15.0).reshape(3, 5) / 10, np.linspace(-1, 1, 5)
    h = tl.hessian(P.fixed_and_named, argnums=1)(x, y)
    np.testing.assert_array_equal(h, np.zeros((5, 5)))
    _, dot = tl.jvp(P.fixed_and_named, (x, y), (np.ones_like(x), np.zeros_like(y)))
    np.testing.assert_allclose(dot, (y * 3).sum(), rtol=1e-14)


def test_contract_eagerly_with_named_arrays():
    a = tl.named(np.arange(6.0).reshape(2, 3), "batch seq")
    w = tl.named(np.arange(12.0).reshape(3, 4), ("seq", "hidden"))
    out = tl.contract(a, w)
    assert isinstance(out, NamedArray) and out.names == ("batch", "hidden")
    np.testing.assert_array_equal(np.asarray(out), np.asarray(a) @ np.asarray(w))
    with pytest.raises(tl.TypeAnnotationError, match="share no axis name"):
        tl.contract(a, tl.named(np.ones((3, 4)), "x y"))
    with pytest.raises(tl.ArgumentError, match="tl.named"):
        tl.contract(np.ones((2, 3)), np.ones((3, 4)))
    with pytest.raises(tl.ArgumentError):
        tl.named(np.ones((2, 3)), "a")


def test_contract_over_several_shared_names_and_its_gradient():
    def f(x: F64["b", "h", "k"], w: F64["k", "h", "o"]):
        return (tl.contract(x, w) ** 2).sum()
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 3, 5))
    want = jax.jit(jax.grad(lambda x, w: (jnp.einsum("bhk,kho->bo", x, w) ** 2).sum(), argnums=(0, 1)))(x, w)
    got = tl.grad(f, argnums=(0, 1))(x, w)
    for g, j in zip(got, want):
        np.testing.assert_allclose(g, j, rtol=1e-12, atol=1e-12)


def test_unannotated_code_is_unchanged():
    def f(x, y):
        return (x * y).sum()
    assert tl.make_graph(f).inputs[0].aval.shape is None
    np.testing.assert_array_equal(tl.grad(f)(np.ones(3), np.arange(3.0)), np.arange(3.0))


# -- jaxtyping annotations ---------------------------------------------------------------------------

jaxtyping = pytest.importorskip("jaxtyping")
Float, Float32, Float64 = jaxtyping.Float, jaxtyping.Float32, jaxtyping.Float64


def jt_layer(x: Float64[np.ndarray, "batch hidden"], w: Float64[np.ndarray, "hidden out"]):
    return tl.contract(x, w).sum()


def jt_broadcast(x: Float32[np.ndarray, "batch hidden"], y: Float32[np.ndarray, "batch"]):
    return (x + y).sum()


def jt_any_float(x: Float[np.ndarray, "n"], y: Float[np.ndarray, "n"]):
    return (x * y).sum()


def test_jaxtyping_annotations_are_read_like_ours():
    from tlaloc.typing import from_annotation
    t = from_annotation(Float32[np.ndarray, "... 3 #b _ n+1"])
    assert isinstance(t, TensorType) and str(t) == "Float32[..., 3, #b, _, n+1]"
    assert from_annotation(Float64[np.ndarray, "batch hidden"]).aval() == F64["batch", "hidden"].aval()
    g = tl.grad(jt_layer)(np.ones((2, 3)), np.ones((3, 4)))
    np.testing.assert_array_equal(g, np.full((2, 3), 4.0))
    with pytest.raises(tl.TypeAnnotationError, match="argument `w` of `jt_layer`"):
        tl.grad(jt_layer)(np.ones((2, 3)), np.ones((4, 4)))
    with pytest.raises(tl.TypeAnnotationError, match="cannot broadcast"):
        tl.grad(jt_broadcast)
    # Float accepts any float dtype: the aval's dtype stays unknown, the call check accepts both
    tl.grad(jt_any_float)(np.ones(3, np.float32), np.ones(3, np.float32))
    with pytest.raises(tl.TypeAnnotationError, match="argument `x`"):
        tl.grad(jt_any_float)(np.ones(3, np.int64), np.ones(3))


def test_annotation_names_merge_into_explicit_avals():
    # for lowerings that pass concrete avals (vmap, jit): names still attach
    from tlaloc._core.aval import of
    from tlaloc._typecheck import merge_annotations
    avals = merge_annotations(P.layer, ["x", "w", "b"], [of(np.ones((2, 3))), of(np.ones((3, 4))), of(np.ones(4))])
    assert [type_str(a) for a in avals] == ["F64[batch, hidden]", "F64[hidden, out]", "F64[out]"]
    assert avals[0].shape == (2, 3)
    assert merge_annotations(P.layer, ["x"], [of(np.ones(3))])[0].names is None     # rank differs: untouched
