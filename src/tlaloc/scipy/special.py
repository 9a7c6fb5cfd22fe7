"""``tlaloc.scipy.special``: SciPy's special functions on tlaloc's primitives.

Every function is elementwise with NumPy broadcasting unless stated; the result
has the float dtype of the inputs (integers give float64). Values equal
``scipy.special``'s (tests/scipy/test_special.py checks 1e-12 in float64).

Primitives (``_prims/special.py``, derivatives from DLMF): ``erf``, ``erfc``,
``gammaln`` (``lgamma``), ``digamma``, ``polygamma``. The rest are compositions,
so their derivatives follow from those rules. Conventions, each tested with
analytic values:

* ``xlogy(0, y) = 0`` for every y but NaN; its derivative in x is ``log(y)``
  (``-inf`` at y = 0, as JAX), in y is ``x / y`` with ``0/0 = 0`` (JAX: NaN).
  The same for ``xlog1py`` with ``log1p``.
* ``logsumexp`` of an all ``-inf`` slice is ``-inf`` with gradient 0 (JAX: NaN).
* ``log_ndtr`` stays finite in the far left tail (an asymptotic series below
  x = -30, Abramowitz & Stegun 26.2.12) and is ``-ndtr(-x)`` accurate on the
  right (``log1p``); its derivative is ``φ(x)/Φ(x)`` to rounding.
"""
from __future__ import annotations

import math

import numpy as _np

from .. import numpy as tnp
from .._prims import broadcasting as _bc
from .._prims import special as _sp
from .._prims.elementwise import safe_mul as _safe_mul
from ..errors import ArgumentError

__all__ = ["logsumexp", "expit", "logit", "gammaln", "digamma", "polygamma", "erf", "erfc", "ndtr",
           "log_ndtr", "xlogy", "xlog1py", "softmax", "log_softmax", "gamma", "beta", "betaln"]

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

erf, erfc, digamma = _sp.erf, _sp.erfc, _sp.digamma


def gammaln(x):
    """``log|Γ(x)|``; ``inf`` at 0, -1, -2, ... Derivative: ``digamma(x)``."""
    return _sp.lgamma(x)


def polygamma(n, x):
    """``ψ⁽ⁿ⁾(x)``; ``n`` a non-negative integer (or an array of them), with no derivative.

    Raises ArgumentError for a concrete non-integer or negative ``n``."""
    if not tnp._is_symbolic(n):
        arr = _np.asarray(n)
        if arr.dtype.kind not in "biuf" or _np.any(arr < 0) or _np.any(_np.floor(arr) != arr):
            raise ArgumentError(f"polygamma: n must be a non-negative integer order, got {n!r}")
    return _sp.polygamma(n, x)


def expit(x):
    """The logistic sigmoid ``1 / (1 + exp(-x))``. Derivative ``y (1 - y)``."""
    return tnp.logistic(x)


def logit(p):
    """``log(p / (1 - p))``: ``-inf`` at 0, ``inf`` at 1, NaN outside [0, 1].

    Near p = 1/2 it is ``log1p((2p - 1) / (1 - p))`` (no cancellation), elsewhere
    ``log(p / (1 - p))``. Derivative ``1 / (p (1 - p))``."""
    one_minus = tnp.subtract(1.0, p)
    mid = tnp.log1p(tnp.divide(tnp.subtract(tnp.multiply(2.0, p), 1.0), one_minus))
    tails = tnp.log(tnp.divide(p, one_minus))
    near = tnp.logical_and(tnp.greater_equal(p, 0.25), tnp.less_equal(p, 0.75))
    return tnp.where(near, mid, tails)


def xlogy(x, y):
    """``x * log(y)``, and 0 where ``x == 0`` (NaN if y is NaN). See the module's conventions."""
    return _xlog(x, y, tnp.log)


def xlog1py(x, y):
    """``x * log1p(y)``, and 0 where ``x == 0`` (NaN if y is NaN). See the module's conventions."""
    return _xlog(x, y, tnp.log1p)


def _xlog(x, y, log):
    # safe_mul: 0 · (-inf) = 0 in value and an exactly-zero x sends exactly 0 to y
    out = _safe_mul(x, log(y))
    return tnp.where(tnp.isnan(y), tnp.add(y, tnp.multiply(x, 0.0)), out)


def ndtr(x):
    """The standard normal CDF ``Φ(x) = ½ erfc(-x/√2)``, as Cephes (scipy) computes it:
    ``½ + ½ erf(x/√2)`` for ``|x| < 1``, else from ``erfc``. Derivative ``φ(x)``."""
    t = tnp.multiply(x, _SQRT1_2)
    small = tnp.less(tnp.abs(t), _SQRT1_2)
    central = tnp.add(0.5, tnp.multiply(0.5, _sp.erf(t)))
    right = tnp.subtract(1.0, tnp.multiply(0.5, _sp.erfc(t)))
    left = tnp.multiply(0.5, _sp.erfc(tnp.negative(t)))
    return tnp.where(small, central, tnp.where(tnp.greater(t, 0.0), right, left))


def _log_ndtr_series(x):
    """``log Φ(x)`` for x ≤ -30 (A&S 26.2.12): ``-x²/2 - log(-x) - ½log 2π + log(1 + Σ_k (-1)^k (2k-1)!!/x^{2k})``
    with 8 terms; the first omitted term is below 5e-18 there."""
    y = tnp.reciprocal(tnp.multiply(x, x))
    acc, term = 1.0, 1.0
    for k in range(1, 9):
        term = tnp.multiply(term, tnp.multiply(-(2 * k - 1.0), y))
        acc = tnp.add(acc, term)
    return tnp.subtract(tnp.subtract(tnp.multiply(-0.5, tnp.multiply(x, x)), tnp.log(tnp.negative(x))),
                        tnp.subtract(_HALF_LOG_2PI, tnp.log(acc)))


def log_ndtr(x):
    """``log Φ(x)``, accurate in both tails: ``log1p(-Φ(-x))`` for x > 0, ``log Φ(x)`` for
    -30 < x ≤ 0 and an asymptotic series below (finite for every finite x)."""
    # the series is evaluated at x clipped to ≤ -30 so that its unused values stay finite; a
    # select, not minimum, so that x = -30 itself gets the whole gradient (minimum splits ties)
    series = _log_ndtr_series(tnp.where(tnp.less_equal(x, -30.0), x, -30.0))
    middle = tnp.log(ndtr(x))
    right = tnp.log1p(tnp.negative(ndtr(tnp.negative(x))))
    return tnp.where(tnp.greater(x, 0.0), right, tnp.where(tnp.greater(x, -30.0), middle, series))


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``log Σ b·exp(a)`` over ``axis`` (all axes by default), stabilised by the maximum.

    Args:
      a: array (..., ); ``b``: weights broadcastable to ``a`` (may be negative).
      axis: None, an int or a tuple of ints. keepdims: as NumPy.
      return_sign: also return the sign of the sum; the result is then ``log|Σ|``.
    Returns: the reduced array (``(result, sign)`` with ``return_sign``). An all ``-inf``
      slice gives ``-inf`` and a zero gradient. Without ``return_sign`` a negative sum is NaN, as SciPy.
    Derivative: ``b·exp(a - result)`` (the softmax weights).
    """
    m = tnp.stop_gradient(tnp.max(a, axis, keepdims=True))
    m = tnp.where(tnp.isfinite(m), m, 0.0)
    e = tnp.exp(tnp.subtract(a, m))
    if b is not None:
        e = tnp.multiply(b, e)
    s = tnp.sum(e, axis, keepdims=True)
    out = tnp.add(tnp.log(tnp.abs(s) if return_sign else s), m)
    sign = tnp.sign(s)
    if not keepdims:
        out = _drop(out, a, axis)
        sign = _drop(sign, a, axis)
    return (out, sign) if return_sign else out


def _drop(v, like, axis):
    return _bc.reshape_like(v, tnp.sum(like, axis)) if axis is not None else tnp.reshape(v, ())


def softmax(x, axis=None):
    """``exp(x) / Σ exp(x)`` over ``axis`` (all axes by default, as SciPy); shape of x."""
    m = tnp.stop_gradient(tnp.max(x, axis, keepdims=True))
    e = tnp.exp(tnp.subtract(x, m))
    return tnp.divide(e, tnp.sum(e, axis, keepdims=True))


def log_softmax(x, axis=None):
    """``x - logsumexp(x)`` over ``axis`` (all axes by default, as SciPy); shape of x."""
    m = tnp.stop_gradient(tnp.max(x, axis, keepdims=True))
    s = tnp.subtract(x, m)
    return tnp.subtract(s, tnp.log(tnp.sum(tnp.exp(s), axis, keepdims=True)))


def _gamma_sign(x):
    """The sign of Γ(x): +1 for x > 0; (-1)^⌈-x⌉ between the poles."""
    fl = tnp.floor(x)
    odd = tnp.not_equal(tnp.remainder(fl, 2.0), 0.0)
    return tnp.where(tnp.logical_and(tnp.less(x, 0.0), odd), -1.0, 1.0)


def gamma(x):
    """``Γ(x)``: SciPy's values (``±inf`` at ±0, NaN at negative integers, ``inf`` past 171.6).
    Derivative ``Γ(x) ψ(x)``. Compiled, ``sign · exp(gammaln(x))``, as JAX computes it."""
    return _sp.gamma(x)


def betaln(a, b):
    """``log|B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b)``."""
    return tnp.subtract(tnp.add(_sp.lgamma(a), _sp.lgamma(b)), _sp.lgamma(tnp.add(a, b)))


def beta(a, b):
    """``B(a, b) = Γ(a)Γ(b)/Γ(a+b)``, as ``sign · exp(betaln(a, b))``.

    Where ``a + b`` is a non-positive integer (and a, b are not) B is 0, and its derivative there
    comes out as 0 although the true one is finite: avoid differentiating at those points."""
    sign = tnp.multiply(tnp.multiply(_gamma_sign(a), _gamma_sign(b)), _gamma_sign(tnp.add(a, b)))
    return tnp.multiply(sign, tnp.exp(betaln(a, b)))
