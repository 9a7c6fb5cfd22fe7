"""Shape and order composites over reshape, concatenate, flip and indexing:
repeat, roll, tile, hstack, vstack, dstack, column_stack, meshgrid,
atleast_1d/2d/3d, diag, flipud, fliplr, rot90, diff.

Each is exact (a rearrangement, or a difference for ``diff``), so its
derivative is that of the indexing it is made of. Sizes that decide the
output shape (``repeat``'s counts, ``tile``'s reps, ``roll``'s shift) are
static Python ints or concrete arrays.
"""
from __future__ import annotations

import numpy as _np

from ..errors import ArgumentError, ShapeError
from ._ordering import axis_range


def _tnp():
    from .. import numpy as tnp
    return tnp


def _rank_or_none(a):
    tnp = _tnp()
    return a.aval.rank if tnp._is_symbolic(a) else _np.ndim(a)


def _norm_axis(axis, r, op):
    """``axis`` in [0, r); a negative axis stays negative when the rank ``r`` is unknown."""
    axis = int(axis)
    if r is None:
        return axis
    if not -r <= axis < r:
        raise ShapeError(f"{op}: axis {axis} is out of range for an array of rank {r}")
    return axis % r


def repeat(a, repeats, axis=None):
    """Each element of ``a`` repeated ``repeats`` times along ``axis`` (None: the
    flattened array). ``repeats``: an int or a concrete 1-d int array (one count
    per element); the axis length must be known.

    Raises:
      ShapeError: ``repeats`` is symbolic (the output length would be data-dependent),
        or the axis length is unknown.
    """
    tnp = _tnp()
    if tnp._is_symbolic(repeats):
        raise ShapeError("repeat: repeats must be a Python int or a concrete array (it decides the output "
                         "shape); compute it outside the transformed function")
    if axis is None:
        a, axis = tnp.ravel(a), 0
    axis = _norm_axis(axis, _rank_or_none(a), "repeat")
    n = tnp.shape(a)[axis]
    reps = _np.asarray(repeats, dtype=_np.int64)
    if type(n) is not int and not isinstance(n, _np.integer):
        if reps.ndim:
            raise ShapeError("repeat: per-element counts need the axis length at definition time; annotate it")
        k = int(reps)                                   # arange(n k) // k: each index k times
        return tnp.take(a, tnp.floor_divide(tnp.arange(tnp.multiply(n, k), dtype=_np.int64), k), axis=axis)
    idx = _np.repeat(_np.arange(int(n), dtype=_np.int64), reps)
    return tnp.take(a, idx, axis=axis)


def roll(a, shift, axis=None):
    """Elements of ``a`` shifted by ``shift`` along ``axis`` (None: flattened and
    restored), wrapping around. ``shift``/``axis``: ints or equal-length tuples."""
    tnp = _tnp()
    if axis is None:
        if isinstance(shift, (tuple, list)):
            shift = sum(int(s) for s in shift)
        return _roll_flat_like(a, shift)
    shifts = (shift,) if isinstance(shift, (int, _np.integer)) else tuple(shift)
    axes = (axis,) if isinstance(axis, (int, _np.integer)) else tuple(axis)
    if len(axes) == 1 and len(shifts) > 1:
        axes = axes * len(shifts)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise ShapeError(f"roll: shift and axis must have the same length, got {len(shifts)} and {len(axes)}")
    r = _rank_or_none(a)
    for s, ax in zip(shifts, axes):
        ax = _norm_axis(ax, r, "roll")
        n = tnp.shape(a)[ax]
        idx = tnp.remainder(tnp.subtract(axis_range(a, ax), int(s)), n)
        a = tnp.take(a, idx, axis=ax)
    return a


def _roll_flat_like(a, shift):
    from .._prims import broadcasting as _bc
    tnp = _tnp()
    return _bc.reshape_like(roll(tnp.ravel(a), shift, 0), a)


def tile(A, reps):
    """``A`` repeated ``reps`` times per axis (NumPy's rank promotion: the shorter
    of ``A.ndim`` and ``len(reps)`` gains leading 1s). ``reps``: static ints."""
    tnp = _tnp()
    reps = (int(reps),) if isinstance(reps, (int, _np.integer)) else tuple(int(r) for r in reps)
    r = tnp.ndim(A)
    if len(reps) > r:
        A = tnp.reshape(A, (1,) * (len(reps) - r) + tuple(tnp.shape(A))) if _known(A) else \
            _lead_ones(A, len(reps) - r)
    reps = (1,) * (tnp.ndim(A) - len(reps)) + reps
    for ax, k in enumerate(reps):
        if k == 1:
            continue
        n = tnp.shape(A)[ax]
        idx = tnp.remainder(tnp.arange(0, n * k if type(n) is int else tnp.multiply(n, k), dtype=_np.int64), n)
        A = tnp.take(A, idx, axis=ax)
    return A


def _known(a):
    return all(type(d) is int for d in _tnp().shape(a))


def _lead_ones(a, k):
    for _ in range(k):
        a = _tnp().expand_dims(a, 0)
    return a


def atleast_1d(*arys):
    """Each array with at least 1 axis (a 0-d array becomes shape (1,))."""
    out = [_lead_ones(a, 1) if _tnp().ndim(a) == 0 else a for a in map(_asarray, arys)]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    """Each array with at least 2 axes: () -> (1, 1), (n,) -> (1, n)."""
    out = [_lead_ones(a, 2 - _tnp().ndim(a)) if _tnp().ndim(a) < 2 else a for a in map(_asarray, arys)]
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    """Each array with at least 3 axes: () -> (1, 1, 1), (n,) -> (1, n, 1), (m, n) -> (m, n, 1)."""
    tnp = _tnp()
    out = []
    for a in map(_asarray, arys):
        r = tnp.ndim(a)
        if r == 0:
            a = _lead_ones(a, 3)
        elif r == 1:
            a = tnp.expand_dims(tnp.expand_dims(a, 0), -1)
        elif r == 2:
            a = tnp.expand_dims(a, -1)
        out.append(a)
    return out[0] if len(out) == 1 else out


def _asarray(a):
    return _tnp().asarray(a)


def _seq(op, tup):
    if not isinstance(tup, (list, tuple)):
        raise ArgumentError(f"{op}: pass a list or tuple of arrays, got {type(tup).__name__}")
    return list(tup)


def vstack(tup):
    """Arrays stacked along axis 0 after ``atleast_2d`` ((n,) -> (1, n))."""
    xs = [atleast_2d(a) for a in _seq("vstack", tup)]
    return _tnp().concatenate(xs, axis=0)


def hstack(tup):
    """Arrays joined along axis 1 (axis 0 for 1-d arrays) after ``atleast_1d``."""
    xs = [atleast_1d(a) for a in _seq("hstack", tup)]
    return _tnp().concatenate(xs, axis=0 if _tnp().ndim(xs[0]) == 1 else 1)


def dstack(tup):
    """Arrays stacked along axis 2 after ``atleast_3d``."""
    xs = [atleast_3d(a) for a in _seq("dstack", tup)]
    return _tnp().concatenate(xs, axis=2)


def column_stack(tup):
    """1-d arrays as columns (n,) -> (n, 1), 2-d arrays as they are, joined along axis 1."""
    tnp = _tnp()
    xs = [_asarray(a) for a in _seq("column_stack", tup)]
    xs = [tnp.expand_dims(a, 1) if tnp.ndim(a) < 2 else a for a in
          (atleast_1d(a) for a in xs)]
    return tnp.concatenate(xs, axis=1)


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate arrays from 1-d vectors (each raveled): with ``indexing='ij'``
    output ``i`` has shape ``(len(x0), len(x1), ...)`` and varies along axis ``i``;
    ``'xy'`` (the default) swaps the first two axes. ``sparse=True`` keeps the
    size-1 axes instead of broadcasting."""
    tnp = _tnp()
    if indexing not in ("xy", "ij"):
        raise ArgumentError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    xs = [tnp.ravel(_asarray(x)) for x in xi]
    k = len(xs)
    sizes = [tnp.shape(x)[0] for x in xs]
    if indexing == "xy" and k >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, x in enumerate(xs):
        pos = i if indexing == "ij" or k < 2 or i > 1 else 1 - i
        shape = [1] * k
        shape[pos] = -1
        out.append(tnp.reshape(x, tuple(shape)))
    if sparse:
        return out
    if all(type(n) is int for n in sizes):
        return [tnp.broadcast_to(g, tuple(sizes)) for g in out]
    from .._prims import broadcasting as _bc      # sizes known only at run time
    like = out[0]
    for g in out[1:]:
        like = tnp.add(tnp.zeros_like(like), tnp.zeros_like(g))
    return [_bc.broadcast_like(g, like) for g in out]


def diag(v, k=0):
    """A 1-d ``v`` placed on diagonal ``k`` of a square zero matrix (n + |k|, n + |k|),
    or the ``k``-th diagonal of a 2-d ``v`` (a copy). Raises ShapeError otherwise."""
    tnp = _tnp()
    from .._prims.diagonal import _diagonal_scatter_p
    r = tnp.ndim(v)
    if r == 2:
        return tnp.diagonal(v, k)
    if r != 1:
        raise ShapeError(f"diag: v must be 1-d or 2-d, got rank {r}")
    n = tnp.shape(v)[0]
    m = n + abs(int(k)) if type(n) is int else tnp.add(n, abs(int(k)))
    like = tnp.zeros((m, m), dtype=v.aval.dtype if tnp._is_symbolic(v) else _np.asarray(v).dtype)
    return _diagonal_scatter_p.bind(v, like, offset=int(k), axis1=0, axis2=1)


def flipud(m):
    """``m`` with axis 0 reversed (rank >= 1)."""
    return _tnp().flip(m, 0)


def fliplr(m):
    """``m`` with axis 1 reversed (rank >= 2)."""
    r = _rank_or_none(m)
    if r is not None and r < 2:
        raise ShapeError("fliplr: the array must have at least 2 axes")
    return _tnp().flip(m, 1)


def rot90(m, k=1, axes=(0, 1)):
    """``m`` rotated by 90° ``k`` times in the plane of ``axes`` (from the first
    axis towards the second), as ``numpy.rot90``."""
    tnp = _tnp()
    r = _rank_or_none(m)
    a0, a1 = (_norm_axis(a, r, "rot90") for a in axes)
    if a0 == a1 or (r is None and (a0 < 0) != (a1 < 0)):
        raise ShapeError("rot90: the two axes must differ (and, for an array of unknown rank, have one sign)")
    k = int(k) % 4
    if k == 0:
        return m
    if k == 2:
        return tnp.flip(tnp.flip(m, a0), a1)
    if k == 1:
        return tnp.swapaxes(tnp.flip(m, a1), a0, a1)
    return tnp.flip(tnp.swapaxes(m, a0, a1), a1)


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """The ``n``-th forward difference ``a[i+1] - a[i]`` along ``axis`` (booleans:
    ``!=``), after joining ``prepend``/``append`` (arrays, or scalars broadcast
    to one slice)."""
    tnp = _tnp()
    r = _rank_or_none(a)
    if r == 0:
        raise ShapeError("diff: the array must have at least 1 axis")
    axis = _norm_axis(axis, r, "diff")
    if int(n) < 0:
        raise ArgumentError(f"diff: n must be >= 0, got {n}")
    parts = []
    for extra in (prepend, append):
        if extra is None:
            parts.append(None)
            continue
        if tnp.ndim(extra) == 0:
            shape = list(tnp.shape(a))
            shape[axis] = 1
            extra = tnp.broadcast_to(extra, tuple(shape))
        parts.append(extra)
    if parts[0] is not None or parts[1] is not None:
        a = tnp.concatenate([p for p in (parts[0], a, parts[1]) if p is not None], axis=axis)
    lead = (slice(None),) * axis if axis >= 0 else (Ellipsis,)
    tail = () if axis >= 0 else (slice(None),) * (-axis - 1)
    for _ in range(int(n)):
        hi = tnp._getitem(a, lead + (slice(1, None),) + tail)
        lo = tnp._getitem(a, lead + (slice(None, -1),) + tail)
        dt = getattr(a, "dtype", None) if not tnp._is_symbolic(a) else a.aval.dtype
        a = tnp.not_equal(hi, lo) if dt == _np.bool_ else tnp.subtract(hi, lo)
    return a
