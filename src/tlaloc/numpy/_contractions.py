"""``tlaloc.numpy`` contractions: matmul, dot, vdot, inner, outer, einsum, tensordot, trace, diagonal,
and the Kronecker product kron."""
from __future__ import annotations

import numpy as _np

from .._prims import linalg as _la
from . import _is_symbolic, _rank, expand_dims, multiply, ravel
from .._prims import diagonal as _dg
from ._reductions import sum


def matmul(x1, x2):
    """NumPy ``matmul``: (..., n, k) @ (..., k, m) -> (..., n, m); 1-D operands as NumPy."""
    return _la.matmul(x1, x2)


def dot(a, b):
    """NumPy ``dot``: a product when either operand is a scalar (0-d); matmul for 1-D and 2-D
    operands; above 2-D a sum over the last axis of ``a`` and the second-to-last of ``b``
    (``a.shape[:-1] + b.shape[:-2] + b.shape[-1:]``, not matmul's batch broadcasting). The ranks
    must be known (an operand of unknown rank specialises the function at its first call).
    Regression: (2,3,4)·(2,4,5) gave matmul's (2,3,5), not NumPy's (2,3,2,5)."""
    if _known_scalar(a) or _known_scalar(b):
        return multiply(a, b)
    ra, rb = _rank(a, "dot"), _rank(b, "dot")
    if ra <= 2 and rb <= 2:
        return _la.matmul(a, b)
    return _la.dot_general(a, b, ((ra - 1,), (max(rb - 2, 0),)))


def _known_scalar(x) -> bool:
    """0-d: a Python/NumPy scalar, or a symbolic value whose rank is known to be 0."""
    if _is_symbolic(x):
        return x.aval.rank == 0
    return _np.ndim(x) == 0


def vdot(a, b):
    return sum(multiply(ravel(a), ravel(b)))


def inner(a, b):
    """NumPy ``inner``: a product when either operand is a scalar (0-d), else a sum over the last
    axes with shape ``a.shape[:-1] + b.shape[:-1]``. The ranks must be known (an operand of unknown
    rank specialises the function at its first call). Regression: ``inner`` of two (3, 4) arrays
    broadcast the leading axes, (3,) not (3, 3)."""
    if _known_scalar(a) or _known_scalar(b):
        return multiply(a, b)
    ra, rb = _rank(a, "inner"), _rank(b, "inner")
    if ra == 1 and rb == 1:
        return _la.einsum("i,i->", a, b)
    return _la.dot_general(a, b, ((ra - 1,), (rb - 1,)))


def outer(a, b):
    return multiply(expand_dims(ravel(a), 1), expand_dims(ravel(b), 0))


def einsum(subscripts, *operands, optimize=False):
    """Einstein summation, NumPy's subscripts: an explicit output (``'ij,jk->ik'``), or NumPy's
    implicit one (``'ij,jk'``: the indices that appear once, in alphabetical order, after the
    broadcast ``...`` axes). Regression: the implicit form was refused.

    An index repeated within one operand (``'ii'``, ``'ii->i'``, ``'bii->b'``) takes that operand's
    diagonal first (as NumPy does), so it differentiates. ``optimize`` (NumPy's contraction-order
    search) is accepted and changes nothing: tlaloc contracts in its own fixed order."""
    spec = _expand_ellipsis(_explicit_output(subscripts), operands)
    ins, out = spec.split("->")
    parts = ins.split(",")
    if len(parts) != len(operands):
        raise ValueError(f"einsum: {len(parts)} operand subscripts in {subscripts!r} but {len(operands)} operands")
    new_parts, new_ops = [], []
    for part, x in zip(parts, operands):
        part, x = _take_repeated_diagonals(part, x)
        new_parts.append(part)
        new_ops.append(x)
    return _la.einsum(",".join(new_parts) + "->" + out, *new_ops)


def _expand_ellipsis(spec: str, operands) -> str:
    """``spec`` with ``...`` written out as index letters it does not use, where the operands' ranks
    are known (compiled code takes named indices only); unchanged where there is no ``...``. A rank not
    known yet raises RankUnknownError (the front end builds again at the first call)."""
    if "..." not in spec:
        return spec
    ins, out = spec.split("->")
    parts = ins.split(",")
    ranks = []
    for p, x in zip(parts, operands):
        r = x.aval.rank if hasattr(x, "aval") else _np.ndim(x)
        if r is None:
            from ..errors import RankUnknownError
            raise RankUnknownError("einsum: the rank of an operand with '...' is unknown at definition time; "
                                   "annotate the argument (e.g. F64['n', 'm'])")
        ranks.append(r - len(p.replace("...", "")) if "..." in p else 0)
    if any(k < 0 for k in ranks):
        raise ValueError(f"einsum: an operand of {spec!r} has fewer axes than its indices")
    width = max(ranks, default=0)
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in spec][:width]
    new = [p.replace("...", "".join(free[width - k:])) for p, k in zip(parts, ranks)]
    return ",".join(new) + "->" + out.replace("...", "".join(free))


def _take_repeated_diagonals(part: str, x):
    """``(subscripts, operand)`` with each index repeated in ``part`` replaced by the diagonal over
    its two axes (moved last, as tnp.diagonal puts it)."""
    if "..." in part:
        return part, x
    while True:
        seen = {}
        pair = None
        for k, c in enumerate(part):
            if c in seen:
                pair = (seen[c], k, c)
                break
            seen[c] = k
        if pair is None:
            return part, x
        p, q, c = pair
        x = diagonal(x, 0, p, q)
        part = part[:p] + part[p + 1:q] + part[q + 1:] + c


def _explicit_output(subscripts: str) -> str:
    spec = subscripts.replace(" ", "")
    if "->" in spec:
        return spec
    letters = spec.replace("...", "").replace(",", "")
    once = sorted(c for c in set(letters) if letters.count(c) == 1)
    return spec + "->" + ("..." if "..." in spec else "") + "".join(once)


def tensordot(a, b, axes=2):
    """NumPy ``tensordot``; ranks must be known (eager arrays, or annotated arguments)."""
    ra, rb = _rank(a, "tensordot"), _rank(b, "tensordot")
    if isinstance(axes, int):
        ax_a, ax_b = list(range(ra - axes, ra)), list(range(axes))
    else:
        ax_a, ax_b = ([axes[0]] if isinstance(axes[0], int) else list(axes[0]),
                      [axes[1]] if isinstance(axes[1], int) else list(axes[1]))
    ax_a, ax_b = [x % ra for x in ax_a], [x % rb for x in ax_b]
    return _la.dot_general(a, b, (tuple(ax_a), tuple(ax_b)))


def trace(a, offset=0, axis1=0, axis2=1):
    return sum(diagonal(a, offset, axis1, axis2), axis=-1)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """Diagonal of ``a`` over (axis1, axis2), moved last (NumPy semantics)."""
    return _dg.diagonal(a, offset, axis1, axis2)


def kron(a, b):
    """Kronecker product, as ``numpy.kron``: the shorter rank gains leading 1s, then block
    ``(i0, i1, ...)`` of the result is ``a[i0, i1, ...] * b``.

    Shape: ``(a.shape[k] * b.shape[k] for each k)``; dtype: the promoted one. Built as a product
    of two gathers (``a`` repeated, ``b`` tiled), so sizes may be symbolic. Raises ShapeError
    when a rank is unknown at definition time."""
    from . import asarray, shape, take
    a = a if _is_symbolic(a) else asarray(a)
    b = b if _is_symbolic(b) else asarray(b)
    ra, rb = _rank(a, "kron"), _rank(b, "kron")
    for _ in range(rb - ra):
        a = expand_dims(a, 0)
    for _ in range(ra - rb):
        b = expand_dims(b, 0)
    for ax in range(max(ra, rb)):
        na, nb = shape(a)[ax], shape(b)[ax]
        if type(na) is int and type(nb) is int:
            k = _np.arange(na * nb, dtype=_np.int64)
            ia, ib = k // nb, k % nb
        else:
            from . import arange, floor_divide, remainder
            k = arange(multiply(na, nb), dtype=_np.int64)
            ia, ib = floor_divide(k, nb), remainder(k, nb)
        a, b = take(a, ia, axis=ax), take(b, ib, axis=ax)
    return multiply(a, b)
