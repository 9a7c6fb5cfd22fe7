"""``np.polyfit`` (least squares on the Vandermonde matrix, as NumPy solves it) and
``np.digitize`` (``searchsorted`` on the bin edges), from ``tlaloc.numpy`` functions.

``polyfit`` scales the Vandermonde columns by their norms before ``lstsq``, as NumPy does
(``numpy.polynomial.polyutils``-free path of ``np.polyfit``), so its values agree with NumPy's to
rounding; weights ``w`` are supported, ``full``/``cov`` are refused by name.
"""
from __future__ import annotations

import numpy as _np


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """Least-squares polynomial coefficients, highest power first: shape (deg + 1,) for a 1-D ``y``,
    (deg + 1, k) for ``y`` of shape (n, k). Raises ValueError for ``full``/``cov`` or a negative deg."""
    from . import linalg, newaxis, sqrt, sum, vander
    if full or cov:
        raise ValueError("polyfit: full=True and cov=True are not supported here; use the coefficients")
    if int(deg) != deg or deg < 0:
        raise ValueError(f"polyfit: deg must be a non-negative int, got {deg!r}")
    lhs = vander(x, int(deg) + 1)
    rhs = y
    if w is not None:
        lhs = lhs * w[:, newaxis]
        rhs = rhs * w if rhs.ndim == 1 else rhs * w[:, newaxis]
    scale = sqrt(sum(lhs * lhs, axis=0))
    c = linalg.lstsq(lhs / scale, rhs, rcond=rcond)[0]
    return (c.T / scale).T


def digitize(x, bins, right=False):
    """The indices of the bins each value of ``x`` falls in, as NumPy's ``digitize``: for increasing
    edges ``searchsorted(bins, x, side)``, for decreasing ones ``len(bins) - searchsorted(bins[::-1],
    x, side)``, ``side = "left" if right else "right"`` (NumPy's ``_function_base_impl.digitize``);
    int64, no derivative. (Regression: decreasing edges gave the increasing-edge answer.)"""
    from . import flip, searchsorted, shape, where
    side = "left" if right else "right"
    n = shape(bins)[0]
    up = searchsorted(bins, x, side=side)
    down = n - searchsorted(flip(bins, 0), x, side=side)
    if isinstance(bins, (_np.ndarray, list, tuple)):        # known edges: NumPy's choice, made now
        b = _np.asarray(bins)
        return down if b.size > 1 and b[0] > b[-1] else up
    return where(bins[0] > bins[-1], down, up)
