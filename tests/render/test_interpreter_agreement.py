"""The rendered Python and the reference interpreter run the same DXIR graph and
must agree bit for bit (the renderer may not reorder or alias values wrongly)."""
import numpy as np
import pytest

import tlaloc as tl

from . import golden_functions as gf
from .test_golden import CASES


def _interpret(transformed, args):
    entry = next(iter(transformed._entries.values()))
    graph = entry["graphs"][0][0]
    flat = [np.asarray(a) for a in args]
    closure = [g() for g in entry["lowered"].closure_getters]
    return tl.eval_graph(graph, *flat, *closure)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendered_code_equals_interpreter_bitwise(name):
    g = CASES[name][0]()
    args = CASES[name][1]()
    rendered = g(*args)
    rendered = rendered if isinstance(rendered, tuple) else (rendered,)
    interpreted = _interpret(g, args)
    assert len(rendered) == len(interpreted)
    for a, b in zip(rendered, interpreted):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def loop_with_residuals(x):
    s = 1.0
    for i in range(3):
        s = s * x + np.sin(s)
    return s.sum()


def test_forward_over_reverse_rendered_equals_interpreter():
    x = np.array([0.3, -0.7])
    t = tl.jvp(tl.grad(loop_with_residuals))
    out, dout = t((x,), (np.array([1.0, 0.5]),))
    entry = next(iter(t._entries.values()))
    got = tl.eval_graph(entry["graphs"][0][0], x, np.array([1.0, 0.5]))
    assert np.asarray(got[0]).tobytes() == np.asarray(out).tobytes()
    assert np.asarray(got[1]).tobytes() == np.asarray(dout).tobytes()


NEGATIVE = -1.3


def log_of_a_captured_negative(x):
    return np.sum(np.log(NEGATIVE) ** 2) + np.sum(x)      # a constant -nan at trace time


def test_a_negative_nan_constant_keeps_its_sign_bit():
    """The traced constant np.log(-1.3) ** 2 is -nan (x86); it was rendered as ``np.nan``,
    so the value came out with the sign bit clear (TLALOC_CHECK_RENDER raised)."""
    from tlaloc._render.python import render_literal
    assert render_literal(-np.nan) == "-np.nan" and render_literal(np.nan) == "np.nan"
    with np.errstate(invalid="ignore"):
        want = np.log(np.float64(NEGATIVE)) ** 2 + 1.0
        value, x_bar = tl.value_and_grad(log_of_a_captured_negative)(np.array([1.0]))
    assert np.isnan(value) and np.signbit(value) == np.signbit(want)
    np.testing.assert_array_equal(x_bar, [1.0])


def _reversed_weights(x):
    return np.sum(np.flip(x ** 2) * np.arange(float(x.shape[0])))


def test_a_reversed_constant_view_sums_in_the_rendered_order():
    """Regression (session 16): ``np.flip(...) * np.arange(n)`` left the graph a reversed view of the
    constant, which np.einsum summed in another order than the rendered (C-ordered) constant: the
    rendered gradient and the interpreter's differed by 1 ulp."""
    x = np.array([0.3, -1.2, 2.0, 0.7, 1.1, 0.25, -3.5, 1.75])
    g = tl.grad(_reversed_weights)
    rendered = g(x)
    entry = g._last_entry
    interpreted = tl.eval_graph(entry["graphs"][0][0], x)[0]
    assert np.asarray(rendered).tobytes() == np.asarray(interpreted).tobytes()
    np.testing.assert_allclose(rendered, 2 * x * np.arange(8.0)[::-1], rtol=1e-15)
