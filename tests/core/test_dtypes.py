"""dtypes through ``tlaloc.numpy``: every supported dtype works and keeps its
type; float32 and float64 (or any two float types) promote as NumPy promotes
them, eagerly and in a graph, and under ``numpy_dtype_promotion("strict")``
never mix implicitly, with an error that names both operands; Python scalars
are weak and adopt the array's dtype.
"""
import numpy as np
import pytest

import tlaloc
import tlaloc.numpy as tnp
from tlaloc._core.aval import AbstractValue

from .helpers import BF16, assert_same_values, trace

FLOATS = [np.dtype(np.float32), np.dtype(np.float64), BF16, np.dtype(np.float16)]
INTS = [np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.int64)]
ALL = FLOATS + INTS + [np.dtype(np.bool_)]


def arr(dtype, values=(1, 0, 3, 2)):
    return np.array(values).astype(dtype)


# (id, function, expected result dtype given the input dtype): NumPy's answer,
# except that bfloat16 follows the float16 rules (ml_dtypes alone does not).
def _same(dt):
    return dt


def _acc(dt):                 # sum / cumsum: narrow ints and bool widen to int64, as NumPy
    return np.dtype(np.int64) if dt.kind in "bi" else dt


OPS = [
    ("add", lambda a: tnp.add(a, a), lambda dt: np.dtype(np.bool_) if dt == np.bool_ else dt),
    ("maximum", lambda a: tnp.maximum(a, a), _same),
    ("where", lambda a: tnp.where(a > 0, a, a), _same),
    ("reshape", lambda a: tnp.reshape(a, (2, 2)), _same),
    ("transpose", lambda a: tnp.transpose(tnp.reshape(a, (2, 2))), _same),
    ("concatenate", lambda a: tnp.concatenate([a, a]), _same),
    ("take", lambda a: tnp.take(a, np.array([3, 0])), _same),
    ("flip", lambda a: tnp.flip(a), _same),
    ("max", lambda a: tnp.max(a), _same),
    ("sum", lambda a: tnp.sum(a), _acc),
    ("cumsum", lambda a: tnp.cumsum(a), _acc),
    ("argmax", lambda a: tnp.argmax(a), lambda dt: np.dtype(np.int64)),
    ("equal", lambda a: tnp.equal(a, a), lambda dt: np.dtype(np.bool_)),
]


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("name,fn,want", OPS, ids=[o[0] for o in OPS])
def test_dtypes_work_through_tnp(name, fn, want, dtype):
    a = arr(dtype)
    out = np.asarray(fn(a))
    assert out.dtype == want(dtype)
    # The values are those of the same computation in float64, cast to the result dtype.
    assert_same_values(out, np.asarray(fn(a.astype(np.float64))).astype(want(dtype)))
    # The graph (typed inputs) records the same dtype, and the interpreter returns it.
    g = trace(fn, a)
    assert np.dtype(g.outputs[0].aval.dtype) == want(dtype)
    assert_same_values(tlaloc.eval_graph(g, a)[0], out)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_elementwise_keep_dtype(dtype):
    a = arr(dtype, (0.5, 1.0, 2.0, 4.0))
    for fn in (tnp.exp, tnp.log, tnp.tanh, tnp.sqrt, tnp.logistic, tnp.sin, tnp.abs, tnp.negative,
               tnp.square, tnp.mean, tnp.var, tnp.std, tnp.softmax, tnp.logsumexp):
        assert np.asarray(fn(a)).dtype == dtype, fn.__name__


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("scalar", [2, 2.0, 0.1, True])
def test_python_scalars_adopt_the_float_dtype(dtype, scalar):
    a = arr(dtype, (0.5, 1.0, 2.0, 4.0))
    for fn in (tnp.add, tnp.multiply, tnp.subtract, tnp.divide, tnp.maximum, tnp.power):
        assert fn(a, scalar).dtype == dtype, (fn.__name__, scalar)
        assert fn(scalar, a).dtype == dtype, (fn.__name__, scalar)
    assert tnp.where(a > 1, a, scalar).dtype == dtype
    assert tnp.clip(a, 0.0, scalar).dtype == dtype


def test_f32_times_python_float_stays_f32_in_a_graph():
    g = trace(lambda x: x * 2.0, AbstractValue(np.dtype(np.float32), (3,)))
    assert g.outputs[0].aval.dtype == np.float32
    assert tlaloc.eval_graph(g, np.ones(3, np.float32))[0].dtype == np.float32


def test_regression_bfloat16_with_python_floats_stays_bfloat16():
    """Was: NumPy promotes ml_dtypes' bfloat16 with a Python float to float32
    (float64 in ``where``), and logistic/mean of bfloat16 returned float64."""
    a = arr(BF16, (0.5, 1.0, 2.0, 4.0))
    assert tnp.multiply(a, 2.0).dtype == BF16
    assert tnp.where(a > 1, a, 0.0).dtype == BF16
    assert tnp.maximum(a, 0.0).dtype == BF16
    assert tnp.logistic(a).dtype == BF16
    assert tnp.mean(a).dtype == BF16
    g = trace(lambda x: tnp.maximum(x * 2.0, 0.0), a)
    assert g.outputs[0].aval.dtype == BF16


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_python_ints_adopt_the_int_dtype(dtype):
    a = arr(dtype)
    assert (tnp.multiply(a, 2)).dtype == dtype
    assert tnp.add(1, a).dtype == dtype
    assert tnp.multiply(a, 0.5).dtype == np.float64        # NumPy: int array * Python float


def test_int_array_times_python_int_in_a_graph():
    # regression: aval.of(2) once forgot that 2 is an int, and the rule assumed a float
    g = trace(lambda x: x * 2, AbstractValue(np.dtype(np.int32), (3,)))
    assert g.outputs[0].aval.dtype == np.int32


# -- float mixing: NumPy's promotion, or refused in strict mode ----------------------------
MIXES = [(np.float32, np.float64), (np.float64, np.float32), (np.float16, np.float32), (BF16, np.float32),
         (BF16, np.float16)]
BINARY_FNS = [("add", tnp.add, "x", "y"), ("multiply", tnp.multiply, "x", "y"),
              ("maximum", tnp.maximum, "x", "y"), ("where", lambda x, y: tnp.where(True, x, y), "x", "y"),
              ("concatenate", lambda x, y: tnp.concatenate([x, y]), "operand 0", "operand 1"),
              ("matmul", tnp.matmul, "x1", "x2"), ("clip", lambda x, y: tnp.clip(x, y, 1.0), "x", "a_min"),
              ("einsum", lambda x, y: tnp.einsum("i,i->", x, y), "operand 0", "operand 1")]


@pytest.mark.parametrize("da,db", MIXES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name,fn,la,lb", BINARY_FNS, ids=[b[0] for b in BINARY_FNS])
def test_float_mix_promotes_as_numpy(name, fn, la, lb, da, db):
    a, b = np.ones(3, da), np.ones(3, db)
    if {np.dtype(da), np.dtype(db)} == {BF16, np.dtype(np.float16)}:    # NumPy has no common dtype
        for call in (lambda: fn(a, b), lambda: trace(fn, a, b)):
            with pytest.raises(tlaloc.DTypeError, match="float16.*no common dtype for bfloat16 and float16.*astype"):
                call()
        return
    want = np.result_type(np.dtype(da), np.dtype(db))
    assert fn(a, b).dtype == want
    assert trace(fn, a, b).outputs[0].aval.dtype == want


@pytest.mark.parametrize("da,db", MIXES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name,fn,la,lb", BINARY_FNS, ids=[b[0] for b in BINARY_FNS])
def test_float_mix_raises_naming_both_operands_in_strict_mode(name, fn, la, lb, da, db):
    a, b = np.ones(3, da), np.ones(3, db)
    names = {la: np.dtype(da).name, lb: np.dtype(db).name}
    for mode in ("eager", "graph"):
        with pytest.raises(tlaloc.DTypeError) as info, tlaloc.numpy_dtype_promotion("strict"):
            if mode == "eager":
                fn(a, b)
            else:
                trace(fn, a, b)
        msg = str(info.value)
        for label, dt in names.items():
            assert f"{label} is {dt}" in msg or f"but {label} is {dt}" in msg, (mode, msg)
        assert "astype" in msg, msg


def test_float_mix_message_example():
    with pytest.raises(tlaloc.DTypeError, match=r"add: x is float32 but y is float64"), \
            tlaloc.numpy_dtype_promotion("strict"):
        tnp.add(np.ones(2, np.float32), np.ones(2, np.float64))


def test_numpy_float64_scalar_is_not_weak():
    """A NumPy scalar carries its dtype (only Python scalars are weak), eagerly and in graphs."""
    assert tnp.multiply(np.ones(2, np.float32), np.float64(2.0)).dtype == np.float64      # as NumPy 2
    assert tnp.multiply(np.ones(2, np.float32), 2.0).dtype == np.float32
    g = trace(lambda x: tnp.multiply(x, np.float64(2.0)), np.ones(2, np.float32))
    assert g.outputs[0].aval.dtype == np.float64
    with tlaloc.numpy_dtype_promotion("strict"):
        with pytest.raises(tlaloc.DTypeError):
            tnp.multiply(np.ones(2, np.float32), np.float64(2.0))
        with pytest.raises(tlaloc.DTypeError):
            trace(lambda x: tnp.multiply(x, np.float64(2.0)), np.ones(2, np.float32))


def test_negative_control_same_float_and_int_mixes_are_fine():
    assert tnp.add(np.ones(2, np.float32), np.ones(2, np.float32)).dtype == np.float32
    assert tnp.add(np.ones(2, np.float32), np.ones(2, np.int32)).dtype == np.float64   # NumPy's rule
    assert tnp.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32)).dtype == np.float32
