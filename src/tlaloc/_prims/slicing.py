"""StableHLO's static ``slice``: start, limit and stride per axis, all static.

Bounds are checked, never clamped (StableHLO requires ``0 <= start <= limit <=
size`` and ``stride >= 1``). The VJP places the cotangent back with
``index_add`` into zeros (JAX uses ``pad`` with interior padding, the same
map); the JVP slices the tangent.
"""
from __future__ import annotations

import numpy as np

from .._core.aval import AbstractValue
from .._core.primitive import Primitive
from ..errors import ShapeError
from .broadcasting import zeros_like
from .indexing import index_add_p


def _slice_shape(x, *, start_indices, limit_indices, strides):
    n = len(start_indices)
    if len(limit_indices) != n or len(strides) != n:
        raise ShapeError(f"slice: start_indices {start_indices}, limit_indices {limit_indices} and "
                         f"strides {strides} must have one entry per axis")
    if x.shape is not None and len(x.shape) != n:
        raise ShapeError(f"slice: an array of rank {len(x.shape)} needs {len(x.shape)} start indices, got {n}")
    out = []
    for i, (lo, hi, st) in enumerate(zip(start_indices, limit_indices, strides)):
        dim = None if x.shape is None else x.shape[i]
        if st < 1 or lo < 0 or hi < lo or (type(dim) is int and hi > dim):
            raise ShapeError(f"slice: axis {i} of size {'?' if dim is None else dim} cannot be sliced "
                             f"[{lo}:{hi}:{st}]; need 0 <= start <= limit <= size and stride >= 1")
        out.append(-(-(hi - lo) // st))
    return tuple(out)


def _slice_impl(x, *, start_indices, limit_indices, strides):
    x = np.asarray(x)
    _slice_shape(AbstractValue(x.dtype, x.shape), start_indices=start_indices,
                 limit_indices=limit_indices, strides=strides)
    return x[tuple(slice(lo, hi, st) for lo, hi, st in zip(start_indices, limit_indices, strides))]


slice_p = Primitive("slice", impl=_slice_impl, hlo="stablehlo.slice", shape_rule=_slice_shape,
                    dtype_rule=lambda x, **_: x.dtype)


def static_slice(x, start_indices, limit_indices, strides=None):
    """StableHLO ``slice``: ``x[s0:l0:k0, s1:l1:k1, ...]`` with static bounds.

    Args:
      x: array of rank r.
      start_indices, limit_indices: r ints with ``0 <= start <= limit <= size``.
      strides: r ints >= 1 (default all 1).
    Returns:
      array of shape ``ceil((limit - start) / stride)`` per axis, dtype of x.
    Raises:
      ShapeError: bounds out of range (never clamped) or a wrong number of entries.
    """
    start = tuple(int(s) for s in start_indices)
    strides = (1,) * len(start) if strides is None else tuple(int(s) for s in strides)
    return slice_p.bind(x, start_indices=start, limit_indices=tuple(int(s) for s in limit_indices),
                        strides=strides)


def _slice_vjp(g, x, out, start_indices, limit_indices, strides):
    spec = tuple(("s", lo, hi, st) for lo, hi, st in zip(start_indices, limit_indices, strides))
    return (index_add_p.bind(zeros_like(x), g, spec=spec),)


slice_p.vjp = _slice_vjp
slice_p.jvp = lambda t, x, out, **p: None if t[0] is None else slice_p.bind(t[0], **p)
