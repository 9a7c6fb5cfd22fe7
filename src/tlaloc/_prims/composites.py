"""The bodies of the shape-only helpers of derivative code (``Primitive.expansion``).

Each helper is declared with its impl, shape, dtype and derivative rules next to
the primitive whose derivative needs it; here is what it means in terms of
other primitives once its operands' shapes (and dtypes) are known. ``Builder.add``
then builds this body in its place, so the helper appears only in graphs built
before shapes are known, and transforms of such graphs use one generic rule
(``tlaloc._core.builder.expansion_graph``) instead of one entry per helper.

=====================  ======================================================
``sum_to(x, like)``    ``reduce_sum`` over the broadcast axes, ``reshape``, then
                       ``convert`` to like's dtype where both are real floats
``broadcast_like``     ``convert`` as ``sum_to``, ``broadcast_to`` like's shape
``reshape_like``       ``reshape`` to like's shape
``expand_reduced``     ``reshape`` that re-inserts the reduced axes as 1s
``cast_like``          ``convert`` to like's floating dtype
``dim_size``           the size (a constant)
``reduced_count``      how many elements a reduction combines (a constant)
``grad_seed``          ones of the output's shape, after checking it holds one
                       floating element
``matmul_t_lhs/rhs``   ``matmul`` with a transposed operand, then ``sum_to``
``dynamic_slice_like`` ``dynamic_slice`` of like's sizes
``split_like``         one ``slice`` per piece
``prod_others_grad``   a division-free O(n²) product of all others
=====================  ======================================================
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..errors import GradientError
from ._expand import composite, dtype, node, norm_axes, reshape, shape
from .broadcasting import (broadcast_like_p, cast_like_p, expand_reduced_p, float_cast, reshape_like_p,
                           sum_to_p)
from .indexing import dynamic_slice_like_p
from .linalg import matmul_t_lhs_p, matmul_t_rhs_p
from .misc import dim_size_p, grad_seed_p, reduced_count_p
from .reductions import prod_others_grad_p
from .shape_ops import split_like_p


# -- broadcasting -------------------------------------------------------------------------------

def _float_like(x, like):
    """``x`` converted to ``like``'s real floating dtype where both are real floats of
    different widths (``broadcasting.float_cast``); a Python number on either side casts nothing.

    Where a dtype is not known yet (a graph built before dtypes are known whose shapes are
    known, e.g. the sum of a scalar reduction) nothing is cast: the body replaces the node for
    every dtype, so it keeps what ``sum_to`` did before it cast (a cotangent that stays wider
    here is cast where an input's ``sum_to``/``broadcast_like`` runs at run time)."""
    if _weak(x) or _weak(like):
        return x
    dt = float_cast(_known_dtype(x), _known_dtype(like))
    return x if dt is None else node("convert", x, dtype=dt)


def _weak(x):
    """A Python number, or a value that stands for one (a weak aval): it keeps its kind."""
    return type(x) in (bool, int, float, complex) or bool(getattr(getattr(x, "aval", None), "weak", False))


def _known_dtype(x):
    dt = x.aval.dtype if hasattr(x, "aval") else np.asarray(x).dtype
    return None if dt is None else np.dtype(dt)


@composite(sum_to_p)
def sum_to(x, like):
    xs, ls = shape(x), shape(like)
    if xs == ls:
        return _float_like(x, like)
    lead = len(xs) - len(ls)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(ls) if d == 1 and xs[i + lead] != 1)
    out = node("reduce_sum", x, axes=axes, keepdims=False) if axes else x
    return _float_like(reshape(out, ls), like)


@composite(broadcast_like_p)
def broadcast_like(x, like):
    xs, ls = shape(x), shape(like)
    x = _float_like(x, like)
    return x if xs == ls else node("broadcast_to", x, shape=ls)


@composite(reshape_like_p)
def reshape_like(x, like):
    shape(x)
    return reshape(x, shape(like))


@composite(expand_reduced_p)
def expand_reduced(g, like, *, axes, keepdims):
    if keepdims:
        return g
    ls = shape(like)
    ax = norm_axes(axes, len(ls))
    return reshape(g, tuple(1 if i in ax else d for i, d in enumerate(ls)))


@composite(cast_like_p)
def cast_like(x, like, arrays_only=False):
    if arrays_only and shape(like) == ():
        return x
    dt, xt = dtype(like), dtype(x)
    if not _dt.is_float(dt) or xt == dt:
        return x
    return node("convert", x, dtype=dt)


# -- shape queries ------------------------------------------------------------------------------

def _dims(x):
    s = x.aval.shape if hasattr(x, "aval") else np.shape(x)
    if s is None:
        shape(x)                    # gives up
    return tuple(s)


@composite(dim_size_p)
def dim_size(x, *, axis):
    d = _dims(x)[axis]
    if type(d) is not int:
        shape(x)
    return np.int64(d)


@composite(reduced_count_p)
def reduced_count(x, *, axes):
    s = _dims(x)
    sizes = [s[a] for a in norm_axes(axes, len(s))]
    if any(type(d) is not int for d in sizes):
        shape(x)
    dt = dtype(x)
    return np.asarray(math.prod(sizes), dtype=dt if _dt.is_float(dt) else np.float64)


@composite(grad_seed_p)
def grad_seed(out):
    """Ones of the output's shape: what ``grad`` starts from. The output must hold one
    floating element (a scalar, or as autograd allows an array of size 1 such as (1,))."""
    dt = out.aval.dtype if hasattr(out, "aval") else np.asarray(out).dtype
    if dt is not None and not _dt.is_float(dt):
        raise GradientError(f"grad requires a floating-point output, got {dt}; differentiate a float computation")
    s = shape(out)
    if math.prod(s) != 1:
        raise GradientError(f"grad requires a scalar output, but the function returns an array of shape {s}; "
                            f"reduce it (e.g. .sum()) or use tl.vjp / tl.jacrev")
    return np.ones(s, dtype(out))


# -- contractions and slices ---------------------------------------------------------------------

def _transpose(x, perm):
    perm = tuple(int(p) for p in perm)
    return x if perm == tuple(range(len(perm))) else node("transpose", x, axes=perm)


def _swap_last(x):
    r = len(shape(x))
    return _transpose(x, tuple(range(r - 2)) + (r - 1, r - 2))


def _matmul_adjoint(g, other, target, lhs: bool):
    """The cotangent of ``target`` in ``target @ other`` (``lhs``) or ``other @ target``,
    given ``g`` (shape of ``target``): a ``matmul`` with ``other`` transposed, or an outer
    product where the target is a vector against a matrix, then ``sum_to``."""
    tn, on, gs = len(shape(target)), len(shape(other)), shape(g)
    g, other = _promoted(g, other)
    x_vec, y_vec = (tn == 1, on == 1) if lhs else (on == 1, tn == 1)
    if x_vec and y_vec:
        res = node("multiply", g, other)
    elif (x_vec if lhs else y_vec):             # the target is the vector: a matrix-vector product
        column = reshape(g, gs + (1,))
        r = node("matmul", other, column) if lhs else node("matmul", _swap_last(other), column)
        res = reshape(r, shape(r)[:-1])
    elif lhs and y_vec:                         # y is a vector: the outer product g y^T
        res = node("multiply", reshape(g, gs + (1,)), other)
    elif not lhs and x_vec:                     # x is a vector: the outer product x g
        res = node("multiply", reshape(other, shape(other) + (1,)), reshape(g, gs[:-1] + (1,) + gs[-1:]))
    else:
        res = node("matmul", g, _swap_last(other)) if lhs else node("matmul", _swap_last(other), g)
    return node("sum_to", res, target)


def _promoted(g, other):
    """``g`` and ``other`` in one float dtype, as NumPy promotes: ``x32 @ n`` (int ``n``) is
    float64, so the cotangent of ``n`` multiplies a float64 ``g`` by the float32 ``x``."""
    dg, do = _known_dtype(g), _known_dtype(other)
    if dg is None or do is None or dg == do or not (_dt.is_float(dg) and _dt.is_float(do)):
        return g, other
    wide = _dt.result_dtype(dg, do)
    return (g if dg == wide else node("convert", g, dtype=wide)), (other if do == wide else node("convert", other, dtype=wide))


@composite(matmul_t_lhs_p)
def matmul_t_lhs(g, y, x):
    """The cotangent of ``x`` in ``x @ y`` (shape of ``x``)."""
    return _matmul_adjoint(g, y, x, lhs=True)


@composite(matmul_t_rhs_p)
def matmul_t_rhs(g, x, y):
    """The cotangent of ``y`` in ``x @ y`` (shape of ``y``)."""
    return _matmul_adjoint(g, x, y, lhs=False)


@composite(dynamic_slice_like_p)
def dynamic_slice_like(x, like, *starts):
    shape(x)
    return node("dynamic_slice", x, *starts, sizes=shape(like))


@composite(split_like_p)
def split_like(g, *likes, axis):
    gs = shape(g)
    a = axis % len(gs)
    pieces, start = [], 0
    for like in likes:
        size = shape(like)[a]
        lo = tuple(start if i == a else 0 for i in range(len(gs)))
        hi = tuple(start + size if i == a else d for i, d in enumerate(gs))
        pieces.append(g if (lo, hi) == ((0,) * len(gs), gs) else
                      node("slice", g, start_indices=lo, limit_indices=hi, strides=(1,) * len(gs)))
        start += size
    return tuple(pieces)


# -- the second derivative of prod ---------------------------------------------------------------

@composite(prod_others_grad_p)
def prod_others_grad(g, x, *, axes):
    """``out_j = Σ_{i≠j} g_i Π_{k∉{i,j}} x_k`` over the reduced axes, without division (zeros
    are exact): row ``i`` of an n×n matrix is ``x`` with ``x_i`` set to 1, whose products of
    all others (``prod_others``, O(n) each) are ``Π_{k∉{i,j}} x_k`` off the diagonal."""
    xs = shape(x)
    shape(g)
    r = len(xs)
    ax = norm_axes(axes, r)
    keep = [i for i in range(r) if i not in ax]
    perm = tuple(keep) + ax
    lead = tuple(xs[i] for i in keep)
    n = math.prod(xs[a] for a in ax)
    nl = len(lead)
    flat_x = reshape(_transpose(x, perm), lead + (n,))
    flat_g = reshape(_transpose(g, perm), lead + (n,))
    square = lead + (n, n)
    rows = node("broadcast_to", reshape(flat_x, lead + (1, n)), shape=square)
    eye = np.eye(n, dtype=bool)
    ones = node("broadcast_to", np.ones((), dtype(x)), shape=square)
    others = node("prod_others", node("select", eye, ones, rows), axes=(nl + 1,))
    weighted = node("multiply", reshape(flat_g, lead + (n, 1)), others)
    zeros = node("broadcast_to", np.zeros((), dtype(weighted)), shape=square)
    out = node("reduce_sum", node("select", eye, zeros, weighted), axes=(nl,), keepdims=False)
    out = reshape(out, tuple(xs[p] for p in perm))
    return _transpose(out, np.argsort(perm))
