"""``tnp.pad``: NumPy's ``pad_width`` forms, normalised to one ``(before, after)`` pair per axis."""
from __future__ import annotations

import numbers

import numpy as np

from .._prims import shape_ops as _sh
from ..errors import ArgumentError, ShapeError


def _is_int(v) -> bool:
    return isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, (bool, np.bool_))


def normalize_pad_width(pad_width, rank) -> tuple:
    """One ``(before, after)`` pair per axis, or a single pair for every axis, from NumPy's forms:
    ``n``, ``(n,)``, ``(before, after)``, ``((before, after),)`` or one pair per axis. ``rank`` may
    be None (unknown). Raises ArgumentError for anything else."""
    try:
        arr = np.asarray(pad_width, dtype=object)
    except Exception:                       # ragged nesting
        arr = None
    ok = arr is not None and arr.ndim <= 2 and all(_is_int(v) for v in arr.ravel())
    if ok and arr.ndim == 0:
        arr = np.array([[arr.item(), arr.item()]], dtype=object)
    elif ok and arr.ndim == 1 and arr.shape[0] in (1, 2):
        arr = np.array([[arr[0], arr[-1]]], dtype=object)
    elif ok and arr.ndim == 2:
        ok = arr.shape[1] == 2 and (arr.shape[0] == 1 or rank is None or arr.shape[0] == rank)
    else:
        ok = False
    if not ok:
        raise ArgumentError(f"pad: pad_width must be an int, (before, after), ((before, after),) or one "
                            f"(before, after) pair of ints per axis ({rank} here), got {pad_width!r}")
    pairs = tuple((int(lo), int(hi)) for lo, hi in arr)
    if any(lo < 0 or hi < 0 for lo, hi in pairs):
        raise ArgumentError(f"pad: pad_width must be non-negative, got {pad_width!r}")
    return pairs


def _constant(constant_values):
    """One static scalar fill value (NumPy also takes per-axis pairs; tlaloc only where they agree)."""
    if isinstance(constant_values, (bool, int, float, np.generic)):
        return constant_values
    try:
        arr = np.asarray(constant_values)
    except Exception:
        arr = None
    if arr is not None and arr.dtype.kind in "biuf" and arr.size >= 1 and np.all(arr == arr.ravel()[0]):
        return arr.ravel()[0]
    raise ArgumentError(f"pad: constant_values must be one static number (or per-axis pairs that all agree), "
                        f"got {constant_values!r}; pad with 0 and add the differing borders with tnp.where")


_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")


def _source_index(n, before, after, mode):
    """For each position of a padded axis (length ``before + n + after``), the index of the
    element of the original axis it copies (``n`` an int or a symbolic size): NumPy's
    ``edge`` (clamped), ``wrap`` (periodic, period n), ``reflect`` (period 2n - 2, the edge not
    repeated) and ``symmetric`` (period 2n, the edge repeated), repeated as far as needed."""
    from .. import numpy as tnp
    total = before + after + n if type(n) is int else tnp.add(n, before + after)
    i = tnp.subtract(tnp.arange(total, dtype=np.int64), before)          # position - before
    last = n - 1 if type(n) is int else tnp.subtract(n, 1)
    if mode == "edge":
        return tnp.clip(i, 0, last)
    if mode == "wrap":
        return tnp.remainder(i, n)
    if mode == "symmetric":
        m = tnp.remainder(i, tnp.multiply(n, 2))
        return tnp.where(tnp.less(m, n), m, tnp.subtract(tnp.subtract(tnp.multiply(n, 2), 1), m))
    period = tnp.maximum(tnp.multiply(last, 2), 1)                          # reflect; n == 1: all 0
    m = tnp.remainder(i, period)
    return tnp.where(tnp.less(m, n), m, tnp.subtract(period, m))


def pad(array, pad_width, mode="constant", constant_values=0, **kwargs):
    """NumPy's ``np.pad`` for the modes ``'constant'``, ``'edge'``, ``'reflect'``,
    ``'symmetric'`` and ``'wrap'`` (``reflect_type='even'``, NumPy's default).

    Args:
      array: any shape ``(d0, ..., dn)``.
      pad_width: an int, ``(before, after)``, ``((before, after),)`` or one pair per axis (non-negative ints).
      mode: one of the five above; the copying modes may pad past the axis length (NumPy's
        repeated reflection/wrapping).
      constant_values: one static number (cast to the array's dtype, as NumPy does).
    Returns:
      ``(d0 + b0 + a0, ...)``, the array's dtype. Differentiable: a gather of the array, so the
      cotangent of every copy is added to its source element.
    Raises:
      ArgumentError: another ``mode`` (``'linear_ramp'``, ``'maximum'``, ``'mean'``, ...),
        ``reflect_type='odd'``, a malformed ``pad_width`` or a non-scalar ``constant_values``.
      ShapeError: a copying mode pads an empty axis.
    """
    if mode not in _MODES:
        raise ArgumentError(f"pad: mode must be one of {_MODES}, got mode={mode!r}; build other borders "
                            f"with tnp.concatenate of slices and reductions")
    extra = dict(kwargs)
    if extra.pop("reflect_type", "even") != "even" or extra:
        raise ArgumentError(f"pad: only reflect_type='even' is supported (no other keywords), got {kwargs!r}")
    from .._core.builder import Value
    rank = array.aval.rank if type(array) is Value else np.ndim(array)
    pairs = normalize_pad_width(pad_width, rank)
    if mode == "constant":
        return _sh.pad(array, pairs, _constant(constant_values))
    from .. import numpy as tnp
    if rank is None:
        raise ShapeError(f"pad: mode={mode!r} needs the array's rank at definition time; annotate the argument")
    if len(pairs) == 1:
        pairs = pairs * rank
    out = array if type(array) is Value else np.asarray(array)
    for axis, (lo, hi) in enumerate(pairs):
        if lo == 0 and hi == 0:
            continue
        n = tnp.shape(out)[axis]
        if type(n) is int and n == 0:
            raise ShapeError(f"pad: mode={mode!r} cannot pad axis {axis} of length 0 (nothing to copy); "
                             f"use mode='constant'")
        out = tnp.take(out, _source_index(n, lo, hi, mode), axis=axis)
    return out
