"""The ``diagonal`` primitive (NumPy semantics) and its adjoint ``diagonal_scatter``.

``diagonal(a, offset, axis1, axis2)``: the diagonal of ``a`` over ``(axis1, axis2)``, moved
last (``np.diagonal``); ``diagonal_scatter(g, like, ...)``: zeros shaped as ``like`` with
``g`` written on that diagonal. Batching rules: ``tlaloc._ad.batching_linalg``.
"""
from __future__ import annotations

import numpy as np

from .._core.primitive import Primitive


def _diag_shape(a, *, offset, axis1, axis2):
    if a.shape is None:
        return None
    r = len(a.shape)
    n, m = a.shape[axis1 % r], a.shape[axis2 % r]
    rest = tuple(d for i, d in enumerate(a.shape) if i not in (axis1 % r, axis2 % r))
    if type(n) is int and type(m) is int:
        k = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
        return rest + (k,)
    return rest + (None,)


_diagonal_p = Primitive("diagonal", impl=lambda a, *, offset, axis1, axis2: np.diagonal(a, offset, axis1, axis2).copy(),
                        hlo="stablehlo.gather", shape_rule=_diag_shape, dtype_rule=lambda a, **_: a.dtype)


def _scatter_impl(g, like, *, offset, axis1, axis2):
    out = np.zeros(np.shape(like), dtype=np.asarray(g).dtype)
    view = np.diagonal(out, offset, axis1, axis2)
    view.setflags(write=True)
    view[...] = g
    return out


_diagonal_scatter_p = Primitive("diagonal_scatter", impl=_scatter_impl, hlo="stablehlo.scatter",
                                shape_rule=lambda g, like, **_: like.shape, dtype_rule=lambda g, like, **_: g.dtype)
_diagonal_p.vjp = lambda g, a, out, **k: (_diagonal_scatter_p.bind(g, a, **k),)
_diagonal_p.jvp = lambda t, a, out, **k: None if t[0] is None else _diagonal_p.bind(t[0], **k)
_diagonal_scatter_p.vjp = lambda c, g, like, out, **k: (_diagonal_p.bind(c, **k), None)
_diagonal_scatter_p.jvp = lambda t, g, like, out, **k: None if t[0] is None else _diagonal_scatter_p.bind(t[0], like, **k)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal of ``a`` over ``(axis1, axis2)``, moved last: ``(..., k)`` (``np.diagonal``)."""
    return _diagonal_p.bind(a, offset=int(offset), axis1=int(axis1), axis2=int(axis2))
