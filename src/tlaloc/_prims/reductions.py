"""Reductions: sum, max, min, prod, argmax, argmin, cumsum, cumprod, cummax.

``axes`` is ``None`` (all), an int or a tuple of ints (negative allowed);
``keepdims`` as NumPy. Result dtypes follow NumPy too: sum, prod, cumsum and
cumprod of bool and narrow integers accumulate in 64 bits (the StableHLO
lowering converts first); max/min keep the input dtype. Conventions: max/min split the cotangent equally among
tied maxima (as JAX); prod's gradient is exact when the input holds zeros
(product of the others, as JAX).
"""
from __future__ import annotations

import numpy as np

from .._core.primitive import Primitive
from . import _eager
from ._rules import accumulation_dtype, reduced_shape
from .broadcasting import broadcast_like, cast_like, expand_reduced
from .elementwise import divide, equal, multiply, safe_mul
from .selection import select


def _axes_param(axes):
    if axes is None:
        return None
    if isinstance(axes, (int, np.integer)):
        return (int(axes),)
    return tuple(int(a) for a in axes)


def reduction(name, np_fn, hlo, dtype_rule=None, ufunc=None):
    """``ufunc``: the ufunc whose ``reduce`` ``np_fn`` calls on an ndarray (the same
    bits without ``np_fn``'s dispatch)."""
    def impl(x, *, axes, keepdims):
        if ufunc is not None and type(x) is np.ndarray:
            return np.asarray(ufunc.reduce(x, axis=axes, keepdims=keepdims))
        return np.asarray(np_fn(x, axis=axes, keepdims=keepdims))

    def shape_rule(x, *, axes, keepdims):
        return reduced_shape(x.shape, axes, keepdims, name)

    p = Primitive(name, impl=impl, hlo=hlo, shape_rule=shape_rule,
                  dtype_rule=dtype_rule or (lambda x, **_: accumulation_dtype(x.dtype)))
    p.eager = _eager.unary(p)
    return p


reduce_sum_p = reduction("reduce_sum", np.sum, "stablehlo.reduce add", ufunc=np.add)
reduce_max_p = reduction("reduce_max", np.max, "stablehlo.reduce max", lambda x, **_: x.dtype)
reduce_min_p = reduction("reduce_min", np.min, "stablehlo.reduce min", lambda x, **_: x.dtype)
reduce_prod_p = reduction("reduce_prod", np.prod, "stablehlo.reduce multiply")
reduce_any_p = reduction("reduce_any", np.any, "stablehlo.reduce or", lambda x, **_: np.dtype(bool))
reduce_all_p = reduction("reduce_all", np.all, "stablehlo.reduce and", lambda x, **_: np.dtype(bool))


def reduce_sum(x, axes=None, keepdims=False):
    return reduce_sum_p.bind(x, axes=_axes_param(axes), keepdims=bool(keepdims))


def reduce_max(x, axes=None, keepdims=False):
    return reduce_max_p.bind(x, axes=_axes_param(axes), keepdims=bool(keepdims))


def reduce_min(x, axes=None, keepdims=False):
    return reduce_min_p.bind(x, axes=_axes_param(axes), keepdims=bool(keepdims))


def reduce_prod(x, axes=None, keepdims=False):
    return reduce_prod_p.bind(x, axes=_axes_param(axes), keepdims=bool(keepdims))


def _sum_vjp(g, x, out, axes, keepdims):
    return (broadcast_like(expand_reduced(g, x, axes, keepdims), x),)


def _sum_jvp(t, x, out, axes, keepdims):
    return None if t[0] is None else reduce_sum(t[0], axes, keepdims)


reduce_sum_p.vjp, reduce_sum_p.jvp = _sum_vjp, _sum_jvp


def _chooser_vjp(g, x, out, axes, keepdims):
    out_k = out if keepdims else expand_reduced(out, x, axes, False)
    hit = cast_like(select(equal(x, broadcast_like(out_k, x)), 1.0, 0.0), x)
    w = divide(hit, reduce_sum(hit, axes, keepdims=True))
    return (safe_mul(broadcast_like(expand_reduced(g, x, axes, keepdims), x), w),)


def _chooser_jvp(t, x, out, axes, keepdims):
    if t[0] is None:
        return None
    out_k = out if keepdims else expand_reduced(out, x, axes, False)
    hit = cast_like(select(equal(x, broadcast_like(out_k, x)), 1.0, 0.0), x)
    w = divide(hit, reduce_sum(hit, axes, keepdims=True))
    return reduce_sum(safe_mul(t[0], w), axes, keepdims)


for _p in (reduce_max_p, reduce_min_p):
    _p.vjp, _p.jvp = _chooser_vjp, _chooser_jvp


def _prod_others(x, axes):
    """For each element, the product of the other elements along ``axes``
    (exact when zeros are present: computed without division)."""
    return prod_others_p.bind(x, axes=axes)


def _prod_others_impl(x, *, axes):
    x = np.asarray(x)
    ax = tuple(range(x.ndim)) if axes is None else tuple(a % x.ndim for a in axes)
    moved = np.moveaxis(x, ax, tuple(range(x.ndim - len(ax), x.ndim)))
    lead = moved.shape[:x.ndim - len(ax)]
    flat = moved.reshape(lead + (-1,))
    n = flat.shape[-1]
    ones = np.ones(lead + (1,), dtype=x.dtype)
    left = np.concatenate([ones, np.cumprod(flat, axis=-1)[..., :-1]], axis=-1) if n else flat
    right = np.concatenate([np.cumprod(flat[..., ::-1], axis=-1)[..., ::-1][..., 1:], ones], axis=-1) if n else flat
    res = (left * right).reshape(moved.shape)
    return np.moveaxis(res, tuple(range(x.ndim - len(ax), x.ndim)), ax)


prod_others_p = Primitive("prod_others", impl=_prod_others_impl, hlo="stablehlo.reduce multiply",
                          shape_rule=lambda x, **_: x.shape, dtype_rule=lambda x, **_: x.dtype)


def _prod_vjp(g, x, out, axes, keepdims):
    return (multiply(broadcast_like(expand_reduced(g, x, axes, keepdims), x), _prod_others(x, axes)),)


def _prod_jvp(t, x, out, axes, keepdims):
    return None if t[0] is None else reduce_sum(multiply(t[0], _prod_others(x, axes)), axes, keepdims)


reduce_prod_p.vjp, reduce_prod_p.jvp = _prod_vjp, _prod_jvp


def _prod_others_vjp(g, x, out, axes):
    # d/dx_j prod_{k != i} x_k = prod_{k != i, j} x_k; computed densely (rarely used: 2nd order of prod).
    return (prod_others_grad_p.bind(g, x, axes=axes),)


def _prod_others_grad_impl(g, x, *, axes):
    x = np.asarray(x)
    g = np.asarray(g)
    ax = tuple(range(x.ndim)) if axes is None else tuple(a % x.ndim for a in axes)
    moved_x = np.moveaxis(x, ax, tuple(range(x.ndim - len(ax), x.ndim)))
    moved_g = np.moveaxis(g, ax, tuple(range(x.ndim - len(ax), x.ndim)))
    lead = moved_x.shape[:x.ndim - len(ax)]
    fx = moved_x.reshape(lead + (-1,))
    fg = moved_g.reshape(lead + (-1,))
    n = fx.shape[-1]
    out = np.zeros_like(fx)
    for j in range(n):
        for i in range(n):
            if i == j:
                continue
            mask = np.ones(n, bool)
            mask[[i, j]] = False
            out[..., j] += fg[..., i] * np.prod(fx[..., mask], axis=-1)
    res = out.reshape(moved_x.shape)
    return np.moveaxis(res, tuple(range(x.ndim - len(ax), x.ndim)), ax)


prod_others_grad_p = Primitive("prod_others_grad", impl=_prod_others_grad_impl, hlo=None,
                               shape_rule=lambda g, x, **_: x.shape, dtype_rule=lambda g, x, **_: x.dtype)
prod_others_p.vjp = _prod_others_vjp
prod_others_p.jvp = lambda t, x, out, axes: None if t[0] is None else prod_others_grad_p.bind(t[0], x, axes=axes)


# -- arg reductions ----------------------------------------------------------------

def _arg_impl(fn):
    def impl(x, *, axis, keepdims):
        return np.asarray(fn(x, axis=axis, keepdims=keepdims)).astype(np.int64)
    return impl


def _arg_shape(x, *, axis, keepdims):
    return reduced_shape(x.shape, None if axis is None else (axis,), keepdims, "argmax")


argmax_p = Primitive("argmax", impl=_arg_impl(np.argmax), hlo="stablehlo.reduce argmax",
                     shape_rule=_arg_shape, dtype_rule=lambda x, **_: np.dtype(np.int64))
argmin_p = Primitive("argmin", impl=_arg_impl(np.argmin), hlo="stablehlo.reduce argmin",
                     shape_rule=_arg_shape, dtype_rule=lambda x, **_: np.dtype(np.int64))
for _p in (argmax_p, argmin_p):
    _p.vjp = lambda g, x, out, axis, keepdims: (None,)
    _p.jvp = lambda t, x, out, axis, keepdims: None
reduce_any_p.vjp = reduce_all_p.vjp = lambda g, x, out, axes, keepdims: (None,)
reduce_any_p.jvp = reduce_all_p.jvp = lambda t, x, out, axes, keepdims: None


# -- cumulative ------------------------------------------------------------------

def _cum(fn):
    def impl(x, *, axis, reverse):
        x = np.asarray(x)
        if reverse:
            return np.flip(fn(np.flip(x, axis), axis=axis), axis)
        return fn(x, axis=axis)
    return impl


cumsum_p = Primitive("cumsum", impl=_cum(np.cumsum), hlo="stablehlo.reduce_window add",
                     shape_rule=lambda x, **_: x.shape, dtype_rule=lambda x, **_: accumulation_dtype(x.dtype))
cumprod_p = Primitive("cumprod", impl=_cum(np.cumprod), hlo="stablehlo.reduce_window multiply",
                      shape_rule=lambda x, **_: x.shape, dtype_rule=lambda x, **_: accumulation_dtype(x.dtype))
cummax_p = Primitive("cummax", impl=_cum(np.maximum.accumulate), hlo="stablehlo.reduce_window max",
                     shape_rule=lambda x, **_: x.shape, dtype_rule=lambda x, **_: x.dtype)


def cumsum(x, axis, reverse=False):
    return cumsum_p.bind(x, axis=int(axis), reverse=bool(reverse))


def cumprod(x, axis, reverse=False):
    return cumprod_p.bind(x, axis=int(axis), reverse=bool(reverse))


cumsum_p.vjp = lambda g, x, out, axis, reverse: (cumsum(g, axis, not reverse),)
cumsum_p.jvp = lambda t, x, out, axis, reverse: None if t[0] is None else cumsum(t[0], axis, reverse)


def _cumprod_vjp(g, x, out, axis, reverse):
    # x_bar_j = sum_{i >= j} g_i * prod_{k <= i, k != j} x_k  (forward direction);
    # computed exactly (zeros allowed) by a dense primitive.
    return (cumprod_grad_p.bind(g, x, axis=axis, reverse=reverse),)


def _cumprod_dense(v, x, axis, reverse, transpose):
    """``sum_{pairs} v · prod_{k <= i, k != j} x_k`` along ``axis`` for ``j <= i``, exact with
    zeros: into entry ``j`` from ``v_i`` (``transpose``, the VJP) or into ``i`` from ``v_j`` (the JVP)."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    v = np.moveaxis(np.asarray(v), axis, -1)
    if reverse:
        x, v = x[..., ::-1], v[..., ::-1]
    n = x.shape[-1]
    out = np.zeros_like(x)
    for i in range(n):
        for j in range(i + 1):
            mask = np.zeros(n, bool)
            mask[:i + 1] = True
            mask[j] = False
            others = np.prod(x[..., mask], axis=-1)
            if transpose:
                out[..., j] += v[..., i] * others
            else:
                out[..., i] += v[..., j] * others
    if reverse:
        out = out[..., ::-1]
    return np.moveaxis(out, -1, axis)


def _cumprod_grad_impl(g, x, *, axis, reverse):
    return _cumprod_dense(g, x, axis, reverse, transpose=True)


cumprod_grad_p = Primitive("cumprod_grad", impl=_cumprod_grad_impl, hlo=None,
                           shape_rule=lambda g, x, **_: x.shape, dtype_rule=lambda g, x, **_: x.dtype)
cumprod_p.vjp = _cumprod_vjp
cumprod_p.jvp = lambda t, x, out, axis, reverse: None if t[0] is None else _cumprod_jvp(t[0], x, axis, reverse)


def _cumprod_jvp(t, x, axis, reverse):
    # d(cumprod)_i = sum_{j <= i} t_j prod_{k<=i, k!=j} x_k: the transpose of the VJP map.
    return cumprod_jvp_p.bind(t, x, axis=axis, reverse=reverse)


def _cumprod_jvp_impl(t, x, *, axis, reverse):
    return _cumprod_dense(t, x, axis, reverse, transpose=False)


cumprod_jvp_p = Primitive("cumprod_jvp", impl=_cumprod_jvp_impl, hlo=None,
                          shape_rule=lambda t, x, **_: x.shape, dtype_rule=lambda t, x, **_: x.dtype)
