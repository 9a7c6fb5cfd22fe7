"""specialize(): concrete avals everywhere, shape-decided folding, loops and UNDEF."""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc._core.aval import of
from tlaloc._core.graph import Graph, Literal
from tlaloc._core.specialize import Static, specialize

from . import programs as P


def _prims(g: Graph) -> list:
    out = []
    for n in g.nodes:
        out.append(n.prim.name)
        for r in n.regions():
            out.extend(_prims(r))
    return out


def _literals(g: Graph) -> list:
    out = [a for n in g.nodes for a in n.inputs if isinstance(a, Literal)]
    out += [a for a in g.outputs if isinstance(a, Literal)]
    for n in g.nodes:
        for r in n.regions():
            out.extend(_literals(r))
    return out


def _check_same(fn, args, grad=False):
    t = tl.grad(fn) if grad else None
    g = t._entry(None)["graphs"][0][0] if grad else tl.make_graph(fn)
    s = specialize(g, [of(a) for a in args])
    for a, b in zip(tl.eval_graph(s, *args), tl.eval_graph(g, *args)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-13, atol=1e-15)   # dot order
    return s


def test_every_var_is_concrete_and_shape_queries_fold():
    r = np.random.default_rng(0)
    s = _check_same(P.softmax_xent, (r.normal(size=(5, 4)), np.eye(4)[[0, 1, 2, 3, 0]]), grad=True)
    names = _prims(s)
    for folded in ("dim_size", "reduced_count", "sum_to", "broadcast_like", "expand_reduced", "matmul",
                   "safe_mul", "stop_gradient"):
        assert folded not in names


def test_matmul_and_adjoints_become_dot_general():
    r = np.random.default_rng(1)
    s = _check_same(P.mlp, (r.normal(size=(5, 3)), r.normal(size=(3, 4)), r.normal(size=4), r.normal(size=4)),
                    grad=True)
    names = _prims(s)
    assert "dot_general" in names
    assert not {"matmul", "matmul_t_lhs", "matmul_t_rhs"} & set(names)


def test_static_trip_count_gives_stacks_a_leading_dim():
    r = np.random.default_rng(2)
    s = _check_same(P.for_branch, (r.normal(size=(6, 3)), r.normal(size=3)), grad=True)
    loops = [n for n in s.nodes if n.prim.name == "for_range"]
    assert loops and all(isinstance(a, Literal) for n in loops for a in n.inputs[:3])
    stacks = [o for o in loops[0].outputs[loops[0].params["n_carry"]:]]
    assert stacks and all(o.aval.shape[0] == 6 for o in stacks)


def test_undef_becomes_zeros():
    s = _check_same(P.for_break, (np.array([0.5, 0.2, 1.5, 0.3]),))
    assert all(lit.value is not None for lit in _literals(s))


def test_constant_predicate_inlines_the_branch():
    def f(x, flag):
        if flag > 0:
            y = x * 2.0
        else:
            y = x * 3.0
        return y

    g = tl.make_graph(f)
    s = specialize(g, [of(np.ones(3)), Static(np.int64(1))])
    assert "cond" not in _prims(s) and len(s.inputs) == 1
    np.testing.assert_array_equal(tl.eval_graph(s, np.ones(3))[0], np.full(3, 2.0))


def test_python_int_loop_counter_stays_integer():
    s = _check_same(P.while_forward, (np.array([1.0, 2.0, 3.0]),))
    counter = s.nodes[-1].outputs[1].aval
    assert (counter.dtype, counter.shape, counter.weak) == (np.int64, (), True)   # a Python int, as eagerly


def test_a_shape_mismatch_names_the_users_line():
    def f(x, y):
        return x + y

    with pytest.raises(tl.ShapeError, match="test_specialize.py"):
        specialize(tl.make_graph(f), [of(np.ones(3)), of(np.ones(4))])
