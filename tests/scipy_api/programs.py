"""User programs written against SciPy itself (the front end maps them onto tlaloc.scipy).

Each ``<name>(x)`` is elementwise in ``x``; ``<name>_sum`` is its sum (for grad)."""
import numpy as np
import scipy.special
import scipy.linalg
from scipy.special import logsumexp, xlogy
from scipy.stats import norm, t, gamma, beta, poisson, multivariate_normal, dirichlet
from scipy.linalg import cho_factor, cho_solve


def expit(x): return scipy.special.expit(x)
def logit(x): return scipy.special.logit(x)
def gammaln(x): return scipy.special.gammaln(x)
def digamma(x): return scipy.special.digamma(x)
def polygamma1(x): return scipy.special.polygamma(1, x)
def polygamma3(x): return scipy.special.polygamma(3, x)
def erf(x): return scipy.special.erf(x)
def erfc(x): return scipy.special.erfc(x)
def ndtr(x): return scipy.special.ndtr(x)
def log_ndtr(x): return scipy.special.log_ndtr(x)
def xlogy_x(x): return xlogy(x, 2.5)
def xlogy_y(x): return xlogy(1.5, x)
def xlog1py_x(x): return scipy.special.xlog1py(x, 0.5)
def xlog1py_y(x): return scipy.special.xlog1py(-2.0, x)
def gamma_fn(x): return scipy.special.gamma(x)
def beta_a(x): return scipy.special.beta(x, 2.5)
def betaln_b(x): return scipy.special.betaln(0.7, x)
def softmax(x): return scipy.special.softmax(x)
def log_softmax(x): return scipy.special.log_softmax(x)
def logsumexp_all(x): return logsumexp(x) * np.ones(1)
def logsumexp_b(x): return logsumexp(x, b=B5) * np.ones(1)


B5 = np.linspace(0.5, 2.0, 5)
# scipy.stats
def norm_logpdf(x): return norm.logpdf(x, 0.3, 1.7)
def norm_pdf(x): return norm.pdf(x, loc=0.3, scale=1.7)
def norm_cdf(x): return norm.cdf(x, loc=-0.2, scale=0.8)
def norm_logcdf(x): return norm.logcdf(x, 0.1, 1.3)
def norm_scale(x): return norm.logpdf(0.4, 0.1, x)
def t_logpdf(x): return t.logpdf(x, 3.5, 0.2, 1.4)
def t_df(x): return t.logpdf(0.7, x)
def gamma_logpdf(x): return gamma.logpdf(x, 2.5, scale=1.5)
def gamma_a(x): return gamma.logpdf(1.3, x)
def beta_logpdf(x): return beta.logpdf(x, 2.5, 1.5)
def beta_ab(x): return beta.logpdf(0.3, x, 2.0 * x)
def poisson_logpmf(x): return poisson.logpmf(3, x)
def poisson_pmf(x): return poisson.pmf(4.0, x)
def frozen_norm(x): return norm(0.5, 2.0).logpdf(x)


def sum_of(fn):
    def total(x):
        return fn(x).sum()
    return total


def frozen_norm_of_params(theta, x):
    return norm(theta[0], theta[1]).logpdf(x).sum()        # loc and scale are arrays being differentiated
