"""Programs that use SciPy, ``np.roll``, classes and context managers (issue 14)."""
import warnings

import numpy as np
import scipy.special
import scipy.stats


# -- fluid simulation with np.roll (periodic advection-diffusion) -------------------------------
def fluid_step(density, vx, dt):
    n = density.shape[0]
    lap = (np.roll(density, 1, axis=0) + np.roll(density, -1, axis=0) + np.roll(density, 1, axis=1)
           + np.roll(density, -1, axis=1) - 4 * density)
    advect = vx * (np.roll(density, -1, axis=1) - np.roll(density, 1, axis=1)) / (2.0 / n)
    return density + dt * (0.1 * lap - advect)


def fluid_loss(vx, density0):
    d = density0
    for _ in range(5):
        d = fluid_step(d, vx, 0.01)
    return np.sum(d[: d.shape[0] // 2] ** 2)


# -- mixture model with scipy.stats and scipy.special.logsumexp ---------------------------------
def mixture_nll(params, data):
    k = len(params) // 3
    log_w = params[:k] - scipy.special.logsumexp(params[:k])
    means, stds = params[k:2 * k], np.exp(params[2 * k:])
    log_pdf = scipy.stats.norm.logpdf(data[:, None], means, stds)
    return -np.sum(scipy.special.logsumexp(log_w + log_pdf, axis=1))


# -- a class with a validating, counting evaluate(self, x, *args) -------------------------------
class Rosenbrock:
    def __init__(self, ndim):
        self.ndim = ndim
        self.n_calls = 0

    def evaluate(self, x, *args):
        if len(x) != self.ndim:
            raise ValueError(f"Rosenbrock expects {self.ndim} values, got {len(x)}")
        self.n_calls += 1
        return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def minimise_step(x, problem):
    return problem.evaluate(x, "extra", 2) * 0.5


# -- numeric code in np.errstate / warnings.catch_warnings --------------------------------------
def safe_entropy(p):
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.log(p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = p / np.sum(p)
    return -np.sum(q * logp)


# -- validation with assert and print at call time ----------------------------------------------
def checked_loss(w, x):
    assert x.ndim == 2, "x must be a matrix"
    n, d = x.shape
    assert len(w) == d
    return np.sum(np.dot(x, w) ** 2) / n
