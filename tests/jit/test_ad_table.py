"""A representative subset of the AD case table through tl.jit, default on.

Reverse (tl.grad / tl.value_and_grad), forward (tl.jvp, and tl.jacfwd as a vmap
over the basis), vmap (tl.vmap) and hessian (tl.hessian) of programs that
together cover every construct the front end compiles: if/elif/else, for over
ranges and over rows, while, break, return inside a loop, closures, subscript
writes, broadcasting, matmul, pytree parameters and the math functions. Each is
compared with the eager transform (the interpreter's oracle) at every argument
point of the row: rtol 1e-12 in float64, 1e-5 in float32 (``ad_modes.py``).

XLA runs every row in every mode in float64 and float32. IREE compiles slowly
(about 1-3 s a program), so it runs each mode on a spread of rows in float32,
and in float64 the rows that show the two outcomes there: equal, or refused by
name (float64 ``tanh``/``sin`` do not link). The whole table, every backend and
dtype, is ``test_ad_table_slow.py`` (``TLALOC_SLOW_TESTS=1``).
"""
import numpy as np
import pytest

from . import ad_modes

cases = pytest.importorskip("tests.ad.cases", reason="the AD case table lives in tests/ad")

#: row -> the constructs it covers
SUBSET = {
    "broadcast_keepdims": "broadcasting, keepdims reductions",
    "matmul_batched": "batched matmul",
    "if_elif_else": "if / elif / else on array values",
    "for_over_rows": "for over the rows of an array",
    "for_break": "for over range with break",
    "while_break": "while on a value with break",
    "return_in_loop_acc": "return inside a loop",
    "nested_closure": "closures (nested functions reading outer arrays)",
    "setitem_loop": "subscript writes in a loop",
    "dict_params": "pytree (dict) parameters, tanh MLP",
    "unary_math": "exp/log/tanh/sin/... and their derivatives",
}
MODES = ("reverse", "forward", "vmap", "hessian")

#: IREE float32: each mode on a spread of rows (every construct at least once)
IREE_F32 = {
    "reverse": ("if_elif_else", "for_break", "return_in_loop_acc", "setitem_loop", "dict_params"),
    "forward": ("matmul_batched", "while_break", "nested_closure", "unary_math"),
    "vmap": ("broadcast_keepdims", "for_over_rows", "while_break"),
    "hessian": ("matmul_batched", "nested_closure", "if_elif_else"),
}
#: IREE float64: rows without tanh/sin/cos/atan2 run; unary_math is refused by name
IREE_F64 = (("setitem_loop", "reverse"), ("broadcast_keepdims", "vmap"), ("unary_math", "reverse"))

#: rows whose jacfwd is checked too (forward mode); the others check tl.jvp only
JACFWD = {"matmul_batched", "broadcast_keepdims", "for_over_rows", "while_break", "unary_math"}


def expected(name, mode, backend, dtype) -> str:
    """What the row must give: "ok", or the start of its refusal / not-applicable reason."""
    if name == "while_break" and mode in ("reverse", "hessian"):
        return "refused: reverse-mode while loop needs a bound"
    if name == "dict_params" and mode in ("vmap", "hessian"):
        return "n/a"
    if backend == "iree" and dtype == np.float64 and name == "unary_math":
        return "refused: IREE (llvm-cpu) cannot compile"
    return "ok"


def _runs():
    runs = []
    for dtype, tag in ((np.float64, "f64"), (np.float32, "f32")):
        for name in SUBSET:
            for mode in MODES:
                runs.append(pytest.param(name, mode, "xla", dtype, id=f"xla-{tag}-{mode}-{name}"))
    for mode, names in IREE_F32.items():
        for name in names:
            runs.append(pytest.param(name, mode, "iree", np.float32, id=f"iree-f32-{mode}-{name}"))
    for name, mode in IREE_F64:
        runs.append(pytest.param(name, mode, "iree", np.float64, id=f"iree-f64-{mode}-{name}"))
    return runs


def test_the_subset_covers_every_construct_and_mode():
    assert set(SUBSET) <= set(cases.BY_NAME), sorted(set(SUBSET) - set(cases.BY_NAME))
    covered = {n for names in IREE_F32.values() for n in names}
    assert covered == set(SUBSET), sorted(set(SUBSET) - covered)


@pytest.mark.parametrize("name,mode,backend,dtype", _runs())
def test_jit_equals_the_interpreter(name, mode, backend, dtype):
    if backend == "iree":
        pytest.importorskip("iree.runtime", reason="backend='iree' needs iree-base-runtime")
    case = cases.BY_NAME[name]
    kw = {"jacobian": name in JACFWD} if mode == "forward" else {}
    got = ad_modes.check(case, mode, backend, dtype, **kw)
    want = expected(name, mode, backend, dtype)
    assert got.startswith(want), f"{name} {mode} on {backend}: got {got!r}, want {want!r}"
