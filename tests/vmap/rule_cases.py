"""One row per (primitive, operand shapes, params): the table every batching
rule is checked against, batching each operand alone and all of them at once.

``gens`` draw one example of each operand from an ``rng``; index operands
stay in range, matrices are well conditioned.
"""
from __future__ import annotations

import numpy as np

from tlaloc._prims.elementwise import UNARY


def f(*shape, lo=-2.0, hi=2.0):
    return lambda rng: rng.uniform(lo, hi, shape)


def pos(*shape):
    return f(*shape, lo=0.1, hi=0.9)


def ints(hi, *shape):
    return lambda rng: rng.integers(0, hi, shape).astype(np.int64)


def scalar_int(hi):
    return lambda rng: np.int64(rng.integers(0, hi))


def boolean(*shape):
    return lambda rng: rng.uniform(size=shape) > 0.5


def spd(n):
    def gen(rng):
        a = rng.standard_normal((n, n))
        return a @ a.T + n * np.eye(n)
    return gen


def lower(n):
    def gen(rng):
        return np.tril(rng.standard_normal((n, n))) + 3 * np.eye(n)
    return gen


def u32(*shape):
    return lambda rng: rng.integers(0, 2 ** 32, shape, dtype=np.uint64).astype(np.uint32)


KEY = lambda rng: np.array([0, 42], np.uint32)       # noqa: E731
ALL = ("s", None, None, None)

CASES = []


def case(name, params, *gens, tag=""):
    CASES.append((f"{name}{'-' + tag if tag else ''}", name, params, list(gens)))


# -- elementwise ---------------------------------------------------------------------------------
for _n in UNARY:
    if _n in ("logical_not",):
        case(_n, {}, boolean(3, 4))
    else:
        case(_n, {}, pos(3, 4))
for _n in ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "arctan2", "remainder",
           "floor_divide", "less", "less_equal", "greater", "greater_equal", "equal", "not_equal",
           "safe_mul", "safe_div"):
    case(_n, {}, pos(3, 4), pos(4))
    case(_n, {}, pos(4), pos(2, 3, 4), tag="rank")
case("polygamma", {}, ints(4, 3, 4), pos(4))
case("polygamma", {}, ints(4, 4), pos(2, 3, 4), tag="rank")
case("logical_and", {}, boolean(3, 4), boolean(4))
case("logical_or", {}, boolean(3), boolean(2, 3))
case("integer_pow", {"y": 3}, f(3, 4))
case("convert", {"dtype": np.dtype(np.float32)}, f(3, 4))
case("select", {}, boolean(3, 4), f(3, 4), f(4))
case("clamp", {}, f(), f(3, 4), f(4, lo=2.0, hi=3.0))
case("zeros_like", {}, f(2, 3))
case("stop_gradient", {}, f(2, 3))
case("copy", {}, f(2, 3))

# -- reductions --------------------------------------------------------------------------------
for _n in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod"):
    case(_n, {"axes": (1,), "keepdims": False}, f(3, 4))
    case(_n, {"axes": None, "keepdims": True}, f(3, 4), tag="all")
    case(_n, {"axes": (-1, 0), "keepdims": False}, f(2, 3, 4), tag="neg")
for _n in ("reduce_any", "reduce_all"):
    case(_n, {"axes": (0,), "keepdims": False}, boolean(3, 4))
    case(_n, {"axes": None, "keepdims": False}, boolean(3, 4), tag="all")
case("prod_others", {"axes": (1,)}, f(3, 4))
case("prod_others", {"axes": None}, f(2, 3), tag="all")
case("prod_others_grad", {"axes": (1,)}, f(3, 4), f(3, 4))
for _n in ("argmax", "argmin"):
    case(_n, {"axis": 1, "keepdims": False}, f(3, 4))
    case(_n, {"axis": None, "keepdims": False}, f(3, 4), tag="flat")
    case(_n, {"axis": None, "keepdims": True}, f(3, 4), tag="flat-keep")
for _n in ("cumsum", "cumprod", "cummax"):
    case(_n, {"axis": 1, "reverse": False}, f(3, 4))
    case(_n, {"axis": -2, "reverse": True}, f(3, 4), tag="rev")
case("cumprod_grad", {"axis": 1, "reverse": False}, f(3, 4), f(3, 4))
case("cumprod_jvp", {"axis": 0, "reverse": True}, f(3, 4), f(3, 4))

# -- shapes ------------------------------------------------------------------------------------
case("reshape", {"shape": (4, 3)}, f(3, 4))
case("reshape", {"shape": (-1,)}, f(3, 4), tag="flat")
case("transpose", {"axes": (2, 0, 1)}, f(2, 3, 4))
case("transpose", {"axes": None}, f(2, 3, 4), tag="rev")
case("swapaxes", {"axis1": -1, "axis2": 0}, f(2, 3, 4))
case("broadcast_to", {"shape": (2, 3, 4)}, f(3, 1))
case("broadcast_in_dim", {"shape": (2, 3), "broadcast_dimensions": (1,)}, f(3))
case("expand_dims", {"axis": (0, -1)}, f(3, 4))
case("squeeze", {"axis": None}, f(1, 3, 1))
case("squeeze", {"axis": (-1,)}, f(3, 1), tag="axis")
case("concatenate", {"axis": 1}, f(3, 2), f(3, 4))
case("concatenate", {"axis": -1}, f(2), f(3), f(1), tag="three")
case("split_like", {"axis": 1}, f(3, 6), f(3, 2), f(3, 4))
case("pad", {"pad_width": ((1, 0), (0, 2)), "constant": 0.5}, f(3, 4))
case("pad", {"pad_width": ((2, 1),), "constant": 0.5}, f(3, 4), tag="every_axis")
case("check_labels", {"ignore_index": -100, "who": "cross_entropy"}, ints(4, 3, 5), lambda rng: np.int64(4))
case("check_cotangent", {"name": "f", "index": 0}, f(3, 4), f(3, 4))
case("check_input_shape", {"who": "LayerNorm", "what": "(..., 4)", "trailing": (4,), "rank": None,
                           "batch_axes": ()}, f(3, 4))
case("check_input_shape", {"who": "MultiHeadAttention", "what": "(B, T, 4)", "trailing": (4,), "rank": 2,
                           "batch_axes": ()}, f(3, 4), tag="rank")
case("check_same_shape", {"who": "mse_loss", "names": ("pred", "target"), "batch_axes": ((), ())}, f(3, 4), f(3, 4))
case("flip", {"axes": None}, f(3, 4))
case("flip", {"axes": (1,)}, f(3, 4), tag="axis")
case("slice", {"start_indices": (0, 1), "limit_indices": (3, 4), "strides": (2, 1)}, f(3, 4))

# -- broadcasting helpers (x, like) --------------------------------------------------------------
case("sum_to", {}, f(2, 3, 4), f(3, 1))
case("sum_to", {}, f(3, 4), f(4), tag="lead")
case("broadcast_like", {}, f(4), f(3, 4))
case("reshape_like", {}, f(12), f(3, 4))
case("cast_like", {}, lambda rng: rng.uniform(size=3).astype(np.float32), f(3))
case("expand_reduced", {"axes": (1,), "keepdims": False}, f(3), f(3, 4))
case("expand_reduced", {"axes": None, "keepdims": False}, f(), f(3, 4), tag="all")

# -- misc ----------------------------------------------------------------------------------------
case("dim_size", {"axis": -1}, f(3, 4))
case("reduced_count", {"axes": (1,)}, f(3, 4))
case("reduced_count", {"axes": None}, f(3, 4), tag="all")
case("grad_seed", {}, f())
case("tril_mask", {"k": 0}, f(3, 4))
case("diag_mask", {}, f(3, 3))

# -- indexing ------------------------------------------------------------------------------------
_GETITEM = [
    ("scalar", (("d", 0),), [f(5, 4), scalar_int(5)], (4,)),
    ("static", (("s", 1, 4, None), ("i", 2)), [f(5, 4, 3)], (3, 3)),
    ("array", (ALL, ("d", 0)), [f(5, 4), ints(4, 3)], (5, 3)),
    ("front", (("d", 0),), [f(5, 4), ints(5, 2, 3)], (2, 3, 4)),
    ("split", (("d", 0), ALL, ("d", 1)), [f(5, 4, 3), ints(5, 2), ints(3, 2)], (2, 4)),
    ("pair", (ALL, ("d", 0), ("d", 1)), [f(5, 4, 3), ints(4, 2, 3), ints(3, 3)], (5, 2, 3)),
    ("int-array", (ALL, ("i", 1), ("d", 0)), [f(5, 4, 3), ints(3, 2)], (5, 2)),
    ("newaxis", (("n",), ("e",), ("d", 0)), [f(5, 4), ints(4, 2)], (1, 5, 2)),
    ("ellipsis", (("e",), ("d", 0), ALL), [f(2, 5, 4), ints(5, 3)], (2, 3, 4)),
    ("bound", (("s", ("d", 0), None, None),), [f(5, 4), scalar_int(3)], None),
]
for _tag, _spec, _gens, _vshape in _GETITEM:
    case("getitem", {"spec": _spec}, *_gens, tag=_tag)
    if _vshape is not None and _tag != "bound":
        for _n in ("index_set", "index_add"):
            case(_n, {"spec": _spec}, _gens[0], f(*_vshape), *_gens[1:], tag=_tag)
            case(_n, {"spec": _spec}, _gens[0], f(*_vshape[1:]), *_gens[1:], tag=_tag + "-bcast")
case("index_add", {"spec": (("d", 0),)}, f(5), f(6), ints(5, 6), tag="repeated")
case("dynamic_slice", {"sizes": (2, 3)}, f(5, 4), scalar_int(5), scalar_int(4))
case("dynamic_slice_like", {}, f(5, 4), f(2, 3), scalar_int(5), scalar_int(4))
case("dynamic_update_slice", {}, f(5, 4), f(2, 3), scalar_int(5), scalar_int(4))
case("gather", {"axis": 1}, f(5, 4), ints(4, 3))
case("gather", {"axis": 0}, f(5, 4), ints(5, 2, 2), tag="axis0")
case("gather", {"axis": -1}, f(2, 5, 4), scalar_int(4), tag="scalar")
case("scatter_add", {"axis": 1}, f(5, 4), ints(4, 6), f(5, 6))
case("scatter_add", {"axis": 0}, f(5, 4), ints(5, 3), f(3, 4), tag="axis0")

# -- contractions and linear algebra -----------------------------------------------------------
for _tag, _x, _y in [("mm", (3, 4), (4, 2)), ("vm", (4,), (4, 2)), ("mv", (3, 4), (4,)), ("vv", (4,), (4,)),
                     ("bm", (2, 3, 4), (4, 5)), ("mb", (3, 4), (2, 4, 5)), ("vb", (4,), (2, 4, 5))]:
    case("matmul", {}, f(*_x), f(*_y), tag=_tag)
    _z = np.matmul(np.zeros(_x), np.zeros(_y)).shape
    case("matmul_t_lhs", {}, f(*_z), f(*_y), f(*_x), tag=_tag)
    case("matmul_t_rhs", {}, f(*_z), f(*_x), f(*_y), tag=_tag)
case("einsum", {"spec": "ij,jk->ik"}, f(3, 4), f(4, 2))
case("einsum", {"spec": "...i,...i->..."}, f(2, 3), f(3), tag="ellipsis")
case("einsum", {"spec": "ii->i"}, f(3, 3), tag="diag")
case("einsum", {"spec": "ij,j,jk->ik"}, f(2, 3), f(3), f(3, 2), tag="three")
case("dot_general", {"contracting": ((1,), (0,)), "batch": ((), ())}, f(3, 4), f(4, 2))
case("dot_general", {"contracting": ((2,), (1,)), "batch": ((0,), (0,))}, f(2, 3, 4), f(2, 4, 5), tag="batch")
case("cholesky", {}, spd(3))
case("inv", {}, spd(3))
case("slogdet", {}, spd(3))
for _lo in (True, False):
    for _tr in (True, False):
        _gen = lower(3) if _lo else (lambda rng: lower(3)(rng).T)
        case("triangular_solve", {"lower": _lo, "transpose_a": _tr}, _gen, f(3, 2), tag=f"{_lo}-{_tr}")
case("triangular_solve", {"lower": True, "transpose_a": False}, lower(3), f(3), tag="vec")
case("solve", {}, spd(3), f(3, 2))
case("solve", {}, spd(3), f(3), tag="vec")
case("solve", {}, spd(3), f(2, 3, 2), tag="stack")
case("diagonal", {"offset": 1, "axis1": 0, "axis2": -1}, f(3, 2, 4))
case("diagonal_scatter", {"offset": 0, "axis1": 0, "axis2": 1}, f(3), f(3, 3))
case("eigh", {}, spd(3))
case("svd", {"full_matrices": False}, f(4, 3))
case("qr", {"mode": "reduced"}, f(4, 3))

# -- sorting and along-axis indexing --------------------------------------------------------------
case("argsort", {"axis": -1, "descending": False}, f(3, 5))
case("argsort", {"axis": 0, "descending": True}, f(4, 2), tag="desc")
case("take_along_axis", {"axis": 1}, f(3, 4), ints(4, 3, 5))
case("take_along_axis", {"axis": -1}, f(1, 4), ints(4, 3, 2), tag="broadcast")
case("add_along_axis", {"axis": 1}, f(3, 4), ints(4, 3, 5), f(3, 5))

# -- random numbers (one key for every example) ---------------------------------------------------
case("threefry2x32", {}, KEY, u32(3), u32(3))
case("random_uniform", {"shape": (3,), "dtype": np.dtype(np.float64)}, KEY, f(3, lo=-2, hi=-1), f(3, lo=1, hi=2))

# Operands that must stay the same for every example: batching them is refused by name.
UNBATCHABLE = {"threefry2x32": {0}, "random_uniform": {0}, "getitem-bound": {1}, "check_labels": {1}}
# Rules whose result matches a single example only up to rounding.
LOOSE = {"random_uniform": 1e-15}
