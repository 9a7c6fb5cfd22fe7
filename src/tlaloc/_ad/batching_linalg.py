"""Batching rules for contractions and linear algebra.

* ``matmul`` (its adjoints ``matmul_t_lhs``/``matmul_t_rhs`` are composites): 1-D operands
  become a row (lhs) or a column (rhs) matrix, batched operands get unit axes
  after the batch axis so that the batch lines up with NumPy's broadcasting of
  matmul's leading axes; the result is reshaped back.
* ``einsum``: a fresh letter for the batch axis (``ij,jk->ik`` → ``zij,jk->zik``);
  ``...`` is spelled out as letters, so result shapes stay known.
* ``dot_general``: the batch axis joins the batch dimensions (or the free ones).
* ``cholesky``/``inv``/``slogdet``/masks: already batched over leading axes.
* ``solve``/``triangular_solve``: a shared matrix solves every example at once
  with the examples as extra right-hand-side columns; a batched matrix solves
  a stack.
"""
from __future__ import annotations

import string

from .._prims import decompositions as _dec
from .._prims import linalg as _la
from .._prims import shape_ops as _sh
from .._prims import sorting as _sort
from .._prims import spectral as _spec
from .._prims._rules import normalize_axes
from .._prims.diagonal import _diagonal_p, _diagonal_scatter_p
from .batching import (axis_size, batched, example_of, example_rank, expand_after_batch, rank, shape,
                       to_front)
from .batching_rules import batch_native


# -- matmul and its adjoints -------------------------------------------------------------------

def _mm_operands(x, dx, y, dy):
    """``x``, ``y`` as matrices whose matmul broadcasts the batch correctly.

    Returns ``(X, Y, rx, ry)`` with the per-example ranks ``rx``, ``ry`` of the
    original operands (1: a vector made a row/column matrix)."""
    rx, ry = example_rank(x, dx), example_rank(y, dy)
    x, y = to_front(x, dx), to_front(y, dy)
    if rx == 1:
        x = _sh.expand_dims(x, -2)              # (k,) -> (1, k)
    if ry == 1:
        y = _sh.expand_dims(y, -1)              # (k,) -> (k, 1)
    r = max(rx, ry, 2)
    if dx is not None:
        x = expand_after_batch(x, r - max(rx, 2))
    if dy is not None:
        y = expand_after_batch(y, r - max(ry, 2))
    return x, y, rx, ry


def _vector_axes(rx, ry):
    """Axes of the matrix product that a vector operand removes."""
    return ((-2,) if rx == 1 else ()) + ((-1,) if ry == 1 else ())


def _matmul(args, dims):
    (x, y), (dx, dy) = args, dims
    X, Y, rx, ry = _mm_operands(x, dx, y, dy)
    z = _la.matmul(X, Y)
    ax = _vector_axes(rx, ry)
    return (_sh.squeeze(z, ax) if ax else z), 0


_la.matmul_p.batch = _matmul


# -- einsum / dot_general ---------------------------------------------------------------------------

def _explicit_spec(spec, ranks):
    """``spec`` with ``...`` spelled out as letters (right-aligned, as broadcasting),
    given each operand's rank."""
    ins, out = _la._parse_einsum(spec, len(ranks))
    if "." not in spec:
        return spec
    free = [c for c in string.ascii_letters if c not in spec]
    ell = [r - (len(sub) - 3) if "..." in sub else 0 for sub, r in zip(ins, ranks)]
    n = max(ell)
    letters = "".join(free[:n])
    ins = [sub.replace("...", letters[n - k:]) for sub, k in zip(ins, ell)]
    return ",".join(ins) + "->" + out.replace("...", letters)


def _einsum(args, dims, *, spec):
    if all(d is None for d in dims):          # only spell out "..."
        return _la.einsum(_explicit_spec(spec, [rank(x) for x in args]), *args), None
    xs = [to_front(x, d) for x, d in zip(args, dims)]
    ranks = [example_rank(x, d) for x, d in zip(args, dims)]
    ins, out = _la._parse_einsum(_explicit_spec(spec, ranks), len(xs))
    z = next(c for c in string.ascii_letters if c not in spec and c not in "".join(ins))
    ins = [sub if d is None else z + sub for sub, d in zip(ins, dims)]
    return _la.einsum(",".join(ins) + "->" + z + out, *xs), 0


_einsum.handles_unbatched = True
_la.einsum_p.batch = _einsum


def _dot_general(args, dims, *, contracting, batch, preferred_element_type=None):
    (x, y), (dx, dy) = args, dims
    (lc, rc), (lb, rb) = contracting, batch
    pref = {} if preferred_element_type is None else {"preferred_element_type": preferred_element_type}
    up = lambda axes: tuple(a + 1 for a in axes)            # noqa: E731
    if dx is not None and dy is not None:
        out = _la.dot_general(to_front(x, dx), to_front(y, dy), (up(lc), up(rc)),
                              ((0,) + up(lb), (0,) + up(rb)), **pref)
        return out, 0
    if dx is not None:       # the batch axis is lhs's first free axis
        out = _la.dot_general(to_front(x, dx), y, (up(lc), rc), (up(lb), rb), **pref)
        return to_front(out, len(lb)), 0
    free_x = rank(x) - len(lc) - len(lb)
    out = _la.dot_general(x, to_front(y, dy), (lc, up(rc)), (lb, up(rb)), **pref)
    return to_front(out, len(lb) + free_x), 0


_la.dot_general_p.batch = _dot_general


# -- decompositions and solves ---------------------------------------------------------------------

for _p in (_dec.cholesky_p, _dec.inv_p, _dec.slogdet_p, _dec.tril_mask_p, _dec.diag_mask_p,
           _spec.eigh_p, _spec.svd_p, _spec.qr_p):
    _p.batch = batch_native(_p)


def _argsort(args, dims, *, axis, descending):
    """``argsort`` along a per-example axis: the same axis, shifted past the batch axis."""
    x = to_front(args[0], dims[0])
    return _sort.argsort_p.bind(x, axis=normalize_axes(axis, rank(x) - 1)[0] + 1, descending=descending), 0


_sort.argsort_p.batch = _argsort


def _along(axis):
    return axis if axis < 0 else axis + 1          # per-example axis -> batched axis (rank-free)


def _take_along_axis(args, dims, *, axis):
    """Both operands get the batch axis in front (size 1 where unbatched: it broadcasts)."""
    (x, i), (dx, di) = args, dims
    x = to_front(x, dx) if dx is not None else _sh.expand_dims(x, 0)
    i = to_front(i, di) if di is not None else _sh.expand_dims(i, 0)
    return _sort.take_along_axis_p.bind(x, i, axis=_along(axis)), 0


def _add_along_axis(args, dims, *, axis):
    (like, i, g), (dl, di, dg) = args, dims
    i = to_front(i, di) if di is not None else _sh.expand_dims(i, 0)
    return _sort.add_along_axis_p.bind(batched(like, dl), i, batched(g, dg), axis=_along(axis)), 0


_sort.take_along_axis_p.batch = _take_along_axis
_sort.add_along_axis_p.batch = _add_along_axis


def _solve_rule(prim):
    """``solve(a, b)`` / ``triangular_solve(a, b)``: a ``(..., n, n)``, b ``(..., n)`` or ``(..., n, k)``."""
    def rule(args, dims, **params):
        (a, b), (da, db) = args, dims
        ra, rb = example_rank(a, da), example_rank(b, db)
        n = axis_size()
        if da is None and ra == 2 and rb in (1, 2):
            # one matrix for every example: the examples are more right-hand sides
            b = to_front(b, db)
            if rb == 1:
                return _sh.transpose(prim.bind(a, _sh.transpose(b, (1, 0)), **params), (1, 0)), 0
            rows = shape(b)[1]
            cols = _sh.reshape(_sh.transpose(b, (1, 0, 2)), (rows, -1))                # (rows, B*k)
            x = _sh.reshape(prim.bind(a, cols, **params), (rows, n, -1))
            return _sh.transpose(x, (1, 0, 2)), 0
        a, b = batched(a, da), batched(b, db)
        if rb == 1:
            b = _sh.expand_dims(b, -1)                    # a stack of vectors is a stack of (n, 1)
        rb2 = max(rb, 2)
        a = expand_after_batch(a, rb2 - ra)
        b = expand_after_batch(b, ra - rb2)
        x = prim.bind(a, b, **params)
        return (_sh.squeeze(x, -1) if rb == 1 else x), 0
    return rule


_dec.solve_p.batch = _solve_rule(_dec.solve_p)
_dec.triangular_solve_p.batch = _solve_rule(_dec.triangular_solve_p)


# -- diagonal ----------------------------------------------------------------------------------------

def _diag_axes(r, axis1, axis2):
    return dict(axis1=normalize_axes(axis1, r)[0] + 1, axis2=normalize_axes(axis2, r)[0] + 1)


def _diagonal(args, dims, *, offset, axis1, axis2):
    a = to_front(args[0], dims[0])
    return _diagonal_p.bind(a, offset=offset, **_diag_axes(rank(a) - 1, axis1, axis2)), 0


def _diagonal_scatter(args, dims, *, offset, axis1, axis2):
    (g, like), (dg, dl) = args, dims
    if dg is None:
        return _diagonal_scatter_p.bind(g, example_of(like, dl), offset=offset, axis1=axis1, axis2=axis2), None
    g, like = to_front(g, dg), batched(like, dl)
    return _diagonal_scatter_p.bind(g, like, offset=offset, **_diag_axes(rank(like) - 1, axis1, axis2)), 0


_diagonal_p.batch = _diagonal
_diagonal_scatter_p.batch = _diagonal_scatter
