"""DXIR: graphs from Python source print like Python, run in the reference
interpreter (float64 stays float64, bit-identical to running the function
eagerly), and the verifier refuses malformed graphs by naming the node.
"""
import ast
import re

import numpy as np
import pytest

import tlaloc
import tlaloc.numpy as tnp
from tlaloc._core.aval import AbstractValue
from tlaloc._core.graph import Graph, Literal, Node, SourceLoc, Var
from tlaloc._prims import REGISTRY

from .helpers import assert_same_values


def mlp_loss(x, w, b):
    h = tnp.tanh(x @ w + b)
    return tnp.mean(h * h) / 2.0


def branchy(x):
    s = tnp.sum(x)
    if s > 0:
        y = x * 2.0
    else:
        y = -x
    return tnp.sum(tnp.exp(y))


def two_outputs(x):
    return tnp.max(x), tnp.argmax(x)


BODY_LINE = re.compile(r"^\s+(?P<lhs>\w+(, \w+)*) = (?P<prim>\w+)\((?P<args>.*)\)  # (?P<types>.+)$")


def check_prints_like_python(graph):
    text = str(graph)
    lines = text.splitlines()
    assert re.match(rf"^def {graph.name}\((\w+: [^,]+(, )?)*\):$", lines[0]), lines[0]
    assert re.match(r"^    return \w+(, \w+)*$", lines[-1]), lines[-1]
    body = [ln for ln in lines[1:-1] if not ln.strip().startswith(("#", "def ", "return "))]
    assert body, text
    for ln in body:
        m = BODY_LINE.match(ln)
        assert m, f"not `name = prim(args)  # type`: {ln!r}"
        assert m.group("prim") in REGISTRY
        ast.parse(ln.split("  # ")[0].strip())      # the statement itself is Python
    return text


def test_mlp_graph_prints_like_python():
    g = tlaloc.make_graph(mlp_loss)
    text = check_prints_like_python(g)
    assert "h = tanh(" in text                      # user names survive
    assert "matmul(x, w)" in text
    prims = [n.prim.name for n in g.nodes]
    assert prims[:3] == ["matmul", "add", "tanh"], prims


def test_regions_print_as_nested_defs():
    g = tlaloc.make_graph(branchy)
    text = check_prints_like_python(g)
    assert "cond(" in text and "# true_branch:" in text and "# false_branch:" in text
    assert re.search(r"^        def \w+\(", text, re.M) is None          # one level of nesting
    assert re.search(r"^    def \w+\(", text, re.M)


def test_printing_is_deterministic():
    assert str(tlaloc.make_graph(mlp_loss)) == str(tlaloc.make_graph(mlp_loss))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_eval_graph_matches_eager_and_keeps_dtype(dtype):
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in [(5, 3), (3, 4), (4,)])
    (out,) = tlaloc.eval_graph(tlaloc.make_graph(mlp_loss), x, w, b)
    assert out.dtype == dtype
    assert_same_values(out, np.asarray(mlp_loss(x, w, b)))
    if dtype == np.float64:     # an independent float64 formula, not just the same code path
        h = np.tanh(x @ w + b)
        np.testing.assert_allclose(out, np.mean(h * h) / 2.0, rtol=1e-15)


def test_eval_graph_control_flow_and_multiple_outputs():
    g = tlaloc.make_graph(branchy)
    for x in (np.array([1.0, 2.0]), np.array([-1.0, -2.0])):
        (out,) = tlaloc.eval_graph(g, x)
        assert_same_values(out, np.asarray(branchy(x)))
        assert out.dtype == np.float64
    g2 = tlaloc.make_graph(two_outputs)
    m, i = tlaloc.eval_graph(g2, np.array([1.0, 5.0, 5.0, -2.0]))
    assert m == 5.0 and i == 1 and i.dtype == np.int64


def test_eval_graph_checks_arity():
    with pytest.raises(TypeError, match="expected 3 inputs"):
        tlaloc.eval_graph(tlaloc.make_graph(mlp_loss), np.ones(2))


# -- the verifier ------------------------------------------------------------------------------
F64 = AbstractValue(np.dtype(np.float64), (3,))
LOC = SourceLoc("model.py", 12, 8, "y = x * w")


def _good():
    """x, w -> multiply -> exp: a well-formed graph."""
    x, w, y, z = Var(F64, "x"), Var(F64, "w"), Var(F64, "y"), Var(F64, "z")
    n0 = Node(REGISTRY["multiply"], (x, w), (y,), {}, LOC)
    n1 = Node(REGISTRY["exp"], (y,), (z,), {}, SourceLoc("model.py", 13, 4))
    return Graph((x, w), (n0, n1), (z,), name="f"), (x, w, y, z, n0, n1)


def test_verifier_accepts_a_good_graph():
    g, _ = _good()
    assert tlaloc.verify(g) is g
    (out,) = tlaloc.eval_graph(g, np.ones(3), np.full(3, 2.0))
    assert_same_values(out, np.exp(np.full(3, 2.0)))


def test_verifier_refuses_use_before_definition():
    g, (x, w, y, z, n0, n1) = _good()
    bad = Graph((x, w), (n1, n0), (z,), name="f")          # exp reads y before multiply defines it
    with pytest.raises(tlaloc.GraphError) as info:
        tlaloc.verify(bad)
    msg = str(info.value)
    assert "node 0 `exp`" in msg and "model.py:13:4" in msg and "used before it is defined" in msg


def test_verifier_refuses_a_var_defined_twice():
    g, (x, w, y, z, n0, n1) = _good()
    again = Node(REGISTRY["negative"], (x,), (y,), {}, LOC)  # y redefined
    bad = Graph((x, w), (n0, again, n1), (z,), name="f")
    with pytest.raises(tlaloc.GraphError, match=r"node 1 `negative` \(model.py:12:8\).*defined twice"):
        tlaloc.verify(bad)


def test_verifier_refuses_an_undefined_output():
    g, (x, w, y, z, n0, n1) = _good()
    stray = Var(F64, "stray")
    with pytest.raises(tlaloc.GraphError, match="output .*stray.* is not defined"):
        tlaloc.verify(Graph((x, w), (n0, n1), (stray,), name="f"))


def test_verifier_refuses_a_wrong_result_count_and_shape():
    x, w = Var(F64, "x"), Var(F64, "w")
    bad = Node(REGISTRY["multiply"], (x, w), (Var(F64), Var(F64)), {}, LOC)
    with pytest.raises(tlaloc.GraphError, match=r"node 0 `multiply` \(model.py:12:8\): has 2 results"):
        tlaloc.verify(Graph((x, w), (bad,), (), name="f"))
    wrong = Var(AbstractValue(np.dtype(np.float64), (4,)), "y")
    bad = Node(REGISTRY["multiply"], (x, w), (wrong,), {}, LOC)
    with pytest.raises(tlaloc.GraphError, match=r"node 0 `multiply`.*shape \(4,\).*\(3,\)"):
        tlaloc.verify(Graph((x, w), (bad,), (wrong,), name="f"))


def test_verifier_reports_rule_errors_with_the_node():
    x = Var(AbstractValue(np.dtype(np.float32), (3,)), "x")
    w = Var(AbstractValue(np.dtype(np.float32), (4,)), "w")
    y = Var(AbstractValue(), "y")
    bad = Node(REGISTRY["add"], (x, w), (y,), {}, LOC)
    with pytest.raises(tlaloc.GraphError, match=r"node 0 `add` \(model.py:12:8\): add: shapes \(3,\) and \(4,\)"):
        tlaloc.verify(Graph((x, w), (bad,), (y,), name="f"))


def test_verifier_checks_regions():
    g = tlaloc.make_graph(branchy)
    tlaloc.verify(g)
    cond = next(n for n in g.nodes if n.regions())
    key, region = next((k, v) for k, v in cond.params.items() if isinstance(v, Graph))
    outsider = Var(F64, "outsider")                          # a region may not reach outside itself
    broken = Graph(region.inputs, (Node(REGISTRY["exp"], (outsider,), (Var(F64),), {}, None),),
                   region.outputs, region.name)
    params = dict(cond.params)
    params[key] = broken
    nodes = tuple(Node(n.prim, n.inputs, n.outputs, params, n.loc) if n is cond else n for n in g.nodes)
    with pytest.raises(tlaloc.GraphError, match=rf"node \d+ `cond`.*{key}: node 0 `exp`.*used before"):
        tlaloc.verify(Graph(g.inputs, nodes, g.outputs, g.name))


def test_literals_are_operands():
    x, y = Var(F64, "x"), Var(F64, "y")
    n = Node(REGISTRY["multiply"], (x, Literal(2.0, AbstractValue(None, (), weak=True))), (y,), {}, LOC)
    g = tlaloc.verify(Graph((x,), (n,), (y,), name="double"))
    assert "y = multiply(x, 2.0)" in str(g)
    assert_same_values(tlaloc.eval_graph(g, np.arange(3.0))[0], np.arange(3.0) * 2)
