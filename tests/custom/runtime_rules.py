"""custom_vjp rules whose bwd returns a wrong cotangent only visible at run time (no annotations)."""
import numpy as np

import tlaloc as tl


@tl.custom_vjp
def scale(w, x):
    return w * x


def _scale_fwd(w, x):
    return w * x, (w, x)


def _scale_bwd(res, g):
    w, x = res
    return (x * g, w * g)            # w's cotangent keeps x's batch axis when w is broadcast: wrong shape


scale.defvjp(_scale_fwd, _scale_bwd)


def uses_scale(w, x):
    return scale(w, x).sum()


@tl.custom_vjp
def halve(x):
    return x * 0.5


def _halve_fwd(x):
    return x * 0.5, ()


def _halve_bwd(res, g):
    return (g.astype(np.float64) * 0.5,)    # wrong dtype for a float32 argument


halve.defvjp(_halve_fwd, _halve_bwd)


def uses_halve(x):
    return halve(x).sum()


def uses_halve_jax(x):
    return (x * 0.5).sum()
