"""Every emitted module is parsed and verified by MLIR; a bad one is refused with the diagnostic."""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc._render.stablehlo import parse

BAD = """module @m {
  func.func public @main(%a: tensor<3xf64>, %b: tensor<3xf32>) -> tensor<3xf64> {
    %0 = "stablehlo.add"(%a, %b) : (tensor<3xf64>, tensor<3xf32>) -> tensor<3xf64> loc("user.py":7:9)
    "func.return"(%0) : (tensor<3xf64>) -> ()
  }
}
"""


def test_bad_program_is_refused_with_the_mlir_diagnostic():
    with pytest.raises(tl.GraphError) as e:
        parse(BAD)
    msg = str(e.value)
    assert "user.py" in msg and ":7:9" in msg
    assert "requires the same element type for all operands and results" in msg


def test_a_broken_lowering_points_at_the_users_line(monkeypatch):
    """A lowering that emits an ill-typed op: the diagnostic carries the user's file:line."""
    from tlaloc._render import stablehlo_rules

    def bad_tanh(em, node, x):
        v = em.value(x)
        wrong = em.convert(v, np.float32)
        return em.op("stablehlo.tanh", [wrong], (v.dtype, v.shape))   # f32 in, f64 out

    def f(x):
        return np.tanh(x)

    monkeypatch.setitem(stablehlo_rules.LOWERINGS, "tanh", bad_tanh)
    stablehlo_rules.install()            # rules are attached by the one entry point, not read per call
    try:
        with pytest.raises(tl.GraphError) as e:
            tl.jit(f).lower(np.ones(3))
    finally:
        monkeypatch.undo()
        stablehlo_rules.install()
    assert "test_verify.py" in str(e.value)
    assert "does not verify" in str(e.value)


def test_emitted_text_parses_again():
    def f(x):
        return np.sin(x).sum()

    text = tl.jit(f).lower(np.ones((2, 3))).as_text()
    assert "stablehlo.sine" in text
    parse(text)
