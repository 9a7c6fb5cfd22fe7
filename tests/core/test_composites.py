"""Composites: the shape-only helpers of derivative code build their body in their place.

Oracle: each helper's NumPy ``impl`` (which the eager interpreter runs), on the same
operands. Where the operands' shapes are known, ``Builder.add`` leaves no helper node;
where they are not (the negative control), the node stays, and then batching and
StableHLO lowering use the one generic rule that expands its body.
"""
import numpy as np
import pytest

from tlaloc._core.aval import AbstractValue, of
from tlaloc._core.builder import Builder
from tlaloc._core.graph import Node, Var
from tlaloc._core.interpreter import eval_graph
from tlaloc._core.primitive import REGISTRY
from tlaloc._core.rules import ensure_rules
from tlaloc.errors import GradientError

ensure_rules()
rng = np.random.default_rng(0)

#: (primitive, operands, params): operands of shapes that exercise the body
CASES = [
    ("sum_to", [rng.normal(size=(2, 3, 4)), np.zeros((3, 1))], {}),
    ("broadcast_like", [rng.normal(size=(3, 1)), np.zeros((2, 3, 4))], {}),
    ("reshape_like", [rng.normal(size=(2, 6)), np.zeros((3, 4))], {}),
    ("cast_like", [rng.normal(size=(3,)), np.zeros((3,), np.float32)], {}),
    ("expand_reduced", [rng.normal(size=(3,)), np.zeros((3, 4))], {"axes": (1,), "keepdims": False}),
    ("dim_size", [np.zeros((3, 5))], {"axis": 1}),
    ("reduced_count", [np.zeros((3, 5, 2), np.float32)], {"axes": (0, 2)}),
    ("grad_seed", [np.float64(2.5)], {}),
    ("matmul_t_lhs", [rng.normal(size=(2, 3, 5)), rng.normal(size=(4, 5)), np.zeros((3, 4))], {}),
    ("matmul_t_rhs", [rng.normal(size=(5,)), rng.normal(size=(3,)), np.zeros((3, 5))], {}),
    ("dynamic_slice_like", [rng.normal(size=(5, 6)), np.zeros((2, 3)), np.int64(1), np.int64(4)], {}),
    ("split_like", [rng.normal(size=(3, 7)), np.zeros((3, 2)), np.zeros((3, 5))], {"axis": 1}),
    ("prod_others_grad", [rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 4, 3))], {"axes": (1, 2)}),
]


def _build(name, operands, params, avals):
    """The graph of ``name`` applied to inputs of ``avals``."""
    prim = REGISTRY[name]
    b = Builder(name=name)
    with b.active():
        ins = [b.new_input(a) for a in avals]
        out = prim.bind(*ins, **params)
        g = b.finish(tuple(out) if prim.multiple_results else (out,))
    return g


def _as_list(x, multi):
    return [np.asarray(v) for v in (x if multi else (x,))]


@pytest.mark.parametrize("name,operands,params", CASES, ids=[c[0] for c in CASES])
def test_known_shapes_leave_no_helper_node_and_agree_with_impl(name, operands, params):
    prim = REGISTRY[name]
    g = _build(name, operands, params, [of(x) for x in operands])
    assert name not in {n.prim.name for n in g.nodes}
    want = _as_list(prim.impl(*operands, **params), prim.multiple_results)
    got = eval_graph(g, *operands)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12, atol=1e-12)
        assert np.asarray(a).shape == b.shape and np.asarray(a).dtype == b.dtype


@pytest.mark.parametrize("name,operands,params", CASES, ids=[c[0] for c in CASES])
def test_negative_control_unknown_shapes_keep_the_node(name, operands, params):
    g = _build(name, operands, params, [AbstractValue() for _ in operands])
    assert name in {n.prim.name for n in g.nodes}
    got = eval_graph(g, *operands)           # the impl runs it, as before
    want = _as_list(REGISTRY[name].impl(*operands, **params), REGISTRY[name].multiple_results)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12, atol=1e-12)


def test_prod_others_grad_is_exact_with_zeros():
    x = np.array([[0.0, 2.0, 0.0, 3.0], [1.5, 0.0, -2.0, 0.5]])
    g = rng.normal(size=x.shape)
    graph = _build("prod_others_grad", [g, x], {"axes": (1,)}, [of(g), of(x)])
    got = eval_graph(graph, g, x)[0]
    want = REGISTRY["prod_others_grad"].impl(g, x, axes=(1,))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.all(np.isfinite(got)) and np.abs(want).max() > 0


def test_grad_seed_refuses_a_non_scalar_output_while_building():
    with pytest.raises(GradientError, match=r"shape \(3,\)"):
        _build("grad_seed", [np.zeros(3)], {}, [of(np.zeros(3))])
    with pytest.raises(GradientError, match="floating-point"):
        _build("grad_seed", [np.int64(1)], {}, [of(np.int64(1))])
    _build("grad_seed", [np.zeros((1,))], {}, [of(np.zeros((1,)))])     # size 1 is a scalar, as in autograd


@pytest.mark.parametrize("name,operands,params", CASES[:2] + CASES[8:9], ids=["sum_to", "broadcast_like", "matmul_t_lhs"])
def test_generic_batching_rule_expands_the_body(name, operands, params):
    """A node kept from a graph built at unknown shapes, batched at known ones (vmap over the
    first operand), equals the impl applied example by example."""
    from tlaloc._ad.batching import batch_graph
    prim = REGISTRY[name]
    g = _build(name, operands, params, [AbstractValue(of(x).dtype, None) for x in operands])
    assert prim.batch.expands
    batch = np.stack([operands[0], 2.0 * operands[0] + 1.0])
    avals = [of(batch)] + [of(x) for x in operands[1:]]
    bg, dims = batch_graph(g, [0] + [None] * (len(operands) - 1), avals, 2)
    got = np.moveaxis(np.asarray(eval_graph(bg, batch, *operands[1:])[0]), dims[0], 0)
    want = np.stack([prim.impl(row, *operands[1:], **params) for row in batch])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_generic_lowering_rule_expands_the_body():
    """A composite node that reaches the emitter (not re-bound by specialisation) lowers its
    body; the compiled result equals the impl."""
    from tlaloc._render.stablehlo import emit_module
    from tlaloc._runtime.pjrt import Executable
    x, like = rng.normal(size=(2, 3, 4)), np.zeros((3, 1))
    prim = REGISTRY["sum_to"]
    assert prim.lower.expands
    vx, vl = Var(of(x)), Var(of(like))
    out = Var(AbstractValue(np.dtype(np.float64), (3, 1)))
    b = Builder(name="kept")
    b.inputs += [vx, vl]
    b.add_node(Node(prim, (vx, vl), (out,), {}, None))
    g = b.finish([b.value(out)])
    got = Executable(emit_module(g, name="kept"))(x, like)
    np.testing.assert_allclose(np.asarray(got[0] if isinstance(got, (list, tuple)) else got),
                               prim.impl(x, like), rtol=1e-12)
