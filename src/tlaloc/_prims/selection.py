"""``select`` (``where``) and ``clamp`` (``clip``), with their rules.

``select``'s VJP routes the cotangent to the chosen operand and an exact 0 to
the other, so a branch not taken never contributes (no 0·inf = NaN).
``clamp`` passes the cotangent where ``lo <= x <= hi`` (bounds included, as
PyTorch); ``lo``/``hi`` get the cotangent where they are the result.
"""
from __future__ import annotations

import numpy as np

from .._core.primitive import Primitive
from ._rules import broadcast_shapes, elementwise_dtype, refuse_float_mix
from .broadcasting import cast_like, sum_to, zeros_like
from .elementwise import and_p, ge_p, le_p, logical_not_p, lt_p


def _select_impl(pred, x, y):
    return np.where(pred, x, y)


def _select_dtype(pred, x, y):
    return elementwise_dtype("where", lambda a, b: np.where(True, a, b), ["x", "y"])(x, y)


select_p = Primitive("select", impl=refuse_float_mix("where", _select_impl, ["condition", "x", "y"]),
                     hlo="stablehlo.select",
                     shape_rule=lambda p, x, y: broadcast_shapes("where", p.shape, x.shape, y.shape),
                     dtype_rule=_select_dtype, nondiff_argnums=(0,))


def select(pred, x, y):
    """``where(pred, x, y)`` with NumPy broadcasting."""
    return select_p.bind(pred, x, y)


def _select_vjp(g, pred, x, y, out):
    z = zeros_like(g)
    return None, sum_to(select(pred, g, z), x), sum_to(select(pred, z, g), y)


def _select_jvp(t, pred, x, y, out):
    if t[1] is None and t[2] is None:
        return None
    # a tangent in out's float dtype: np.where(c, x32, n) is float64 (NumPy's promotion), and
    # select refuses a float32/float64 mix of tangents (cast_like is the identity elsewhere)
    tx = cast_like(t[1], out) if t[1] is not None else zeros_like(out)
    ty = cast_like(t[2], out) if t[2] is not None else zeros_like(out)
    return select(pred, tx, ty)


select_p.vjp, select_p.jvp = _select_vjp, _select_jvp


def _clamp_impl(lo, x, hi):
    return np.minimum(np.maximum(x, lo), hi)


clamp_p = Primitive("clamp", impl=refuse_float_mix("clip", _clamp_impl, ["a_min", "x", "a_max"]), hlo="stablehlo.clamp",
                    shape_rule=lambda lo, x, hi: broadcast_shapes("clip", lo.shape, x.shape, hi.shape),
                    dtype_rule=lambda lo, x, hi: elementwise_dtype("clip", _clamp_impl, ["a_min", "x", "a_max"])(lo, x, hi))


def clamp(lo, x, hi):
    return clamp_p.bind(lo, x, hi)


def _clamp_masks(lo, x, hi):
    """Boolean masks ``(inside, below, above)``: ``lo <= x <= hi``, ``x < lo``, neither."""
    inside = and_p.bind(ge_p.bind(x, lo), le_p.bind(x, hi))
    below = lt_p.bind(x, lo)
    return inside, below, and_p.bind(logical_not_p.bind(inside), logical_not_p.bind(below))


def _clamp_vjp(g, lo, x, hi, out):
    inside, below, above = _clamp_masks(lo, x, hi)
    z = zeros_like(g)
    return (sum_to(select(below, g, z), lo), sum_to(select(inside, g, z), x),
            sum_to(select(above, g, z), hi))


def _clamp_jvp(t, lo, x, hi, out):
    if all(ti is None for ti in t):
        return None
    inside, below, above = _clamp_masks(lo, x, hi)
    z = zeros_like(out)
    tl, tx, th = (ti if ti is not None else z for ti in t)
    return select(inside, tx, select(below, tl, th))


clamp_p.vjp, clamp_p.jvp = _clamp_vjp, _clamp_jvp
