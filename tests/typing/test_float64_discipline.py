"""Float64 end to end: literals and Python floats are never rounded to float32.

Each function's derivative chain has at most two rounding steps per term, so the
tlaloc result equals the NumPy float64 expression bit for bit whatever order the
rules multiply in; the negative controls show the same expression with the
constant rounded through float32 differs, so equality is a real test.
"""
import numpy as np

import tlaloc as tl
from tlaloc.typing import F32, F64

X = np.array([0.3, -0.7, 1.1, 2.9])
C = 0.1                          # a Python float captured from the module
C64 = np.float64(0.3)            # a NumPy float64 scalar captured from the module
ROUNDED = float(np.float32(0.1))


def quad(x):
    return (0.1 * x * x).sum()


def wave(x):
    return np.sin(0.1 * x).sum()


def captured(x):
    return (C * x * x).sum()


def captured64(x):
    return np.sin(C64 * x).sum()


def typed(x: F64["n"]):
    return np.sin(x * 0.1).sum()


def single(x: F32["n"]):
    return np.sin(x * 0.1).sum()


def _bits_equal(a, b):
    """Same dtype and the same bits (``+ 0.0`` only unifies the sign of zero)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype == np.float64, (a.dtype, b.dtype)
    assert (a + 0.0).tobytes() == (b + 0.0).tobytes(), (a - b)


def test_grad_and_hessian_are_bit_for_bit_float64():
    _bits_equal(tl.grad(quad)(X), 2.0 * (0.1 * X))
    _bits_equal(tl.hessian(quad)(X), np.diag(np.full(4, 2.0 * 0.1)))
    _bits_equal(tl.grad(wave)(X), np.cos(0.1 * X) * 0.1)
    _bits_equal(tl.hessian(wave)(X), np.diag((-np.sin(0.1 * X) * 0.1) * 0.1))
    _bits_equal(tl.grad(typed)(X), np.cos(X * 0.1) * 0.1)


def test_negative_controls_a_float32_constant_would_show():
    assert ROUNDED != 0.1
    assert (2.0 * (ROUNDED * X)).tobytes() != (2.0 * (0.1 * X)).tobytes()
    assert (np.cos(ROUNDED * X) * ROUNDED).tobytes() != (np.cos(0.1 * X) * 0.1).tobytes()


def test_captured_constants_stay_float64():
    _bits_equal(tl.grad(captured)(X), 2.0 * (C * X))
    _bits_equal(tl.grad(captured64)(X), np.cos(C64 * X) * C64)
    _bits_equal(tl.hessian(captured64)(X), np.diag((-np.sin(C64 * X) * C64) * C64))
    for f, const in ((captured, "0.1"), (captured64, "0.3")):
        src = tl.source(tl.grad(f))
        assert const in src and "float32" not in src


def test_literals_are_weak_in_a_float32_program():
    g = tl.grad(single)(X.astype(np.float32))
    assert g.dtype == np.float32
    x32 = X.astype(np.float32)
    np.testing.assert_array_equal(g, np.cos(x32 * 0.1) * np.float32(0.1))


def test_graph_literals_keep_the_python_float():
    graph = tl.make_graph(quad)
    lits = [a.value for n in graph.nodes for a in n.inputs if type(a).__name__ == "Literal"]
    assert lits and all(type(v) is float and v == 0.1 for v in lits)
