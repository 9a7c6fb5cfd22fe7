"""Typed-tensor refusals at definition time, each at the user's file:line:col
with both operand types in the message."""
import inspect
import os

import pytest

import tlaloc as tl

import typed_refusal_cases as C

_LINES = inspect.getsource(C).splitlines()

CASES = [
    # (function, marker, expression whose first column is reported, error class, words)
    (C.broadcast_mismatch, "broadcast", "x + y", tl.TypeAnnotationError,
     ["add: cannot broadcast", "F32[batch, hidden]", "F32[batch]", "`hidden`", "`batch`"]),
    (C.contract_no_shared_name, "contract", "tl.contract(x, w)", tl.TypeAnnotationError,
     ["contract:", "F32[batch, hidden]", "F32[seq, out]", "share no axis name"]),
    (C.dtype_mix, "dtype", "x * y", tl.DTypeError, ["float32", "float64", "never mix"]),
    (C.matmul_mismatch, "matmul", "x @ w", tl.TypeAnnotationError,
     ["matmul", "`hidden` of F32[batch, hidden]", "`seq` of F32[seq, out]"]),
    (C.einsum_mismatch, "einsum", "np.einsum(", tl.TypeAnnotationError,
     ["einsum", "index `j`", "`hidden`", "`seq`", "F32[batch, hidden]", "F32[seq, out]"]),
    (C.tensordot_mismatch, "tensordot", "np.tensordot(", tl.TypeAnnotationError,
     ["dot_general", "`hidden`", "`seq`"]),
    (C.transpose_then_add, "transpose", "x.T + x", tl.TypeAnnotationError,
     ["F32[cols, rows]", "F32[rows, cols]"]),
    (C.reduce_then_broadcast, "reduction", "m * b", tl.TypeAnnotationError,
     ["F32[batch]", "F32[hidden]"]),
    (C.mismatch_in_loop, "loop", "x * b", tl.TypeAnnotationError, ["F32[batch, hidden]", "F32[batch]"]),
    (C.mismatch_in_branch, "branch", "x - b", tl.TypeAnnotationError,
     ["subtract", "F32[batch, hidden]", "F32[batch]"]),
    (C.batch_axes_mismatch, "batch axes", "x @ w", tl.TypeAnnotationError,
     ["batch axis", "`b` in F32[b, m, k]", "`c` in F32[c, k, n]"]),
    (C.contract_without_names, "unnamed", "tl.contract(x, w)", tl.TypeAnnotationError,
     ["no axis names", "tl.named"]),
    (C.named_rank_mismatch, "named rank", "tl.named(x", tl.TypeAnnotationError, ["2 axes", "3 names"]),
    (C.mismatch_in_helper, "helper", "u * v", tl.TypeAnnotationError, ["F32[batch, hidden]", "F32[batch]"]),
]


def _where(marker, expr):
    hits = [i for i, l in enumerate(_LINES) if l.rstrip().endswith(f"# REFUSE: {marker}")]
    assert len(hits) == 1, marker
    line = _LINES[hits[0]]
    return hits[0] + 1, line.index(expr) + 1


@pytest.mark.parametrize("fn,marker,expr,cls,words", CASES, ids=[c[1] for c in CASES])
def test_refused_at_definition_with_location_and_types(fn, marker, expr, cls, words):
    with pytest.raises(cls) as info:
        tl.grad(fn)
    err = info.value
    lineno, col = _where(marker, expr)
    text = str(err)
    prefix = f"{C.__file__}:{lineno}:{col}: "
    assert text.startswith(prefix), (prefix, text)
    if isinstance(err, tl.FenceError):
        assert os.path.samefile(err.filename, C.__file__)
        assert (err.lineno, err.offset) == (lineno, col)
    for w in words:
        assert w in text, (w, text)


@pytest.mark.parametrize("fn", [C.broadcast_mismatch, C.matmul_mismatch])
def test_every_transform_refuses(fn):
    for make in (tl.grad, tl.jvp, tl.hessian, tl.jacrev):
        with pytest.raises(tl.TypeAnnotationError):
            make(fn)


def test_bad_annotations_are_refused_where_written():
    from tlaloc.typing import F32
    with pytest.raises(tl.TypeAnnotationError) as info:
        F32["batch,hidden"]
    assert "spaces, not commas" in str(info.value)
    assert info.value.filename == __file__
    with pytest.raises(tl.TypeAnnotationError):
        F32[1.5]
    with pytest.raises(tl.TypeAnnotationError):
        F32["...", "*rest"]
    with pytest.raises(tl.TypeAnnotationError):
        F32["n+"]
