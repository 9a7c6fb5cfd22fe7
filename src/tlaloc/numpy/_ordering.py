"""Sorting and ordered lookups, composed over the ``argsort`` primitive and
indexing: sort, argsort, take_along_axis, searchsorted.

Derivatives: ``sort`` is a gather of ``x`` at the stable sorting permutation, so
its gradient scatters the cotangent back through that permutation; at a tie the
sorted position's cotangent goes to the element the stable order puts there (as
JAX). ``argsort`` and ``searchsorted`` give integers (no derivative; they pass
through ``grad``/``jvp`` as constants).
"""
from __future__ import annotations

import numpy as _np

from .._prims import misc as _misc
from .._prims.sorting import argsort as _argsort, take_along_axis as _take
from ..errors import ArgumentError, ShapeError


def _tnp():
    from .. import numpy as tnp
    return tnp


def axis_range(x, axis):
    """``arange(x.shape[axis])`` (int64): a constant when the size is known."""
    n = _tnp().shape(x)[axis]
    if type(n) is int:
        return _np.arange(n, dtype=_np.int64)
    return _tnp().arange(_misc.dim_size(x, axis), dtype=_np.int64)


def _check_sort_kw(op, kind, order, stable):
    if order is not None:
        raise ArgumentError(f"{op}: order= (structured arrays) is not supported; pass a plain array")
    if kind not in (None, "stable", "mergesort", "quicksort", "heapsort") or stable not in (None, True, False):
        raise ArgumentError(f"{op}: kind must be None/'stable'/'quicksort'/'mergesort'/'heapsort', got {kind!r}")


def argsort(a, axis=-1, kind=None, order=None, *, descending=False, stable=True):
    """Indices (int64, shape of ``a``) that sort ``a`` along ``axis`` (None: the
    flattened array). Always stable (every ``kind`` gives the stable order);
    ``descending=True`` keeps ties in their original order (Array API)."""
    _check_sort_kw("argsort", kind, order, stable)
    tnp = _tnp()
    if axis is None:
        a, axis = tnp.ravel(a), 0
    return _argsort(a, axis, descending)


def sort(a, axis=-1, kind=None, order=None, *, descending=False, stable=True):
    """``a`` sorted along ``axis`` (None: flattened), NaN last (first when
    ``descending``). Shape and dtype of ``a``. Gradient: see the module docstring."""
    _check_sort_kw("sort", kind, order, stable)
    tnp = _tnp()
    if axis is None:
        a, axis = tnp.ravel(a), 0
    return _take(a, _argsort(a, axis, descending), int(axis))


def take_along_axis(arr, indices, axis=-1):
    """``arr`` read at ``indices`` along ``axis`` (NumPy semantics: the other axes
    broadcast between ``arr`` and ``indices``, which have the same rank).

    Args:
      arr: (..., n, ...) array; indices: integer array of the same rank.
      axis: static int, or None (``arr`` flattened, ``indices`` 1-d).
    Returns:
      array of the broadcast shape with ``indices``' length on ``axis``.
    Raises:
      ShapeError: the ranks differ.
    """
    if axis is None:
        arr, axis = _tnp().ravel(arr), 0
    return _take(arr, indices, int(axis))


def searchsorted(a, v, side="left", sorter=None):
    """Insertion points (int64, shape of ``v``) that keep the 1-d ``a`` sorted:
    ``side='left'`` counts the elements ordered before ``v``, ``'right'`` those
    before or equal (NaN last, as NumPy). O(len(a) · v.size) comparisons.

    Raises:
      ArgumentError: ``side`` is not 'left'/'right'; ShapeError: ``a`` is not 1-d.
    """
    tnp = _tnp()
    if side not in ("left", "right"):
        raise ArgumentError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    ra = a.aval.rank if tnp._is_symbolic(a) else _np.ndim(a)
    if ra is not None and ra != 1:
        raise ShapeError(f"searchsorted: a must be 1-d, got rank {ra}")
    if sorter is not None:
        a = tnp.take(a, sorter)
    ai = tnp.stop_gradient(tnp.ravel(a))                    # (n,)
    v = tnp.stop_gradient(tnp.expand_dims(v, -1))           # (..., 1)
    if side == "left":
        before = tnp.logical_or(tnp.less(ai, v), tnp.logical_and(tnp.logical_not(tnp.isnan(ai)), tnp.isnan(v)))
    else:
        before = tnp.logical_or(tnp.less_equal(ai, v), tnp.isnan(v))
    return tnp.sum(tnp.astype(before, _np.int64), axis=-1)
