"""Special functions: ``erf``, ``erfc``, ``lgamma``, ``gamma``, ``digamma`` (unary) and ``polygamma`` (binary).

The unary ones are declared through ``elementwise.unary``, so ``tnp.<name>``,
batching and the AST front end's ``scipy.special`` names follow from the
``UNARY`` table; ``polygamma(n, x)`` is an elementwise binary primitive (its
batching rule is the elementwise one, ``_ad/batching_rules.py``). Their NumPy
implementations are ``scipy.special``'s (``gammaln`` for ``lgamma``); their
StableHLO lowerings (``chlo.*``) are in ``_render/stablehlo_special.py``.

Derivatives (DLMF 7.2.1 / 7.2.2 for erf/erfc; 5.15.1 for digamma and polygamma):

* ``erf'(x) = 2/√π · exp(-x²)``, ``erfc'(x) = -2/√π · exp(-x²)``;
* ``lgamma'(x) = digamma(x)`` (``lgamma`` is ``log|Γ(x)|``, as scipy's ``gammaln``);
* ``Γ'(x) = Γ(x) digamma(x)`` (DLMF 5.2.2). ``gamma`` is a primitive so that its NumPy values are
  scipy's ``gamma`` itself: as ``sign · exp(gammaln)`` (the compiled lowering, as JAX's) it was
  4 ulp off at Γ(5) = 24 and up to ~3e-13 relative elsewhere;
* ``digamma'(x) = polygamma(1, x)``;
* ``∂/∂x polygamma(n, x) = polygamma(n + 1, x)``; the order ``n`` is an integer and gets
  no derivative (a zero cotangent and tangent, as JAX).

Values at the poles (x = 0, -1, -2, ...) are scipy's (``inf`` or ``nan``), and
so are the derivatives there; an exactly-zero cotangent still contributes 0.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ._fpstate import quiet
from .elementwise import _def_binary, add, binary, exp_p, multiply, negative, unary

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _real_float(name, x):
    """``x`` as an array of a float dtype scipy has loops for, and the dtype to return."""
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.complexfloating) or x.dtype == object:
        from ..errors import DTypeError
        raise DTypeError(f"{name}: x must be real (float, int or bool), got dtype {x.dtype}; the complex "
                         f"function is not supported (pass x.real, or use scipy.special.{name} outside tlaloc)")
    if x.dtype in (np.float32, np.float64):
        return x, x.dtype
    if _dt.is_float(x.dtype):                   # float16 / bfloat16: through float32, as scipy has no loop
        return x.astype(np.float32), x.dtype
    return x.astype(np.float64), np.dtype(np.float64)


def _scipy_unary(name, scipy_name=None):
    """``scipy.special.<scipy_name>`` keeping the input's float dtype; integers and bools give float64."""
    @quiet
    def impl(x):
        from scipy import special
        xf, dt = _real_float(name, x)
        out = getattr(special, scipy_name or name)(xf)
        return np.asarray(out).astype(dt, copy=False)
    impl.__name__ = f"_{name}_impl"
    return impl


def _gauss(x):
    return exp_p.bind(negative(multiply(x, x)))


erf_p = unary("erf", _scipy_unary("erf"), "chlo.erf", lambda x, out: multiply(_TWO_OVER_SQRT_PI, _gauss(x)))
erfc_p = unary("erfc", _scipy_unary("erfc"), "chlo.erfc", lambda x, out: multiply(-_TWO_OVER_SQRT_PI, _gauss(x)))
lgamma_p = unary("lgamma", _scipy_unary("lgamma", "gammaln"), "chlo.lgamma", lambda x, out: digamma(x))
gamma_p = unary("gamma", _scipy_unary("gamma"), "gamma", lambda x, out: multiply(out, digamma(x)))
digamma_p = unary("digamma", _scipy_unary("digamma"), "chlo.digamma", lambda x, out: polygamma(1.0, x))


@quiet
def _polygamma_impl(n, x):
    from scipy import special
    xf, dt = _real_float("polygamma", x)
    out = special.polygamma(np.asarray(n, dtype=np.float64), xf.astype(np.float64))
    return np.asarray(out).astype(dt, copy=False)


polygamma_p = binary("polygamma", _polygamma_impl, "chlo.polygamma")
_def_binary(polygamma_p, None, lambda n, x, out: polygamma(add(n, 1.0), x))


def erf(x):
    """The error function ``2/√π ∫₀ˣ exp(-t²) dt``, elementwise. Shape and float dtype: as x."""
    return erf_p.bind(x)


def erfc(x):
    """``1 - erf(x)`` without cancellation for large x, elementwise. Shape and float dtype: as x."""
    return erfc_p.bind(x)


def lgamma(x):
    """``log|Γ(x)|`` (scipy's ``gammaln``), elementwise; ``inf`` at the poles 0, -1, -2, ..."""
    return lgamma_p.bind(x)


def gamma(x):
    """``Γ(x)``, elementwise (scipy's values: ``±inf`` at ±0, NaN at the negative integers, ``inf``
    past 171.6)."""
    return gamma_p.bind(x)


def digamma(x):
    """``ψ(x) = d/dx log Γ(x)``, elementwise (scipy's values at the poles)."""
    return digamma_p.bind(x)


def polygamma(n, x):
    """``ψ⁽ⁿ⁾(x)``, the n-th derivative of ``digamma``, elementwise with broadcasting.

    ``n``: non-negative integer order (array or number); no derivative flows to it."""
    return polygamma_p.bind(n, x)
