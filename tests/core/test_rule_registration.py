"""Rules do not depend on import order: ``tlaloc._core.rules.ensure_rules`` loads every
rule table, and every engine calls it before it looks a rule up.

Each check runs in a fresh interpreter that imports only the engine it uses.
"""
import os
import subprocess
import sys

import numpy as np

IF_GRAPH = r"""
import numpy as np
from tlaloc._core.aval import AbstractValue
from tlaloc._core.builder import Builder
from tlaloc._core.control import cond_p
from tlaloc._core.interpreter import eval_graph
from tlaloc._prims.elementwise import gt_p, multiply, sin

F64 = AbstractValue(np.dtype("float64"), ())

def region(fn):
    b = Builder(name="branch")
    with b.active():
        return b.finish([fn(b.new_input(F64, "x"))])

b = Builder(name="f")
with b.active():
    x = b.new_input(F64, "x")
    (y,) = cond_p.bind(gt_p.bind(x, 0.0), x, true_branch=region(sin), false_branch=region(lambda v: multiply(v, v)))
    g = b.finish([y])
"""


def _fresh(code: str) -> list:
    """Run ``code`` in a new interpreter; return the floats of its last printed line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [float(v) for v in proc.stdout.strip().splitlines()[-1].split()]


def test_vjp_of_an_if_in_a_fresh_interpreter():
    """Only ``tlaloc._ad.reverse`` (and the graph-building modules) imported first:
    the VJP of an ``if`` still finds the control-flow rule."""
    code = ("import tlaloc._ad.reverse as r\n" + IF_GRAPH + "vg, _ = r.vjp_graph(g)\n"
            "print(*[float(v) for v in eval_graph(vg, 0.5, 1.0) + eval_graph(vg, -0.5, 1.0)])\n")
    y_pos, dx_pos, y_neg, dx_neg = _fresh(code)
    np.testing.assert_allclose([y_pos, dx_pos], [np.sin(0.5), np.cos(0.5)], rtol=1e-15)
    np.testing.assert_allclose([y_neg, dx_neg], [0.25, -1.0], rtol=1e-15)


def test_jvp_of_an_if_in_a_fresh_interpreter():
    code = ("import tlaloc._ad.forward as f\n" + IF_GRAPH + "jg, _ = f.jvp_graph(g)\n"
            "print(*[float(v) for v in eval_graph(jg, 0.5, 2.0) + eval_graph(jg, -0.5, 2.0)])\n")
    y_pos, t_pos, y_neg, t_neg = _fresh(code)
    np.testing.assert_allclose([y_pos, t_pos], [np.sin(0.5), 2 * np.cos(0.5)], rtol=1e-15)
    np.testing.assert_allclose([y_neg, t_neg], [0.25, -2.0], rtol=1e-15)


def test_batching_of_an_if_in_a_fresh_interpreter():
    code = ("import tlaloc._ad.batching as bt\n" + IF_GRAPH +
            "bg, dims = bt.batch_graph(g, [0], [AbstractValue(np.dtype('float64'), (2,))], 2)\n"
            "print(*[float(v) for v in eval_graph(bg, np.array([0.5, -0.5]))[0]])\n")
    np.testing.assert_allclose(_fresh(code), [np.sin(0.5), 0.25], rtol=1e-15)


def test_negative_control_the_rule_is_attached_by_the_entry_point():
    """Without ``ensure_rules`` (the engine bypassed: the slot read directly), the
    ``cond`` primitive has no VJP in a fresh interpreter: the test above relies on
    the entry point, not on an import that happens to come first."""
    code = (IF_GRAPH + "from tlaloc._core.control import cond_p as c\n"
            "print(float(c.vjp is None))\n"
            "from tlaloc._core.rules import ensure_rules\nensure_rules()\n"
            "print(float(c.vjp is None), float(c.batch is None), float(c.lower is None))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, after = proc.stdout.strip().splitlines()[-2:]
    assert before == "1.0" and after == "0.0 0.0 0.0"


def test_ensure_rules_is_idempotent_and_sees_new_primitives():
    code = r"""
from tlaloc._core.rules import ensure_rules
from tlaloc._core.primitive import Primitive, REGISTRY
ensure_rules(); n = len(REGISTRY); ensure_rules()
p = Primitive("probe_region_call", impl=lambda x, *, body: x, shape_rule=lambda x, **_: x.shape,
              dtype_rule=lambda x, **_: x.dtype)
p.inline_region = "body"
ensure_rules()
print(float(len(REGISTRY) - n), float(p.batch is not None))
"""
    assert _fresh(code) == [1.0, 1.0]


def test_reverse_rule_and_vjp_are_one_slot():
    from tlaloc._core.primitive import NodeRule, Primitive, REGISTRY
    p = Primitive("probe_one_slot", impl=lambda x: x, shape_rule=lambda x: x.shape, dtype_rule=lambda x: x.dtype)
    try:
        def rule(node, ins):
            return ins, None
        p.reverse_rule = rule
        assert type(p.vjp) is NodeRule and p.vjp.fn is rule and p.reverse_rule is rule
        p.vjp = lambda g, x, out: (g,)
        assert p.reverse_rule is None          # a plain VJP replaced the node rule
        p.forward_rule = rule
        assert type(p.jvp) is NodeRule and p.forward_rule is rule
        assert not hasattr(p, "render") and not hasattr(p, "batch_rule")
    finally:
        del REGISTRY["probe_one_slot"]
