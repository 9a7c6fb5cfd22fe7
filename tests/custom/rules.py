"""Custom-rule functions for the tests, each with a JAX twin (float64 oracle).

Kept in their own module: tlaloc reads their source, and the JAX twins state
the same rules with ``jax.custom_vjp`` / ``jax.custom_jvp``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import tlaloc as tl
import tlaloc.numpy as tnp
from tlaloc.typing import F64

jax.config.update("jax_enable_x64", True)


# -- a rule that is deliberately not the derivative (the seed's example) -------------------------

@tl.custom_vjp
def clipped_square(t):
    return t * t


def clipped_square_fwd(t):
    return clipped_square(t), t


def clipped_square_bwd(t, u):
    return (u * 3.0,)            # not 2t: the rule wins


clipped_square.defvjp(clipped_square_fwd, clipped_square_bwd)


@tl.custom_jvp
def tripled_square(t):
    return t * t


@tripled_square.defjvp
def _tripled_square_jvp(primals, tangents):
    return primals[0] * primals[0], tangents[0] * 3.0     # not 2t·ṫ: the rule wins


def sum_clipped_square(x):
    return clipped_square(x).sum()


def sum_plain_square(x):
    return (x * x).sum()


# -- a correct reverse rule: a numerically stable log(1 + exp(x)) ----------------------------------

@tl.custom_vjp
def softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)


def softplus_fwd(x):
    return softplus(x), x


def softplus_bwd(x, g):
    return (g * tnp.sigmoid(x),)


softplus.defvjp(softplus_fwd, softplus_bwd)


@jax.custom_vjp
def softplus_jax(x):
    return jnp.log1p(jnp.exp(-jnp.abs(x))) + jnp.maximum(x, 0.0)


softplus_jax.defvjp(lambda x: (softplus_jax(x), x), lambda x, g: (g * jax.nn.sigmoid(x),))


def softplus_loss(x, w):
    return (softplus(x * w) * w).sum()


def softplus_loss_jax(x, w):
    return (softplus_jax(x * w) * w).sum()


# -- a forward rule: x * sin(x) with its derivative written by hand ----------------------------------

@tl.custom_jvp
def xsin(x):
    return x * np.sin(x)


@xsin.defjvp
def xsin_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return xsin(x), t * (np.sin(x) + x * np.cos(x))


@jax.custom_jvp
def xsin_jax(x):
    return x * jnp.sin(x)


@xsin_jax.defjvp
def _xsin_jax_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return xsin_jax(x), t * (jnp.sin(x) + x * jnp.cos(x))


def xsin_loss(x):
    return (xsin(x) * x).sum()


def xsin_loss_jax(x):
    return (xsin_jax(x) * x).sum()


# -- both rules: a two-argument function --------------------------------------------------------------

def _scaled_exp(x, a):
    return np.exp(a * x)


def _scaled_exp_fwd(x, a):
    y = np.exp(a * x)
    return y, (x, a, y)


def _scaled_exp_bwd(res, g):
    x, a, y = res
    return (g * a * y, (g * x * y).sum())


def _scaled_exp_jvp(primals, tangents):
    (x, a), (tx, ta) = primals, tangents
    y = np.exp(a * x)
    return y, y * (a * tx + ta * x)


scaled_exp = tl.custom_vjp_jvp(_scaled_exp, fwd=_scaled_exp_fwd, bwd=_scaled_exp_bwd, jvp=_scaled_exp_jvp)


@jax.custom_vjp
def scaled_exp_jax(x, a):
    return jnp.exp(a * x)


def _sej_fwd(x, a):
    y = jnp.exp(a * x)
    return y, (x, a, y)


def _sej_bwd(res, g):
    x, a, y = res
    return (g * a * y, (g * x * y).sum())


scaled_exp_jax.defvjp(_sej_fwd, _sej_bwd)


def scaled_exp_loss(x, a):
    return (scaled_exp(x, a) * x).sum()


def scaled_exp_loss_jax(x, a):
    return (scaled_exp_jax(x, a) * x).sum()


# -- rules inside control flow --------------------------------------------------------------------------

def in_for_loop(x, w):
    y = x
    for i in range(3):
        y = softplus(y * w) - 0.5
    return (y * y).sum()


def in_for_loop_jax(x, w):
    y = x
    for i in range(3):
        y = softplus_jax(y * w) - 0.5
    return (y * y).sum()


def in_while_loop(x):
    y = x
    while y.sum() < 20.0:
        y = xsin(y) * 0.1 + y * 1.5
    return (y * y).sum()


def in_while_loop_jax(x):
    def cond(y):
        return y.sum() < 20.0

    def body(y):
        return xsin_jax(y) * 0.1 + y * 1.5
    y = jax.lax.while_loop(cond, body, x)
    return (y * y).sum()


def in_branch(x, w):
    if (x * w).sum() > 0.0:
        y = softplus(x * w)
    else:
        y = -xsin(x)
    return (y * x).sum()


def in_branch_jax(x, w):
    return jax.lax.cond((x * w).sum() > 0.0,
                        lambda: (softplus_jax(x * w) * x).sum(),
                        lambda: (-xsin_jax(x) * x).sum())


def fwd_rules_in_branch(x, a):
    if (x * a).sum() > 0.0:
        y = xsin(x) * a
    else:
        y = scaled_exp(x, a)
    return (y * x).sum()


def fwd_rules_in_branch_jax(x, a):
    return jax.lax.cond((x * a).sum() > 0.0,
                        lambda: (xsin_jax(x) * a * x).sum(),
                        lambda: (scaled_exp_jax(x, a) * x).sum())


def both_in_loop(x, a):
    y = x
    for i in range(2):
        y = scaled_exp(y, a) * 0.5
    return y.sum()


def both_in_loop_jax(x, a):
    y = x
    for i in range(2):
        y = scaled_exp_jax(y, a) * 0.5
    return y.sum()


# -- edge cases ----------------------------------------------------------------------------------------

W = np.array([0.5, -1.5, 2.0])


@tl.custom_vjp
def weighted(x):
    return x * W                     # W is a global array: a constant of the rule


def _weighted_fwd(x):
    return x * W, None


def _weighted_bwd(res, g):
    return (g * W,)


weighted.defvjp(_weighted_fwd, _weighted_bwd)


@tl.custom_vjp
def weighted_stop(x):
    return x * W


def _weighted_stop_fwd(x):
    return x * W, None


def _weighted_stop_bwd(res, g):
    return (g * 0.0,)                # a stop-gradient: deliberately not the derivative


weighted_stop.defvjp(_weighted_stop_fwd, _weighted_stop_bwd)


@tl.custom_vjp
def only_first(x, y):
    return x * y


def _only_first_fwd(x, y):
    return x * y, y


def _only_first_bwd(y, g):
    return (g * y, None)             # None: no cotangent for y


only_first.defvjp(_only_first_fwd, _only_first_bwd)


@tl.custom_vjp
def no_rule(x):
    return x * 2.0


def uses_no_rule(x):
    return no_rule(x).sum()          # REFUSE: no rule


@tl.custom_vjp
def bad_fwd(x):
    return x * 2.0


def _bad_fwd_fwd(x):
    return x * 2.0                   # not (out, residuals)


def _bad_fwd_bwd(res, g):
    return (g,)


bad_fwd.defvjp(_bad_fwd_fwd, _bad_fwd_bwd)


def uses_bad_fwd(x):
    return bad_fwd(x).sum()          # REFUSE: bad fwd


@tl.custom_vjp
def scale_rows(w, x):
    return w * x


def _scale_rows_fwd(w, x):
    return w * x, (w, x)


def _scale_rows_bwd(res, g):
    w, x = res
    return (x * g, w * g)            # w's cotangent keeps the batch axis: wrong shape


scale_rows.defvjp(_scale_rows_fwd, _scale_rows_bwd)


def uses_bad_shape(w: F64["n"], x: F64["batch", "n"]):
    return scale_rows(w, x).sum()    # REFUSE: bad shape


def stop_gradient_program(x):
    y = tl.stop_gradient(x * x)
    return (y * x + x).sum()


def stop_gradient_program_jax(x):
    y = jax.lax.stop_gradient(x * x)
    return (y * x + x).sum()
