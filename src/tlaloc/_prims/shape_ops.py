"""Shape primitives: reshape, transpose, broadcast_to, broadcast_in_dim,
expand_dims, squeeze, concatenate, split_like, pad, flip, iota.

All are linear, so each VJP is the adjoint map and each JVP applies the
primitive to the tangent.
"""
from __future__ import annotations

import numpy as np

from .._core.aval import AbstractValue
from .._core.primitive import Primitive
from ..errors import ShapeError
from ._rules import broadcast_shapes, normalize_axes, refuse_float_mix
from .broadcasting import cast_like, reshape_like, sum_to, zeros_like
from .reductions import reduce_sum


def _linear(p, adjoint):
    """A linear primitive in its first operand: VJP is ``adjoint``, JVP applies ``p``."""
    p.vjp = adjoint

    def jvp(t, x, *rest, out, **params):
        return None if t[0] is None else p.bind(t[0], *rest, **params)
    p.jvp = jvp


# -- reshape -------------------------------------------------------------------

def _reshape_shape(x, *, shape):
    if x.shape is None or any(type(d) is not int for d in x.shape):
        return tuple(None if d == -1 else d for d in shape)
    size = int(np.prod(x.shape))
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape: shape {shape} has more than one -1; give all sizes but one")
    known = int(np.prod([d for d in shape if d != -1]))
    if -1 in shape:
        if known == 0 or size % known:
            raise ShapeError(f"reshape: cannot reshape {x.shape} (size {size}) to {shape}")
        return tuple(size // known if d == -1 else d for d in shape)
    if known != size:
        raise ShapeError(f"reshape: cannot reshape {x.shape} (size {size}) to {shape} (size {known}); "
                         f"the sizes must match")
    return tuple(shape)


reshape_p = Primitive("reshape", impl=lambda x, *, shape: np.reshape(x, shape), hlo="stablehlo.reshape",
                      shape_rule=_reshape_shape, dtype_rule=lambda x, **_: x.dtype)


def reshape(x, shape):
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    return reshape_p.bind(x, shape=tuple(int(d) for d in shape))


_linear(reshape_p, lambda g, x, out, shape: (reshape_like(g, x),))


# -- transpose -------------------------------------------------------------------

def _transpose_shape(x, *, axes):
    if x.shape is None:
        return None
    if axes is None:
        return tuple(reversed(x.shape))
    if sorted(a % len(x.shape) for a in axes) != list(range(len(x.shape))):
        raise ShapeError(f"transpose: axes {axes} is not a permutation of the {len(x.shape)} axes")
    return tuple(x.shape[a] for a in axes)


def _transpose_impl(x, *, axes):
    if isinstance(x, list) and not x:      # an empty loop stack (a loop that ran zero times) stays empty
        return x
    return np.transpose(x, axes)


transpose_p = Primitive("transpose", impl=_transpose_impl, hlo="stablehlo.transpose",
                        shape_rule=_transpose_shape, dtype_rule=lambda x, **_: x.dtype)


def transpose(x, axes=None):
    return transpose_p.bind(x, axes=None if axes is None else tuple(int(a) for a in axes))


def _inverse_perm(axes):
    if axes is None:
        return None
    n = len(axes)
    inv = [0] * n
    for i, a in enumerate(axes):
        inv[a % n] = i
    return tuple(inv)


_linear(transpose_p, lambda g, x, out, axes: (transpose(g, _inverse_perm(axes)),))


# -- broadcasting ------------------------------------------------------------------

def _broadcast_to_shape(x, *, shape):
    shape = tuple(shape)
    if x.shape is None:
        return shape
    out = broadcast_shapes("broadcast_to", x.shape, shape)
    if len(x.shape) > len(shape) or any(type(o) is int and type(s) is int and o != s for o, s in zip(out, shape)):
        raise ShapeError(f"broadcast_to: cannot broadcast an array of shape {tuple(x.shape)} to {shape}; "
                         f"each axis must match or have size 1, and the target rank must not be smaller")
    return shape


broadcast_to_p = Primitive("broadcast_to", impl=lambda x, *, shape: np.broadcast_to(x, shape),
                           hlo="stablehlo.broadcast_in_dim", shape_rule=_broadcast_to_shape,
                           dtype_rule=lambda x, **_: x.dtype)


def broadcast_to(x, shape):
    return broadcast_to_p.bind(x, shape=tuple(int(d) for d in shape))


_linear(broadcast_to_p, lambda g, x, out, shape: (sum_to(g, x),))


def _bid_impl(x, *, shape, broadcast_dimensions):
    x = np.asarray(x)
    _bid_shape(AbstractValue(x.dtype, x.shape), shape=shape, broadcast_dimensions=broadcast_dimensions)
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = x.shape[i]
    return np.broadcast_to(x.reshape(expanded), shape)


def _bid_shape(x, *, shape, broadcast_dimensions):
    dims = tuple(broadcast_dimensions)
    if list(dims) != sorted(set(dims)) or any(not 0 <= d < len(shape) for d in dims):
        raise ShapeError(f"broadcast_in_dim: broadcast_dimensions {dims} must be strictly increasing "
                         f"axes of the result (rank {len(shape)}); transpose the operand first")
    if x.shape is not None:
        if len(x.shape) != len(dims):
            raise ShapeError(f"broadcast_in_dim: operand of rank {len(x.shape)} needs {len(x.shape)} "
                             f"broadcast_dimensions, got {dims}")
        for i, d in enumerate(dims):
            if type(x.shape[i]) is int and x.shape[i] not in (1, shape[d]):
                raise ShapeError(f"broadcast_in_dim: operand axis {i} has size {x.shape[i]} but result "
                                 f"axis {d} has size {shape[d]}; it must match or be 1")
    return tuple(shape)


broadcast_in_dim_p = Primitive("broadcast_in_dim", impl=_bid_impl, hlo="stablehlo.broadcast_in_dim",
                               shape_rule=_bid_shape, dtype_rule=lambda x, **_: x.dtype)


def broadcast_in_dim(x, shape, broadcast_dimensions):
    return broadcast_in_dim_p.bind(x, shape=tuple(shape), broadcast_dimensions=tuple(broadcast_dimensions))


def _bid_vjp(g, x, out, shape, broadcast_dimensions):
    others = tuple(i for i in range(len(shape)) if i not in broadcast_dimensions)
    return (sum_to(reduce_sum(g, others) if others else g, x),)


_linear(broadcast_in_dim_p, _bid_vjp)


# -- expand_dims / squeeze ------------------------------------------------------------

def _expand_shape(x, *, axis):
    if x.shape is None:
        return None
    out = list(x.shape)
    rank = len(out) + len(axis)
    for a in sorted(ax % rank for ax in axis):
        out.insert(a, 1)
    return tuple(out)


expand_dims_p = Primitive("expand_dims", impl=lambda x, *, axis: np.expand_dims(x, axis), hlo="stablehlo.reshape",
                          shape_rule=_expand_shape, dtype_rule=lambda x, **_: x.dtype)


def expand_dims(x, axis):
    return expand_dims_p.bind(x, axis=(int(axis),) if isinstance(axis, (int, np.integer)) else tuple(axis))


def _squeeze_shape(x, *, axis):
    if x.shape is None:
        return None
    if axis is None:
        if any(d is None or isinstance(d, str) for d in x.shape):
            return None
        return tuple(d for d in x.shape if d != 1)
    ax = normalize_axes(axis, len(x.shape), "squeeze")
    for a in ax:
        if type(x.shape[a]) is int and x.shape[a] != 1:
            raise ShapeError(f"squeeze: axis {a} has size {x.shape[a]}, not 1")
    return tuple(d for i, d in enumerate(x.shape) if i not in ax)


squeeze_p = Primitive("squeeze", impl=lambda x, *, axis: np.squeeze(x, axis), hlo="stablehlo.reshape",
                      shape_rule=_squeeze_shape, dtype_rule=lambda x, **_: x.dtype)


def squeeze(x, axis=None):
    if axis is not None:
        axis = (int(axis),) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return squeeze_p.bind(x, axis=axis)


for _p in (expand_dims_p, squeeze_p):
    _linear(_p, lambda g, x, out, axis: (reshape_like(g, x),))


# -- concatenate / split_like --------------------------------------------------------

def _concat_shape(*xs, axis):
    if any(x.shape is None for x in xs):
        return None
    rank = len(xs[0].shape)
    if any(len(x.shape) != rank for x in xs):
        raise ShapeError(f"concatenate: operands have ranks {[len(x.shape) for x in xs]}; all must match")
    a = axis % rank
    for i in range(rank):
        dims = {x.shape[i] for x in xs if type(x.shape[i]) is int}
        if i != a and len(dims) > 1:
            raise ShapeError(f"concatenate: operands have shapes {[tuple(x.shape) for x in xs]}; all axes but "
                             f"axis {a} must match (axis {i} has sizes {sorted(dims)})")
    size = 0
    for x in xs:
        d = x.shape[a]
        size = None if (d is None or size is None or isinstance(d, str)) else size + d
    return tuple(size if i == a else xs[0].shape[i] for i in range(rank))


def _concat_dtype(*xs, axis):
    from .. import dtypes as _dt
    _dt.check_float_mix("concatenate", {f"operand {i}": x.dtype for i, x in enumerate(xs)})
    return _dt.result_dtype(*(x.dtype for x in xs))


concatenate_p = Primitive("concatenate", impl=refuse_float_mix("concatenate",
                                                               lambda *xs, axis: np.concatenate(xs, axis)),
                          hlo="stablehlo.concatenate", shape_rule=_concat_shape, dtype_rule=_concat_dtype)


def concatenate(xs, axis=0):
    return concatenate_p.bind(*xs, axis=int(axis))


def _split_like_impl(g, *likes, axis):
    sizes = np.cumsum([np.shape(l)[axis] for l in likes])[:-1]
    return tuple(np.split(g, sizes, axis=axis))


split_like_p = Primitive("split_like", impl=_split_like_impl, hlo="stablehlo.slice", multiple_results=True,
                         shape_rule=lambda g, *likes, axis: tuple(l.shape for l in likes),
                         dtype_rule=lambda g, *likes, axis: tuple(g.dtype for _ in likes),
                         nondiff_argnums=None)


def split_like(g, likes, axis):
    return split_like_p.bind(g, *likes, axis=int(axis))


def _cast_to(x, like):
    """``x`` in ``like``'s real floating dtype (``cast_like``), with no node where both are known equal."""
    dx, dl = (v.aval.dtype if hasattr(v, "aval") else np.asarray(v).dtype for v in (x, like))
    return x if dx is not None and dx == dl else cast_like(x, like)


def _concat_vjp(g, *xs, out, axis):
    # each piece in its operand's float dtype: concatenate([x32, n]) is float64 (NumPy's promotion),
    # and x's cotangent is float32 (JAX's convention; sum_to does the same for broadcasts)
    return tuple(_cast_to(p, x) for p, x in zip(split_like(g, xs, axis), xs))


def _concat_jvp(t, *xs, out, axis):
    if all(ti is None for ti in t):
        return None
    return concatenate([ti if ti is not None else zeros_like(x) for ti, x in zip(t, xs)], axis)


concatenate_p.vjp, concatenate_p.jvp = _concat_vjp, _concat_jvp


def _split_like_vjp(gs, g, *likes, out, axis):
    parts = [_cast_to(gi, g) if gi is not None else zeros_like(o) for gi, o in zip(gs, out)]
    return (concatenate(parts, axis),) + (None,) * len(likes)


def _split_like_jvp(t, g, *likes, out, axis):
    if t[0] is None:
        return tuple(None for _ in likes)
    return split_like(t[0], likes, axis)


split_like_p.vjp, split_like_p.jvp = _split_like_vjp, _split_like_jvp


# -- pad / flip ---------------------------------------------------------------------

# ``pad_width`` holds one ``(low, high)`` pair per axis, or a single pair for every axis (NumPy's
# ``np.pad(x, n)`` / ``(b, a)`` forms, whose rank may be unknown when the graph is built).
# Negative widths crop (as StableHLO's ``pad``): the VJP is the pad with negated widths.

def _per_axis(pad_width, rank):
    return tuple(pad_width) * rank if len(pad_width) == 1 else tuple(pad_width)


def _pad_impl(x, *, pad_width, constant):
    x = np.asarray(x)
    pw = _per_axis(pad_width, x.ndim)
    if any(lo < 0 or hi < 0 for lo, hi in pw):
        x = x[tuple(slice(-min(lo, 0), x.shape[a] + min(hi, 0)) for a, (lo, hi) in enumerate(pw))]
        pw = tuple((max(lo, 0), max(hi, 0)) for lo, hi in pw)
    return np.pad(x, pw, mode="constant", constant_values=constant)


def _pad_shape(x, *, pad_width, constant):
    if x.shape is None:
        return None
    if len(pad_width) != len(x.shape) and len(pad_width) != 1:
        raise ShapeError(f"pad: pad_width has {len(pad_width)} entries for an array of rank {len(x.shape)}; "
                         f"give one (before, after) pair per axis, or one pair for every axis")
    pw = _per_axis(pad_width, len(x.shape))
    return tuple(d + lo + hi if type(d) is int else None for d, (lo, hi) in zip(x.shape, pw))


pad_p = Primitive("pad", impl=_pad_impl, hlo="stablehlo.pad", shape_rule=_pad_shape,
                  dtype_rule=lambda x, **_: x.dtype)


def pad(x, pad_width, constant=0):
    """``x`` padded with ``constant``: ``pad_width`` is one ``(low, high)`` pair per axis, or one pair
    for every axis; negative widths crop."""
    return pad_p.bind(x, pad_width=tuple((int(lo), int(hi)) for lo, hi in pad_width), constant=constant)


def _pad_vjp(g, x, out, pad_width, constant):
    return (pad(g, tuple((-lo, -hi) for lo, hi in pad_width), 0),)


def _pad_jvp(t, x, out, pad_width, constant):
    return None if t[0] is None else pad(t[0], pad_width, 0)


pad_p.vjp, pad_p.jvp = _pad_vjp, _pad_jvp

flip_p = Primitive("flip", impl=lambda x, *, axes: np.flip(x, axes), hlo="stablehlo.reverse",
                   shape_rule=lambda x, **_: x.shape, dtype_rule=lambda x, **_: x.dtype)


def flip(x, axes=None):
    if axes is not None:
        axes = (int(axes),) if isinstance(axes, (int, np.integer)) else tuple(axes)
    return flip_p.bind(x, axes=axes)


_linear(flip_p, lambda g, x, out, axes: (flip(g, axes),))


def _iota_impl(*, shape, dtype, dimension):
    shape = tuple(shape)
    r = np.arange(shape[dimension], dtype=dtype)
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return np.broadcast_to(r.reshape(view), shape).copy()


iota_p = Primitive("iota", impl=_iota_impl, hlo="stablehlo.iota",
                   shape_rule=lambda *, shape, dtype, dimension: tuple(shape),
                   dtype_rule=lambda *, shape, dtype, dimension: np.dtype(dtype))
iota_p.vjp = lambda g, out, **_: ()
iota_p.jvp = lambda t, out, **_: None


def iota(shape, dtype=np.int32, dimension=0):
    return iota_p.bind(shape=tuple(shape), dtype=np.dtype(dtype), dimension=int(dimension))


# -- swapaxes (rank-generic with negative axes) --------------------------------------

def _swapaxes_shape(x, *, axis1, axis2):
    if x.shape is None:
        return None
    s = list(x.shape)
    r = len(s)
    a, b = axis1 % r, axis2 % r
    s[a], s[b] = s[b], s[a]
    return tuple(s)


swapaxes_p = Primitive("swapaxes", impl=lambda x, *, axis1, axis2: np.swapaxes(x, axis1, axis2),
                       hlo="stablehlo.transpose", shape_rule=_swapaxes_shape,
                       dtype_rule=lambda x, **_: x.dtype)


def swapaxes(x, axis1, axis2):
    """Swap two axes; negative axes work on arrays of unknown rank (e.g. -1, -2)."""
    return swapaxes_p.bind(x, axis1=int(axis1), axis2=int(axis2))


_linear(swapaxes_p, lambda g, x, out, axis1, axis2: (swapaxes(g, axis1, axis2),))
