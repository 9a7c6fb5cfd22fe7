"""``tnp.pad``: NumPy's ``pad_width`` forms, normalised to one ``(before, after)`` pair per axis."""
from __future__ import annotations

import numbers

import numpy as np

from .._prims import shape_ops as _sh
from ..errors import ArgumentError


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


def pad(array, pad_width, mode="constant", constant_values=0):
    """NumPy's ``np.pad`` for ``mode='constant'``.

    Args:
      array: any shape ``(d0, ..., dn)``.
      pad_width: an int, ``(before, after)``, ``((before, after),)`` or one pair per axis (non-negative ints).
      constant_values: one static number (cast to the array's dtype, as NumPy does).
    Returns:
      ``(d0 + b0 + a0, ...)``, the array's dtype. Differentiable: the cotangent is the interior slice.
    Raises:
      ArgumentError: another ``mode`` (``'edge'``, ``'reflect'``, ... are not supported: build them with
        ``tnp.concatenate`` of slices), a malformed ``pad_width`` or a non-scalar ``constant_values``.
    """
    if mode != "constant":
        raise ArgumentError(f"pad: only mode='constant' is supported, got mode={mode!r}; build other borders "
                            f"with tnp.concatenate of slices (e.g. edge: x[:1] repeated)")
    from .._core.builder import Value
    rank = array.aval.rank if type(array) is Value else np.ndim(array)
    return _sh.pad(array, normalize_pad_width(pad_width, rank), _constant(constant_values))
