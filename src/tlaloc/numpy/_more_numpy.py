"""NumPy names composed from other ``tlaloc.numpy`` functions (no primitives of their own):
cbrt, nan_to_num, ptp, fmax, fmin, heaviside, isclose, allclose, append, select, block,
array_split, diagflat, ediff1d and conjugate.

Each follows NumPy 2.x's values (at 0, ±inf and NaN too); gradients come from the parts,
and a ``where`` sends exactly zero to the branch it did not take. Functions whose result
depends on sizes (``array_split``, ``block``) need them known: inside a transform they raise
``ShapeError`` while they are not, and the function is then built again for the arguments'
shapes at the first call (as ``split``).
"""
from __future__ import annotations

import builtins

import numpy as _np

from ..errors import ShapeError


def _tnp():
    from .. import numpy as tnp
    return tnp


def _dtype(x, op):
    """``x``'s dtype (a weak Python scalar gives None); ShapeError while a symbolic dtype is unknown."""
    tnp = _tnp()
    if tnp._is_symbolic(x):
        if x.aval.dtype is None:
            raise ShapeError(f"{op}: the dtype of an operand is not known yet")
        return _np.dtype(x.aval.dtype)
    if isinstance(x, (builtins.bool, int, float, complex)):
        return None
    return _np.asarray(x).dtype


def cbrt(x):
    """Cube root, real for negative ``x`` (``cbrt(-8) = -2``), as ``numpy.cbrt``.

    ``|x|**(1/3)`` with one Newton step ``y - (y³ - |x|) / (3y²)`` (gradient-stopped), then
    the sign of ``x``: exact at perfect cubes and within 1 ulp of NumPy elsewhere; ±0, ±inf
    and NaN as NumPy. Shape: that of x; integer input gives float64. Derivative
    ``1 / (3 cbrt(x)²)``, +inf at ±0 (as JAX)."""
    tnp = _tnp()
    if not tnp._is_symbolic(x) and _np.iscomplexobj(x):
        raise TypeError("cbrt: complex input is not supported (numpy.cbrt refuses it too)")
    neg = tnp.signbit(x)                              # -0.0 too, so that cbrt(-0.0) = -0.0
    a = tnp.where(neg, tnp.negative(x), x)            # |x| with derivative ±1 at 0 (abs'(0) is 0)
    y = tnp.power(a, 1.0 / 3.0)
    ok = tnp.logical_and(tnp.isfinite(y), tnp.greater(y, 0))
    ys = tnp.where(ok, y, 1.0)                        # the branch not taken stays finite
    step = tnp.divide(tnp.subtract(tnp.multiply(tnp.multiply(ys, ys), ys), a), tnp.multiply(3.0, tnp.multiply(ys, ys)))
    y = tnp.where(ok, tnp.subtract(y, tnp.stop_gradient(step)), y)
    return tnp.where(neg, tnp.negative(y), y)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """``x`` with NaN replaced by ``nan``, +inf by ``posinf`` and -inf by ``neginf`` (defaults:
    the largest and the most negative finite value of ``x``'s dtype), as ``numpy.nan_to_num``.

    Shape and dtype: those of ``x``; integer and bool ``x`` come back unchanged. Complex ``x``
    only eagerly (NumPy's own). Derivative: 1 at finite entries, 0 at the replaced ones.
    ``copy`` is accepted (the result is always a new value)."""
    tnp = _tnp()
    if not tnp._is_symbolic(x):
        x = tnp.asarray(x)
        if _np.iscomplexobj(x):
            return _np.nan_to_num(x, copy=True, nan=nan, posinf=posinf, neginf=neginf)
    dt = _dtype(x, "nan_to_num")
    if dt.kind not in "fc":
        return x
    info = _np.finfo(dt)
    big = info.max if posinf is None else posinf
    small = info.min if neginf is None else neginf
    out = tnp.where(tnp.isnan(x), nan, x)
    out = tnp.where(tnp.equal(x, _np.inf), big, out)
    out = tnp.where(tnp.equal(x, -_np.inf), small, out)
    return tnp.astype(out, dt)


def ptp(a, axis=None, out=None, keepdims=False):
    """Peak to peak, ``max(a, axis) - min(a, axis)`` (``numpy.ptp``); NaN propagates.
    Shape: the reduced shape. Derivative: that of ``max`` minus that of ``min``."""
    if out is not None:
        raise ValueError("ptp: out= is not supported (tlaloc values are immutable); use the result")
    tnp = _tnp()
    return tnp.subtract(tnp.max(a, axis=axis, keepdims=keepdims), tnp.min(a, axis=axis, keepdims=keepdims))


def fmax(x1, x2):
    """Elementwise maximum ignoring NaN: the other operand where one is NaN, NaN where both
    are (``numpy.fmax``); broadcast. Derivative: ``maximum``'s (its rule at ties), all of it
    to the non-NaN operand where one is NaN."""
    tnp = _tnp()
    return tnp.where(tnp.isnan(x2), x1, tnp.where(tnp.isnan(x1), x2, tnp.maximum(x1, x2)))


def fmin(x1, x2):
    """Elementwise minimum ignoring NaN (``numpy.fmin``), as ``fmax``."""
    tnp = _tnp()
    return tnp.where(tnp.isnan(x2), x1, tnp.where(tnp.isnan(x1), x2, tnp.minimum(x1, x2)))


def heaviside(x1, x2):
    """The Heaviside step: 0 where ``x1 < 0``, ``x2`` where ``x1 == 0``, 1 where ``x1 > 0``, NaN
    where ``x1`` is NaN (``numpy.heaviside``); broadcast, in the dtype of both. Derivative: 0 in
    ``x1``; 1 in ``x2`` where ``x1 == 0``."""
    tnp = _tnp()
    h = tnp.add(x2, tnp.zeros_like(x1))              # the shape and dtype of both
    h = tnp.where(tnp.less(x1, 0), tnp.zeros_like(h), tnp.where(tnp.greater(x1, 0), tnp.ones_like(h), h))
    return tnp.where(tnp.isnan(x1), _np.nan, h)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``|a - b| <= atol + rtol |b|`` with ``b`` finite, or ``a == b`` (so equal infinities are
    close); ``equal_nan`` makes NaN close to NaN. NumPy 2.x's formula (not symmetric in a and b);
    an integer ``b`` is compared as float64. Bool, broadcast shape; no derivative."""
    tnp = _tnp()
    if not tnp._is_symbolic(b) and not isinstance(b, (int, float, complex)):
        b = tnp.asarray(b)
    if isinstance(b, int) and not isinstance(b, builtins.bool):
        b = float(b)
    elif not isinstance(b, (float, complex)) and _dtype(b, "isclose").kind in "biu":
        b = tnp.astype(b, _np.float64)
    with _np.errstate(invalid="ignore"):          # inf - inf, eagerly (as NumPy)
        close = tnp.less_equal(tnp.abs(tnp.subtract(a, b)), tnp.add(atol, tnp.multiply(rtol, tnp.abs(b))))
    result = tnp.logical_or(tnp.logical_and(close, tnp.isfinite(b)), tnp.equal(a, b))
    if equal_nan:
        result = tnp.logical_or(result, tnp.logical_and(tnp.isnan(a), tnp.isnan(b)))
    return result


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether ``isclose(a, b, ...)`` holds everywhere: a Python bool eagerly (as NumPy), a
    0-d bool value inside transforms."""
    tnp = _tnp()
    res = tnp.all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))
    return res if tnp._is_symbolic(res) else builtins.bool(res)


def append(arr, values, axis=None):
    """``arr`` followed by ``values`` (``numpy.append``): both flattened and joined when ``axis``
    is None, else joined along ``axis`` (same rank, matching other sizes). Derivative: to both."""
    tnp = _tnp()
    arr, values = tnp.asarray(arr), tnp.asarray(values)
    if axis is None:
        return tnp.concatenate([tnp.ravel(arr), tnp.ravel(values)], axis=0)
    return tnp.concatenate([arr, values], axis=int(axis))


def select(condlist, choicelist, default=0):
    """The first ``choicelist[i]`` whose ``condlist[i]`` holds, else ``default``, elementwise
    (``numpy.select``); everything broadcast. Conditions must be bool. The dtype is that of the
    choices and ``default`` (Python scalars weak, as NumPy 2). Derivative: to the chosen entries."""
    tnp = _tnp()
    if len(condlist) != len(choicelist):
        raise ValueError("select: list of cases must be same length as list of conditions")
    if len(condlist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    conds = [c if tnp._is_symbolic(c) else tnp.asarray(c) for c in condlist]
    for i, c in enumerate(conds):
        dt = c.aval.dtype if tnp._is_symbolic(c) else c.dtype
        if dt is not None and _np.dtype(dt) != _np.bool_:
            raise TypeError(f"select: invalid entry {i} in condlist: should be boolean ndarray")
    choices = [c if tnp._is_symbolic(c) or type(c) in (int, float, complex) else tnp.asarray(c)
               for c in choicelist]
    result = default if type(default) in (int, float, complex) or tnp._is_symbolic(default) else tnp.asarray(default)
    for cond, choice in zip(conds[::-1], choices[::-1]):        # the first condition is applied last
        result = tnp.where(cond, choice, result)
    return result


def _block_depth(arrays, index=()):
    """(depth of list nesting, largest rank of the leaves), with NumPy's refusals."""
    tnp = _tnp()
    if type(arrays) is tuple:
        raise TypeError(f"block: arrays{''.join(f'[{i}]' for i in index)} is a tuple. Only lists can be used "
                        f"to arrange blocks, and np.block does not allow implicit conversion from tuple to ndarray.")
    if type(arrays) is list:
        if not arrays:
            raise ValueError(f"block: list at arrays{''.join(f'[{i}]' for i in index)} cannot be empty")
        found = [_block_depth(a, index + (i,)) for i, a in enumerate(arrays)]
        if builtins.any(d != found[0][0] for d, _ in found):
            raise ValueError("block: list depths are mismatched; every array must sit at the same depth")
        return found[0][0] + 1, builtins.max(r for _, r in found)
    return 0, tnp.ndim(arrays)


def _block(arrays, depth, max_depth, ndim):
    tnp = _tnp()
    if depth < max_depth:
        parts = [_block(a, depth + 1, max_depth, ndim) for a in arrays]
        return tnp.concatenate(parts, axis=-(max_depth - depth))
    a = arrays if tnp._is_symbolic(arrays) else tnp.asarray(arrays)
    for _ in range(ndim - tnp.ndim(a)):
        a = tnp.expand_dims(a, 0)
    return a


def block(arrays):
    """An array assembled from nested lists of blocks (``numpy.block``): the innermost lists are
    joined along the last axis, the next along the second last, and so on; every block first gets
    leading axes of size 1 up to ``max(depth, largest rank)``. Needs the blocks' ranks (not sizes).

    Raises:
      TypeError: a tuple where a list is expected. ValueError: an empty list or blocks at
      different depths."""
    tnp = _tnp()
    depth, rank = _block_depth(arrays)
    out = _block(arrays, 0, depth, builtins.max(depth, rank))
    return tnp.copy(out) if depth == 0 else out


def array_split(ary, indices_or_sections, axis=0):
    """``ary`` split along ``axis`` into a list (``numpy.array_split``): an int ``n`` gives ``n``
    parts, the first ``len % n`` of them one longer (needs the axis length known); a list gives
    the parts between those split points, as ``split``.

    Raises:
      ValueError: ``n <= 0``. ShapeError: the axis length is not known yet (inside a transform
        before the first call; the function is then built for the arguments' shapes)."""
    tnp = _tnp()
    if isinstance(indices_or_sections, (int, _np.integer)):
        n = int(indices_or_sections)
        if n <= 0:
            raise ValueError("array_split: number sections must be larger than 0.")
        total = tnp.shape(ary)[int(axis)]
        if type(total) is not int:
            raise ShapeError("array_split: the length of the split axis is not known yet; pass split points "
                             "(a list) or annotate the argument's shape")
        each, extras = divmod(total, n)
        sizes = [each + 1] * extras + [each] * (n - extras)
        points = [builtins.sum(sizes[:i]) for i in range(1, n)]
    else:
        points = [int(p) for p in indices_or_sections]
    return tnp.split(ary, points, axis=axis)


def diagflat(v, k=0):
    """A 2-d array with the flattened ``v`` on diagonal ``k`` and zeros elsewhere, shape
    ``(v.size + |k|,) * 2`` (``numpy.diagflat``)."""
    tnp = _tnp()
    return tnp.diag(tnp.ravel(tnp.asarray(v)), int(k))


def _edge(x, dt, op, name):
    tnp = _tnp()
    if not tnp._is_symbolic(x):
        x = tnp.asarray(x)
    xdt = _dtype(x, op)
    if not _np.can_cast(xdt, dt, casting="same_kind"):
        raise TypeError(f"ediff1d: dtype of `{name}` must be compatible with input `ary` under the "
                        f"`same_kind` rule.")
    x = tnp.ravel(x)
    return x if xdt == dt else tnp.astype(x, dt)


def ediff1d(ary, to_end=None, to_begin=None):
    """Differences between consecutive elements of the flattened ``ary``, ``ary[1:] - ary[:-1]``,
    with ``to_begin`` before and ``to_end`` after (flattened, converted to ``ary``'s dtype under
    NumPy's ``same_kind`` rule), as ``numpy.ediff1d``. 1-d, ``ary``'s dtype."""
    tnp = _tnp()
    flat = tnp.ravel(tnp.asarray(ary))
    d = tnp.subtract(flat[1:], flat[:-1])
    if to_begin is None and to_end is None:
        return d
    dt = _dtype(flat, "ediff1d")
    parts = [] if to_begin is None else [_edge(to_begin, dt, "ediff1d", "to_begin")]
    parts.append(d)
    if to_end is not None:
        parts.append(_edge(to_end, dt, "ediff1d", "to_end"))
    return tnp.concatenate(parts, axis=0)


def conjugate(x, /):
    """The complex conjugate, ``conj`` (``x`` itself for real dtypes)."""
    return _tnp().conj(x)
