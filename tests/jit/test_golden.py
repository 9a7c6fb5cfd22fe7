"""The StableHLO text of a small function, against a golden file.

Regenerate with ``TLALOC_REGEN_GOLDEN=1 pytest tests/jit/test_golden.py``.
"""
import os
import pathlib

import numpy as np

import tlaloc as tl

GOLDEN = pathlib.Path(__file__).parent / "golden"


def small(x, w):
    h = np.tanh(x @ w + 1.0)
    if h.sum() > 0:
        h = h * 2.0
    return (h * h).mean()


def _check(name, text):
    path = GOLDEN / name
    if os.environ.get("TLALOC_REGEN_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_golden_forward():
    x = np.zeros((4, 3))
    w = np.zeros(3)
    _check("small.mlir", tl.jit(small).lower(x, w).as_text())


def test_golden_grad():
    x = np.zeros((2, 3), np.float32)
    w = np.zeros(3, np.float32)
    _check("small_grad.mlir", tl.jit(tl.grad(small, argnums=1)).lower(x, w).as_text())


def test_text_is_deterministic():
    x, w = np.zeros((4, 3)), np.zeros(3)
    assert tl.jit(small).lower(x, w).as_text() == tl.jit(small).lower(x, w).as_text()
