"""``tlaloc.scipy.stats``: the distributions real programs call, as SciPy spells them.

``norm.logpdf(x, loc=0, scale=1)``, ``t.logpdf(x, df, loc, scale)``,
``gamma.logpdf(x, a, loc, scale)``, ``beta.logpdf(x, a, b, loc, scale)``,
``poisson.logpmf(k, mu, loc=0)``, ``multivariate_normal.logpdf(x, mean, cov)``,
``dirichlet.logpdf(x, alpha)``; each with its ``pdf``/``pmf`` (``exp`` of the
log) and, where SciPy's value is a closed form of our primitives, ``cdf``/``logcdf``
(``norm``). Arguments broadcast elementwise; the result has the float dtype of
the inputs. Outside the support the log density is ``-inf`` and a non-positive
``scale`` gives NaN, as SciPy. A method SciPy has but tlaloc does not compute
(``t.cdf`` needs the incomplete beta function) raises ``NoRuleError`` naming it.

Derivatives follow from the closed forms (``gammaln``, ``xlogy``, ``log_ndtr``,
Cholesky solves: ``tlaloc/scipy/special.py`` and ``_prims/decompositions.py``).
"""
from __future__ import annotations

import math

from .. import numpy as tnp
from ..errors import NoRuleError
from .._prims import decompositions as _dec
from . import linalg as _linalg
from . import special as _s

__all__ = ["norm", "t", "gamma", "beta", "poisson", "multivariate_normal", "dirichlet"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _standardize(x, loc, scale):
    return tnp.divide(tnp.subtract(x, loc), scale)


def _scaled(logp, scale):
    """``logp - log(scale)``, NaN where ``scale <= 0`` (SciPy's invalid-parameter value)."""
    out = tnp.subtract(logp, tnp.log(scale))
    return tnp.where(tnp.greater(scale, 0.0), out, tnp.multiply(out, float("nan")))


class _Distribution:
    """Shared ``pdf = exp(logpdf)`` and refusals of what SciPy has and tlaloc does not compute."""
    name = "?"
    missing: dict = {}

    def pdf(self, *args, **kwargs):
        return tnp.exp(self.logpdf(*args, **kwargs))

    def __call__(self, *args, **kwargs):
        """A frozen distribution, as ``scipy.stats.norm(loc, scale)``: ``rv.logpdf(x)``."""
        return _Frozen(self, args, kwargs)

    def __getattr__(self, attr):
        why = type(self).missing.get(attr)
        if why is not None:
            raise NoRuleError(f"scipy.stats.{self.name}.{attr} is not supported by tlaloc: {why}")
        raise AttributeError(f"tlaloc.scipy.stats.{self.name} has no attribute {attr!r}")

    def __repr__(self):
        return f"<tlaloc.scipy.stats.{self.name}>"


class _Norm(_Distribution):
    """The normal distribution N(loc, scale²)."""
    name = "norm"
    missing = {"ppf": "it needs the inverse normal CDF (ndtri); write it with tl.custom_vjp"}

    def logpdf(self, x, loc=0.0, scale=1.0):
        """``-z²/2 - log(scale) - ½ log 2π`` with ``z = (x - loc)/scale``."""
        z = _standardize(x, loc, scale)
        return _scaled(tnp.subtract(tnp.multiply(-0.5, tnp.multiply(z, z)), _HALF_LOG_2PI), scale)

    def cdf(self, x, loc=0.0, scale=1.0):
        return _valid(_s.ndtr(_standardize(x, loc, scale)), scale)

    def logcdf(self, x, loc=0.0, scale=1.0):
        return _valid(_s.log_ndtr(_standardize(x, loc, scale)), scale)

    def sf(self, x, loc=0.0, scale=1.0):
        return _valid(_s.ndtr(tnp.negative(_standardize(x, loc, scale))), scale)

    def logsf(self, x, loc=0.0, scale=1.0):
        return _valid(_s.log_ndtr(tnp.negative(_standardize(x, loc, scale))), scale)


class _Frozen:
    """``dist(*params)``: each method takes the point only (``rv.logpdf(x)``)."""

    def __init__(self, dist, args, kwargs):
        self.dist, self.args, self.kwargs = dist, args, kwargs

    def __getattr__(self, attr):
        method = getattr(self.dist, attr)

        def bound(x):
            return method(x, *self.args, **self.kwargs)
        bound.__name__ = attr
        return bound


def _without_cdf(needs):
    """``missing`` for a distribution whose CDF family (cdf, logcdf, sf, logsf, ppf) needs
    ``needs``, a function tlaloc lacks."""
    return {m: f"it needs {needs}" for m in ("cdf", "logcdf", "sf", "logsf", "ppf")}


def _valid(v, scale):
    return tnp.where(tnp.greater(scale, 0.0), v, tnp.multiply(v, float("nan")))


class _T(_Distribution):
    """Student's t with ``df`` degrees of freedom."""
    name = "t"
    missing = _without_cdf("the regularized incomplete beta function (betainc)")

    def logpdf(self, x, df, loc=0.0, scale=1.0):
        """``lgamma((ν+1)/2) - lgamma(ν/2) - ½log(νπ) - (ν+1)/2 · log1p(z²/ν) - log(scale)``."""
        z = _standardize(x, loc, scale)
        half = tnp.multiply(0.5, tnp.add(df, 1.0))
        norm_c = tnp.subtract(tnp.subtract(_s.gammaln(half), _s.gammaln(tnp.multiply(0.5, df))),
                              tnp.multiply(0.5, tnp.log(tnp.multiply(df, math.pi))))
        return _scaled(tnp.subtract(norm_c, tnp.multiply(half, tnp.log1p(tnp.divide(tnp.multiply(z, z), df)))),
                       scale)


class _Gamma(_Distribution):
    """The gamma distribution with shape ``a``: density ``z^(a-1) e^(-z) / Γ(a)`` on z ≥ 0."""
    name = "gamma"
    missing = _without_cdf("the regularized incomplete gamma function (gammainc)")

    def logpdf(self, x, a, loc=0.0, scale=1.0):
        z = _standardize(x, loc, scale)
        inside = tnp.subtract(tnp.subtract(_s.xlogy(tnp.subtract(a, 1.0), z), z), _s.gammaln(a))
        return _scaled(tnp.where(tnp.greater_equal(z, 0.0), inside, -float("inf")), scale)


class _Beta(_Distribution):
    """The beta distribution: density ``z^(a-1) (1-z)^(b-1) / B(a, b)`` on 0 ≤ z ≤ 1."""
    name = "beta"
    missing = _without_cdf("the regularized incomplete beta function (betainc)")

    def logpdf(self, x, a, b, loc=0.0, scale=1.0):
        z = _standardize(x, loc, scale)
        inside = tnp.subtract(tnp.add(_s.xlogy(tnp.subtract(a, 1.0), z),
                                      _s.xlog1py(tnp.subtract(b, 1.0), tnp.negative(z))), _s.betaln(a, b))
        ok = tnp.logical_and(tnp.greater_equal(z, 0.0), tnp.less_equal(z, 1.0))
        return _scaled(tnp.where(ok, inside, -float("inf")), scale)


class _Poisson(_Distribution):
    """The Poisson distribution: ``log p(k) = k log μ - μ - lgamma(k + 1)`` on k = 0, 1, 2, ..."""
    name = "poisson"
    missing = _without_cdf("the regularized incomplete gamma function (gammaincc)")

    def logpmf(self, k, mu, loc=0):
        """``-inf`` off the integers ≥ 0; differentiable in ``mu`` (``k/μ - 1``), not in ``k``."""
        kk = tnp.subtract(k, loc)
        val = tnp.subtract(tnp.subtract(_s.xlogy(kk, mu), mu), _s.gammaln(tnp.add(kk, 1.0)))
        ok = tnp.logical_and(tnp.greater_equal(kk, 0.0), tnp.equal(tnp.floor(kk), kk))
        return tnp.where(ok, val, -float("inf"))

    def pmf(self, k, mu, loc=0):
        return tnp.exp(self.logpmf(k, mu, loc))


class _MultivariateNormal(_Distribution):
    """N(mean, cov) in d dimensions."""
    name = "multivariate_normal"
    missing = {m: "it needs numerical integration (Genz's algorithm)" for m in ("cdf", "logcdf")}

    def logpdf(self, x, mean=None, cov=1.0):
        """``-½ (d log 2π + log det cov + (x-μ)ᵀ cov⁻¹ (x-μ))`` through the Cholesky factor.

        Args:
          x: ``(d,)`` or ``(n, d)``; mean: ``(d,)`` (default 0); cov: ``(d, d)`` SPD,
            a ``(d,)`` diagonal or a number (times the identity).
        Returns: a scalar for ``(d,)``, ``(n,)`` for ``(n, d)``, as SciPy.
        Derivatives: through ``cholesky`` (Murray 2016) and ``triangular_solve``.
        """
        diff = x if mean is None else tnp.subtract(x, mean)
        cov_rank = 2 if tnp._is_symbolic(cov) and cov.aval.rank is None else tnp.ndim(cov)
        if cov_rank < 2:                   # a number (times the identity) or the diagonal
            var = tnp.add(tnp.multiply(diff, 0.0), cov)
            maha = tnp.sum(tnp.divide(tnp.multiply(diff, diff), var), axis=-1)
            logdet = tnp.sum(tnp.log(var), axis=-1)
            d = tnp.sum(tnp.add(tnp.multiply(var, 0.0), 1.0), axis=-1)
        else:
            L = tnp.linalg.cholesky(cov)
            eye = _linalg.identity_like(cov)
            Linv = _dec.triangular_solve(L, eye, True, False)
            z = tnp.matmul(diff, tnp.transpose(Linv))        # (..., d): L⁻¹ (x - μ) per point
            maha = tnp.sum(tnp.multiply(z, z), axis=-1)
            logdet = tnp.multiply(2.0, tnp.sum(tnp.log(tnp.diagonal(L))))
            d = tnp.trace(eye)
        return tnp.multiply(-0.5, tnp.add(tnp.add(maha, logdet), tnp.multiply(d, 2.0 * _HALF_LOG_2PI)))


class _Dirichlet(_Distribution):
    """The Dirichlet distribution with concentration ``alpha`` (k,)."""
    name = "dirichlet"

    def logpdf(self, x, alpha):
        """``Σ (αᵢ-1) log xᵢ - (Σ lgamma(αᵢ) - lgamma(Σ αᵢ))``.

        x: ``(k,)`` or ``(k, n)`` (components on the FIRST axis, as SciPy); returns a scalar or ``(n,)``.
        Concrete x off the simplex raises ArgumentError (SciPy raises ValueError)."""
        _check_simplex(x)
        norm_c = tnp.subtract(tnp.sum(_s.gammaln(alpha)), _s.gammaln(tnp.sum(alpha)))
        # xᵀ is (k,) or (n, k): alpha broadcasts along the components without reading x's rank
        return tnp.subtract(tnp.sum(_s.xlogy(tnp.subtract(alpha, 1.0), tnp.transpose(x)), axis=-1), norm_c)


def _check_simplex(x):
    if tnp._is_symbolic(x):
        return
    import numpy as np
    from ..errors import ArgumentError
    arr = np.asarray(x, dtype=np.float64)
    if np.any(arr < 0) or np.any(np.abs(arr.sum(axis=0) - 1.0) > 1e-9):
        raise ArgumentError("dirichlet.logpdf: x must lie on the simplex (entries >= 0, each column "
                            "summing to 1 along the first axis)")


norm, t, gamma, beta, poisson = _Norm(), _T(), _Gamma(), _Beta(), _Poisson()
multivariate_normal, dirichlet = _MultivariateNormal(), _Dirichlet()
