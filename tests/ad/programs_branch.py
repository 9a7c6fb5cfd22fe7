"""Programs that branch on array values (if/elif/else, boolean operators, the
conditional expression, tuples assigned in branches) for the reverse-mode
table, each next to its JAX twin.

JAX's eager ``jax.grad`` runs Python control flow on concrete values, so the
twins are the same code over ``jax.numpy``: an independent derivative of the
same program. ``cases.py`` sweeps both sides of each branch point.
"""
import jax.numpy as jnp
import numpy as np


# -- if / elif / else on array values -----------------------------------------------

def f_if_else(x):
    if x.sum() > 0:
        y = x * 2.0 + x ** 2
    else:
        y = -x ** 3
    return (y * x).sum()


def j_if_else(x):
    if x.sum() > 0:
        y = x * 2.0 + x ** 2
    else:
        y = -x ** 3
    return (y * x).sum()


def f_if_elif_else(x, w):
    t = x @ w
    if t > 1.0:
        r = t * t
    elif t > -1.0:
        r = np.sin(t) * x[0]
    else:
        r = np.exp(t) + w[1]
    return r


def j_if_elif_else(x, w):
    t = x @ w
    if t > 1.0:
        r = t * t
    elif t > -1.0:
        r = jnp.sin(t) * x[0]
    else:
        r = jnp.exp(t) + w[1]
    return r


def f_if_no_else(x):
    y = x * 1.0
    if x[0] > x[1]:
        y = y * x[0]
    return (y * y).sum()


def j_if_no_else(x):
    y = x * 1.0
    if x[0] > x[1]:
        y = y * x[0]
    return (y * y).sum()


def f_nested_if(x, y):
    s = x.sum()
    if s > 0:
        if y.sum() > 0:
            out = s * y.sum()
        else:
            out = s - (y * y).sum()
    else:
        if x[0] < y[0]:
            out = (x * y).sum()
        else:
            out = s * s
    return out


def j_nested_if(x, y):
    s = x.sum()
    if s > 0:
        if y.sum() > 0:
            out = s * y.sum()
        else:
            out = s - (y * y).sum()
    else:
        if x[0] < y[0]:
            out = (x * y).sum()
        else:
            out = s * s
    return out


def f_if_boolops(x):
    # `and`, `or`, `not` and a chained comparison on array scalars
    a = x[0]
    if a > 0 and x[1] > 0:
        r = a * x[1]
    elif not (a > -0.5) or x[1] < -1.0:
        r = a * a * a
    elif -0.5 < a < 0.5:
        r = np.exp(a)
    else:
        r = x.sum()
    return r


def j_if_boolops(x):
    a = x[0]
    if a > 0 and x[1] > 0:
        r = a * x[1]
    elif not (a > -0.5) or x[1] < -1.0:
        r = a * a * a
    elif -0.5 < a < 0.5:
        r = jnp.exp(a)
    else:
        r = x.sum()
    return r


def f_if_ifexp(x):
    # the conditional expression `a if c else b` on an array condition
    y = x * x if x.sum() > 0 else x * 3.0
    return y.sum()


def j_if_ifexp(x):
    y = x * x if x.sum() > 0 else x * 3.0
    return y.sum()


def f_branch_tuple(x):
    # the branches assign tuples with the same structure
    if x.sum() > 0:
        p = (x * 2.0, x[0])
    else:
        p = (x * x, x[1])
    return (p[0] * p[1]).sum()


def j_branch_tuple(x):
    if x.sum() > 0:
        p = (x * 2.0, x[0])
    else:
        p = (x * x, x[1])
    return (p[0] * p[1]).sum()
