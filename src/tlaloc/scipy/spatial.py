"""``scipy.spatial.distance``'s ``cdist`` and ``pdist`` for the common metrics, built from
``tlaloc.numpy`` (so they differentiate). User code calling ``scipy.spatial.distance.cdist`` is
mapped here by the front end (``_frontend/calls.py``).

Metrics: ``"euclidean"``, ``"sqeuclidean"``, ``"cityblock"``, ``"chebyshev"``, ``"minkowski"``
(with ``p``), ``"cosine"``; others are refused by name. The Euclidean distance is
``sqrt(sum((a - b) ** 2))``, whose derivative at a zero distance is taken as 0 (tlaloc's
``safe_mul`` convention: a zero cotangent contributes zero), where SciPy has no derivative.
"""
from __future__ import annotations

import numpy as _np

from .. import numpy as tnp

__all__ = ["cdist", "pdist"]

_METRICS = ("euclidean", "sqeuclidean", "cityblock", "chebyshev", "minkowski", "cosine")


def _pairwise(diff, a, b, metric, p):
    if metric == "sqeuclidean":
        return tnp.sum(diff ** 2, axis=-1)
    if metric == "euclidean":
        sq = tnp.sum(diff ** 2, axis=-1)
        safe = tnp.where(sq > 0, sq, 1.0)
        return tnp.where(sq > 0, tnp.sqrt(safe), 0.0)
    if metric == "cityblock":
        return tnp.sum(tnp.abs(diff), axis=-1)
    if metric == "chebyshev":
        return tnp.max(tnp.abs(diff), axis=-1)
    if metric == "minkowski":
        return tnp.sum(tnp.abs(diff) ** p, axis=-1) ** (1.0 / p)
    na = tnp.sqrt(tnp.sum(a ** 2, axis=-1))
    nb = tnp.sqrt(tnp.sum(b ** 2, axis=-1))
    return 1.0 - tnp.sum(a * b, axis=-1) / (na * nb)


def cdist(XA, XB, metric="euclidean", *, p=2.0):
    """Distances between each row of ``XA`` (m, n) and each row of ``XB`` (k, n): shape (m, k),
    float64 as SciPy's. Raises ValueError for another metric, a callable one or 1-D inputs."""
    if metric not in _METRICS:
        raise ValueError(f"cdist: metric {metric!r} is not supported here; use one of {_METRICS}")
    if tnp.ndim(XA) != 2 or tnp.ndim(XB) != 2:
        raise ValueError("cdist: XA and XB must be 2-D (rows of points)")
    a, b = tnp.expand_dims(XA, 1), tnp.expand_dims(XB, 0)
    return _pairwise(a - b, a, b, metric, p)


def pdist(X, metric="euclidean", *, p=2.0):
    """The condensed distances between the rows of ``X`` (m, n): the upper triangle of
    ``cdist(X, X)`` row by row, shape (m * (m - 1) / 2,), as SciPy's."""
    m = tnp.shape(X)[0]
    if type(m) is not int:
        from ..errors import RankUnknownError
        raise RankUnknownError("pdist: the number of points is unknown at definition time")
    i, j = _np.triu_indices(m, 1)
    a, b = tnp.take(X, i, axis=0), tnp.take(X, j, axis=0)
    if metric not in _METRICS:
        raise ValueError(f"pdist: metric {metric!r} is not supported here; use one of {_METRICS}")
    return _pairwise(a - b, a, b, metric, p)
