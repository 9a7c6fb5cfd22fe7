"""Running maxima and minima (``np.maximum.accumulate``, ``np.minimum.accumulate``) from
``maximum``/``minimum`` of shifted copies: Hillis-Steele's doubling scan (Hillis & Steele,
"Data parallel algorithms", CACM 29(12), 1986), ``ceil(log2(n))`` steps, so they differentiate
and compile without a primitive of their own. Values equal NumPy's exactly (max and min are
exact); at ties the cotangent is shared as ``maximum``'s rule shares it (JAX's cummax gives it
to one position).
"""
from __future__ import annotations

import numpy as _np


def _accumulate(x, axis, pick, fill):
    from . import concatenate, full_like, moveaxis, shape
    from ..errors import RankUnknownError
    x = moveaxis(x, axis, 0)
    n = shape(x)[0]
    if type(n) is not int:
        raise RankUnknownError("accumulate: the length of the axis is unknown at definition time")
    y, shift = x, 1
    while shift < n:
        pad = full_like(y[:shift], fill)
        y = pick(y, concatenate([pad, y[:n - shift]], axis=0))
        shift *= 2
    return moveaxis(y, 0, axis)


def maximum_accumulate(x, axis=0):
    """``np.maximum.accumulate(x, axis)``: the running maximum along ``axis``; shape and dtype of x."""
    from . import maximum
    return _accumulate(x, axis, maximum, -_np.inf)


def minimum_accumulate(x, axis=0):
    """``np.minimum.accumulate(x, axis)``: the running minimum along ``axis``; shape and dtype of x."""
    from . import minimum
    return _accumulate(x, axis, minimum, _np.inf)
