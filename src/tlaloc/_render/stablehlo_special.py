"""StableHLO lowerings of the special functions (``erf``, ``erfc``, ``lgamma``, ``digamma``,
``polygamma``) and of the checks (``check_labels``, ``check_cotangent``, ``check_input_shape``,
``check_same_shape``: the identity once the shapes are found to fit).

``erfc``, ``lgamma``, ``digamma`` and ``polygamma`` are CHLO ops (``chlo.erfc``,
``chlo.lgamma``, ``chlo.digamma``, ``chlo.polygamma``), which XLA expands for
every float width; float16/bfloat16 go through float32, as for ``erf``. Like
float64 ``erf``, a program holding them cannot be serialized as a portable
artifact.

StableHLO has no ``erf``. For float32 and narrower the emitter writes the
rational approximation XLA itself expands ``chlo.erf`` into for f32 (Eigen's:
``x·α(x²)/β(x²)`` on ``x`` clamped to [-4, 4], a few ulp), in plain StableHLO
ops, so the program also serializes as a portable artifact. For float64 it
writes ``chlo.erf``, which XLA and IREE expand into Cephes' f64 erf/erfc; a
portable artifact (VHLO) cannot hold ``chlo`` ops, so ``Lowered.serialize``
refuses such a program by name.
"""
from __future__ import annotations

import numpy as np

from .stablehlo import out_aval

# Eigen's generic_fast_erf_float (also XLA's ErfImpl32), highest degree first.
_ALPHA = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_BETA = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
         -1.42647390514189e-02)


def _poly(em, x, coefficients):
    """Horner's rule: ``((c0·x + c1)·x + ...)``."""
    acc = em.const(0.0, x.dtype, x.shape)
    for c in coefficients:
        acc = em.binary("stablehlo.add", em.binary("stablehlo.multiply", acc, x), em.const(c, x.dtype, x.shape))
    return acc


def _erf_f32(em, v):
    lo, hi = em.const(-4.0, v.dtype, v.shape), em.const(4.0, v.dtype, v.shape)
    x = em.op("stablehlo.clamp", [lo, v, hi], (v.dtype, v.shape))
    x2 = em.binary("stablehlo.multiply", x, x)
    num = em.binary("stablehlo.multiply", x, _poly(em, x2, _ALPHA))
    return em.binary("stablehlo.divide", num, _poly(em, x2, _BETA))


def _erf(em, node, x):
    dt, sh = out_aval(node)
    if np.dtype(dt) == np.float64:
        return em.unary("chlo.erf", em.value(x, dt, sh))
    if np.dtype(dt) == np.float32:
        return _erf_f32(em, em.value(x, dt, sh))
    # float16 / bfloat16: in float32, as XLA does
    wide = _erf_f32(em, em.value(x, np.float32, sh))
    return em.op("stablehlo.convert", [wide], (dt, sh))


def _chlo_unary(name):
    def rule(em, node, x):
        dt, sh = out_aval(node)
        if np.dtype(dt) in (np.float32, np.float64):
            return em.unary(name, em.value(x, dt, sh))
        wide = em.unary(name, em.value(x, np.float32, sh))
        return em.op("stablehlo.convert", [wide], (dt, sh))
    return rule


def _gamma_f(em, v):
    """``Γ(v) = sign · exp(lgamma(v))`` (JAX's lowering), ``±inf`` at ±0 and NaN at the negative
    integers, as scipy's."""
    dt, sh = v.dtype, v.shape
    zero, one, two = em.const(0.0, dt, sh), em.const(1.0, dt, sh), em.const(2.0, dt, sh)
    fl = em.unary("stablehlo.floor", v)
    odd = em.compare("NE", em.binary("stablehlo.remainder", fl, two), zero)
    negative_odd = em.binary("stablehlo.and", em.compare("LT", v, zero), odd)
    sign = em.select(negative_odd, em.const(-1.0, dt, sh), one)
    val = em.binary("stablehlo.multiply", sign, em.unary("stablehlo.exponential", em.unary("chlo.lgamma", v)))
    pole = em.binary("stablehlo.and", em.compare("LE", v, zero), em.compare("EQ", fl, v))
    at_pole = em.select(em.compare("EQ", v, zero), em.binary("stablehlo.divide", one, v),
                        em.const(np.nan, dt, sh))
    return em.select(pole, at_pole, val)


def _gamma(em, node, x):
    dt, sh = out_aval(node)
    if np.dtype(dt) in (np.float32, np.float64):
        return _gamma_f(em, em.value(x, dt, sh))
    return em.op("stablehlo.convert", [_gamma_f(em, em.value(x, np.float32, sh))], (dt, sh))


def _polygamma(em, node, n, x):
    """``chlo.polygamma(n, x)`` takes both operands in x's float type."""
    dt, sh = out_aval(node)
    wide = dt if np.dtype(dt) in (np.float32, np.float64) else np.dtype(np.float32)
    out = em.op("chlo.polygamma", [em.value(n, wide, sh), em.value(x, wide, sh)], (wide, sh))
    return out if wide == dt else em.op("stablehlo.convert", [out], (dt, sh))


def _check_labels(em, node, labels, n):
    """``check_labels`` (``_prims/checks.py``) cannot raise in compiled code: the identity."""
    dt, sh = out_aval(node)
    return em.value(labels, dt, sh)


def _check_cotangent(em, node, bar, arg):
    """``check_cotangent``: shapes are static here, so a mismatch is refused while compiling."""
    from .._prims.checks import cotangent_message
    dt, sh = out_aval(node)
    want = node.inputs[1].aval
    msg = cotangent_message(np.zeros(sh, dt), np.zeros(want.shape, want.dtype), **node.params)
    if msg is not None:
        from ..errors import ShapeError
        raise ShapeError(msg)
    return em.value(bar, dt, sh)


def _shape_check(em, node, first, *rest):
    """``check_input_shape``/``check_same_shape``: specialisation refuses a mismatch and drops the
    node (``_core/specialize_rules``); one that reaches the emitter is checked here, then the identity."""
    from .._prims import checks
    from ..errors import ArgumentError, ShapeError
    shapes = [a.aval.shape for a in node.inputs]
    if rest:
        msg, error = checks.same_shape_message(*shapes, **node.params), ArgumentError
    else:
        msg, error = checks.input_shape_message(shapes[0], **node.params), ShapeError
    if msg is not None:
        raise error(msg)
    dt, sh = out_aval(node)
    return em.value(first, dt, sh)


LOWERINGS = {"erf": _erf, "erfc": _chlo_unary("chlo.erfc"), "lgamma": _chlo_unary("chlo.lgamma"), "gamma": _gamma,
             "digamma": _chlo_unary("chlo.digamma"), "polygamma": _polygamma, "check_labels": _check_labels,
             "check_cotangent": _check_cotangent,
             "check_input_shape": _shape_check, "check_same_shape": _shape_check}
