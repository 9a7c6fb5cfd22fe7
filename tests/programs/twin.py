"""Oracles for the program suite: the same source run by autograd, and central differences.

``autograd_twin(fn)`` rebuilds ``fn`` (and every function of its module it
calls) with ``np`` bound to ``autograd.numpy``: one source, two independent
differentiators. Float64 throughout.
"""
import types

import autograd.numpy as anp
import autograd.scipy.special as asp_special
import numpy as np


def autograd_twin(fn):
    import sys
    module = sys.modules[fn.__module__]
    g = dict(vars(module))
    g["np"] = anp
    if "logsumexp" in g:
        g["logsumexp"] = asp_special.logsumexp
    for name, v in list(g.items()):
        if isinstance(v, types.FunctionType) and v.__module__ == module.__name__:
            g[name] = types.FunctionType(v.__code__, g, v.__name__, v.__defaults__, v.__closure__)
    return g[fn.__name__]


def central_differences(f, args, argnum, h=1e-6):
    """d f / d args[argnum] by central differences (f64, step h)."""
    x = np.asarray(args[argnum], dtype=np.float64)
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        ap, am = list(args), list(args)
        ap[argnum], am[argnum] = xp, xm
        out[idx] = (f(*ap) - f(*am)) / (2 * h)
    return out
