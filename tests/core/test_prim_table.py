"""The primitive table itself: every required primitive is declared with all
its entries, and each one's shape and dtype rules describe what its NumPy
implementation really returns (on concrete avals), while unknown avals give
unknown results instead of errors.
"""
import numpy as np
import pytest

from tlaloc._core import aval as _aval
from tlaloc._core.aval import AbstractValue
from tlaloc._prims import REGISTRY
from tlaloc.errors import ShapeError, TlalocError

from .helpers import BF16

REQUIRED = [
    "add", "subtract", "multiply", "divide", "negative", "power", "integer_pow",
    "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "logistic", "sqrt", "rsqrt",
    "abs", "sign", "floor", "ceil", "round", "maximum", "minimum", "select", "clamp",
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal",
    "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "cumsum", "cumprod",
    "reshape", "transpose", "broadcast_in_dim", "concatenate", "slice", "dynamic_slice",
    "dynamic_update_slice", "gather", "scatter_add", "pad", "iota", "convert",
    "dot_general", "cholesky", "triangular_solve", "threefry2x32",
]


@pytest.mark.parametrize("name", REQUIRED)
def test_required_primitive_is_fully_declared(name):
    p = REGISTRY[name]
    assert callable(p.impl) and callable(p.shape_rule) and callable(p.dtype_rule)
    assert isinstance(p.hlo, str) and p.hlo, f"{name} has no StableHLO op"
    assert p.vjp is not None and p.jvp is not None, f"{name} lacks a derivative rule"


def test_negative_control_missing_rule_is_noticed():
    p = REGISTRY["prod_others_grad"]          # a composite: no StableHLO op of its own, no VJP
    assert p.hlo is None and p.vjp is None


rng = np.random.default_rng(0)
f32 = rng.standard_normal((2, 3)).astype(np.float32)
f64 = rng.standard_normal((2, 3))
i8 = np.array([[100, 100, -3], [1, 2, 3]], np.int8)
i32 = np.arange(6, dtype=np.int32).reshape(2, 3)
u32 = np.arange(6, dtype=np.uint32).reshape(2, 3)
bl = np.array([[True, False, True], [True, True, False]])
bf = f32.astype(BF16)
f16 = f32.astype(np.float16)
spd = np.array([[4.0, 1.0], [1.0, 3.0]])
key = np.array([0, 42], np.uint32)

# (primitive, operands, params): the rules must agree with the implementation.
CASES = []
for x in (f32, f64, i8, i32, u32, bl, bf, f16):
    for op in ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min"):
        CASES.append((op, (x,), dict(axes=(1,), keepdims=False)))
    CASES += [("cumsum", (x,), dict(axis=1, reverse=False)), ("cumprod", (x,), dict(axis=0, reverse=True)),
              ("argmax", (x,), dict(axis=1, keepdims=True)), ("argmin", (x,), dict(axis=None, keepdims=False)),
              ("negative", (x,), {}) if x.dtype != bool else ("logical_not", (x,), {}),
              ("add", (x, x), {}), ("multiply", (x, 2), {}), ("maximum", (x, x), {}),
              ("less", (x, x), {}), ("select", (bl, x, x), {}),
              ("reshape", (x,), dict(shape=(3, -1))), ("transpose", (x,), dict(axes=(1, 0))),
              ("broadcast_in_dim", (x,), dict(shape=(4, 2, 3), broadcast_dimensions=(1, 2))),
              ("concatenate", (x, x), dict(axis=1)),
              ("slice", (x,), dict(start_indices=(0, 1), limit_indices=(2, 3), strides=(1, 2))),
              ("pad", (x,), dict(pad_width=((1, 0), (0, 2)), constant=0)),
              ("convert", (x,), dict(dtype=np.dtype(np.float32)))]
for x in (f32, f64, bf, f16):
    for op in ("exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "logistic", "sqrt",
               "rsqrt", "abs", "sign", "floor", "ceil", "round"):
        CASES.append((op, (x,), {}))
    CASES += [("integer_pow", (x,), dict(y=3)), ("integer_pow", (x,), dict(y=-2)),
              ("power", (x, 2.0), {}), ("divide", (x, x), {}), ("subtract", (1.0, x), {}),
              ("clamp", (-0.5, x, 0.5), {}),
              ("matmul", (x, x.T), {}), ("einsum", (x, x), dict(spec="ij,kj->ik")),
              ("dot_general", (x, x), dict(contracting=((1,), (1,)), batch=((), ())))]
for x in (i32, i8):
    CASES += [("integer_pow", (x,), dict(y=2)), ("integer_pow", (x,), dict(y=-1)),
              ("matmul", (x, x.T), {})]
CASES += [
    ("dynamic_slice", (f32, 1, 5), dict(sizes=(1, 2))),
    ("dynamic_update_slice", (f32, f32[:1, :2], 0, 1), {}),
    ("gather", (f64, np.array([2, 0, 2])), dict(axis=1)),
    ("scatter_add", (f64, np.array([1, 1]), np.ones((2, 2))), dict(axis=1)),
    ("iota", (), dict(shape=(2, 3), dtype=np.dtype(np.int32), dimension=1)),
    ("cholesky", (spd,), {}), ("cholesky", (spd.astype(np.float32),), {}),
    ("cholesky", (np.eye(2, dtype=np.int64),), {}),
    ("triangular_solve", (spd, f64[:, :2].T.copy()), dict(lower=True, transpose_a=False)),
    ("solve", (spd, np.ones(2)), {}), ("inv", (np.eye(2, dtype=np.int32),), {}),
    ("slogdet", (np.eye(2, dtype=np.int64),), {}), ("slogdet", (spd.astype(np.float32),), {}),
    ("threefry2x32", (key, u32, u32), {}),
    ("random_bits", (key,), dict(bit_width=8, shape=(2, 2))),
    ("random_uniform", (key, 0.0, 1.0), dict(shape=(3,), dtype=BF16)),
    ("random_normal", (key,), dict(shape=(0, 2), dtype=np.dtype(np.float16))),
]


def _case_id(case):
    name, args, params = case
    dts = ",".join(np.asarray(a).dtype.name for a in args)
    return f"{name}({dts}){'|' + ','.join(map(str, params.values())) if params else ''}"


def _params(cases):
    return [pytest.param(c, id=_case_id(c)) for c in cases]


def check_rules_agree(name, args, params):
    p = REGISTRY[name]
    with np.errstate(all="ignore"):
        out = p.impl(*args, **params)
    want = p.abstract_eval(*(_aval.of(a) for a in args), **params)
    outs = out if p.multiple_results else (out,)
    wants = want if p.multiple_results else (want,)
    for o, w in zip(outs, wants):
        o = np.asarray(o)
        assert tuple(w.shape) == o.shape, f"{name}: shape rule {w.shape}, impl {o.shape}"
        if w.dtype is not None:       # weak-only operands may leave the dtype open
            assert np.dtype(w.dtype) == o.dtype, f"{name}: dtype rule {w.dtype}, impl {o.dtype}"


@pytest.mark.parametrize("case", _params(CASES))
def test_rules_describe_the_implementation(case):
    check_rules_agree(*case)


# What the rules may still know when every array operand is unknown (dtype and shape None):
# a dtype fixed by the primitive or its params, and a shape (or rank) given by the params.
KNOWS_DTYPE = {"argmax", "argmin", "convert", "iota", "random_bits", "random_normal", "random_uniform",
               "threefry2x32"}
KNOWS_SHAPE = {"broadcast_in_dim", "dynamic_slice", "iota", "random_bits", "random_normal", "random_uniform",
               "slice", "argmin", "reshape"}      # argmin with axis=None is a scalar; reshape knows its rank


def check_unknown_in_unknown_out(name, args, params):
    """With unknown array operands the rules neither raise nor invent: each output is an
    AbstractValue whose dtype is known only for KNOWS_DTYPE and shape only for KNOWS_SHAPE,
    and whatever is known (dtype, rank, each int dim) is what the implementation returns."""
    p = REGISTRY[name]
    unknown = [AbstractValue() if not isinstance(a, (int, float)) else _aval.of(a) for a in args]
    got = p.abstract_eval(*unknown, **params)
    with np.errstate(all="ignore"):
        concrete = p.impl(*args, **params)
    for a, o in zip(got if p.multiple_results else (got,), concrete if p.multiple_results else (concrete,)):
        o = np.asarray(o)
        assert isinstance(a, AbstractValue), f"{name}: {a!r} is not an AbstractValue"
        assert (a.dtype is not None) == (name in KNOWS_DTYPE), f"{name}: dtype {a.dtype} from unknown operands"
        assert (a.shape is not None) == (name in KNOWS_SHAPE), f"{name}: shape {a.shape} from unknown operands"
        if a.dtype is not None:
            assert np.dtype(a.dtype) == o.dtype, f"{name}: dtype rule {a.dtype}, impl {o.dtype}"
        if a.shape is not None:
            assert len(a.shape) == o.ndim, f"{name}: rank {len(a.shape)}, impl {o.ndim}"
            for d, e in zip(a.shape, o.shape):
                assert d is None or d == e, f"{name}: shape rule {a.shape}, impl {o.shape}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_rules_give_unknown_for_unknown_avals(case):
    check_unknown_in_unknown_out(*case)


def test_negative_control_unknown_check_sees_an_invented_shape(monkeypatch):
    p = REGISTRY["exp"]
    monkeypatch.setattr(p, "shape_rule", lambda x, **_: (2, 3))
    with pytest.raises(AssertionError, match="shape"):
        check_unknown_in_unknown_out("exp", (f32,), {})


def _a(dtype, shape):
    return AbstractValue(np.dtype(dtype), shape)


# Known but incompatible operands: the rule raises the library's error class, naming the primitive.
BAD = [
    ("add", (_a(np.float32, (2, 3)), _a(np.float32, (4, 5))), {}, ShapeError, "add: shapes"),
    ("matmul", (_a(np.float32, (2, 3)), _a(np.float32, (2, 3))), {}, ShapeError, "matmul"),
    ("reshape", (_a(np.float32, (2, 3)),), dict(shape=(4, -1)), ShapeError, "reshape"),
    ("transpose", (_a(np.float32, (2, 3)),), dict(axes=(0, 0)), ShapeError, "transpose"),
    ("concatenate", (_a(np.float32, (2, 3)), _a(np.float32, (2, 3, 1))), dict(axis=0), ShapeError, "ranks"),
    # regression: the sizes off the concatenated axis were not compared ((2,3)+(2,4) on axis 0 gave (4,3))
    ("concatenate", (_a(np.float32, (2, 3)), _a(np.float32, (2, 4))), dict(axis=0), ShapeError, "axis 1"),
]


@pytest.mark.parametrize("name,args,params,error,match", BAD, ids=[f"{b[0]}-{b[-1]}" for b in BAD])
def test_incompatible_operands_raise_the_library_error(name, args, params, error, match):
    with pytest.raises(error, match=match):
        REGISTRY[name].abstract_eval(*args, **params)
    assert issubclass(error, TlalocError)


def test_negative_control_lying_rules_are_caught(monkeypatch):
    p = REGISTRY["reduce_sum"]
    monkeypatch.setattr(p, "dtype_rule", lambda x, **_: x.dtype)          # the old int8 -> int8 rule
    with pytest.raises(AssertionError, match="dtype rule int8, impl int64"):
        check_rules_agree("reduce_sum", (i8,), dict(axes=None, keepdims=False))
    monkeypatch.setattr(p, "shape_rule", lambda x, **_: x.shape)
    with pytest.raises(AssertionError, match="shape rule"):
        check_rules_agree("reduce_sum", (f32,), dict(axes=None, keepdims=False))
