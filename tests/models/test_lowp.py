"""Low-precision products (``tlaloc.models.lowp``) against float64 on the stored weights.

The oracle is the float64 product of the activations with the dequantised weight (what the
float32 programs compute, to rounding). Two-term activations must stay near float32
accuracy; a one-term split (int8 or bf16 activations) is the negative control, orders of
magnitude further off. Eager (NumPy) and compiled (XLA CPU) runs are both checked, at one
row (batch-1 decode) and several.
"""
import ml_dtypes
import numpy as np
import pytest

from tlaloc.models import lowp
from tlaloc.models.lowp import LowpMatrix

BF16 = np.dtype(ml_dtypes.bfloat16)
rng = np.random.default_rng(18)
#: error bound relative to max|x_r| * sum|w_col|: int8x2 resolves 1 / (2 * 127 * 254) of max|x_r|,
#: bf16x2 2^-17 relative per element (plus float32 sums)
TOL = {"int8": 2e-5, "bf16": 1e-5}


def _compiled(fn, *arrays):
    """fn traced at the arrays' concrete types (as the serving export traces), compiled for XLA CPU, run."""
    from tlaloc.serving.export.programs import Slot, lower
    from tlaloc.serving.runtime import device
    slots = [Slot(f"a{i}", "weight", a.dtype, a.shape) for i, a in enumerate(arrays)]
    prog = lower(lambda *xs: [fn(*xs)], slots, "lowp_test")
    exe = device.Program(prog.text, "cpu", [s.name for s in slots], [(a.dtype, a.shape) for a in arrays])
    return np.asarray(exe(*arrays)[0]), prog.text


def _weights(kind, n_in, n_out, axis):
    w = rng.standard_normal((n_in, n_out)).astype(np.float32)
    if kind == "int8":
        scale = (np.abs(w).max(axis=0) / 127).astype(np.float32)
        q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
        w64 = q.astype(np.float64) * scale
        stored, s = q, scale
    else:
        stored, s = w.astype(BF16), None
        w64 = stored.astype(np.float64)
    if axis == 1:
        stored = np.ascontiguousarray(stored.T)
    return stored, s, w64


@pytest.mark.parametrize("kind", ["int8", "bf16"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("lead", [(1,), (1, 1), (3, 5)])
def test_lowp_product_is_near_float32_on_the_stored_weights(kind, axis, lead):
    n_in, n_out = 96, 40
    stored, scale, w64 = _weights(kind, n_in, n_out, axis)
    x = (rng.standard_normal(lead + (n_in,)) * np.exp(rng.standard_normal(lead + (1,)))).astype(np.float32)
    want = x.astype(np.float64) @ w64                                        # (..., out)
    m = LowpMatrix(stored, scale, axis=axis)
    assert m.shape == (n_in, n_out)
    eager = m.rmatmul(x)
    compiled, _ = _compiled(lambda a, w, *s: LowpMatrix(w, *s, axis=axis).rmatmul(a),
                            x, stored, *([] if scale is None else [scale]))
    size = np.abs(x).max(axis=-1, keepdims=True) * np.abs(w64).sum(axis=0)   # bound on |x @ w| per element
    for got in (eager, compiled):
        assert got.shape == lead + (n_out,) and got.dtype == np.float32
        assert (np.abs(got - want) / size).max() < 2e-5
    # negative control: one term of activations (the hi part alone) is far coarser
    if kind == "int8":
        x2 = x.reshape(-1, n_in)
        s1 = np.abs(x2).max(axis=-1, keepdims=True) / 127
        one = (np.round(x2 / s1) * s1).reshape(x.shape).astype(np.float64) @ w64
    else:
        one = x.astype(BF16).astype(np.float64) @ w64
    assert (np.abs(one - want) / size).max() > 5 * TOL[kind]


def test_int8x2_split_reconstructs_each_row():
    x = (rng.standard_normal((4, 64)) * np.array([[1e-3], [1.0], [30.0], [0.0]])).astype(np.float32)
    terms, s1, s2 = lowp.split_int8x2(x)
    assert terms.dtype == np.int8 and terms.shape == (8, 64)
    back = terms[:4].astype(np.float64) * s1 + terms[4:].astype(np.float64) * s2
    amax = np.abs(x).max(axis=-1, keepdims=True)
    assert (np.abs(back - x) <= 0.5 * s2 * (1 + 1e-5) + 1e-30).all()         # half a step of the lo term
    assert (np.abs(back - x) <= amax / (127 * 254) + 1e-30).all()
    np.testing.assert_array_equal(back[3], 0.0)                               # an all-zero row stays zero


def test_disabled_path_converts_and_gives_the_same_values():
    stored, scale, w64 = _weights("int8", 64, 16, 0)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    m = LowpMatrix(stored, scale)
    fast = m.rmatmul(x)
    lowp.ENABLED = False
    try:
        plain = m.rmatmul(x)
    finally:
        lowp.ENABLED = True
    np.testing.assert_allclose(plain, x.astype(np.float64) @ w64, rtol=1e-5, atol=1e-5)
    size = np.abs(x).max(axis=-1, keepdims=True) * np.abs(w64).sum(axis=0)
    assert (np.abs(fast - plain) / size).max() < TOL["int8"]


def test_compiled_dots_keep_the_weight_narrow():
    stored, scale, _ = _weights("int8", 64, 16, 0)
    x = np.ones((1, 64), np.float32)
    _, text = _compiled(lambda a, w, s: LowpMatrix(w, s).rmatmul(a), x, stored, scale)
    dots = [ln for ln in text.splitlines() if "stablehlo.dot_general" in ln]
    assert len(dots) == 1 and "tensor<2x64xi8>, tensor<64x16xi8>) -> tensor<2x16xi32>" in dots[0]
    assert "tensor<64x16xf32>" not in text                                    # no float32 copy of the weight


@pytest.mark.parametrize("w, scale, match", [
    (np.ones((4, 3), np.int8), None, "needs a float32 scale of shape"),
    (np.ones((4, 3), np.int8), np.ones(4, np.float32), r"scale of shape \(3,\)"),
    (np.ones((4, 3), np.float32), None, "expected int8 .* or bfloat16"),
])
def test_bad_weights_are_refused(w, scale, match):
    with pytest.raises(ValueError, match=match):
        LowpMatrix(w, scale)
