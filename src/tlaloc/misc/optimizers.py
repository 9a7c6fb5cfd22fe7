"""autograd's loop-style optimizers (``autograd.misc.optimizers``) over pytrees.

    params = adam(tl.grad(objective), init_params, step_size=0.01, num_iters=500, callback=cb)

``grad(params, i)`` is called with the current parameters and the iteration number
``i``; ``callback(params, i, g)``, when given, sees them and the gradient before each
step. Parameters are flattened with ``ravel_pytree`` and the updates run on the
flat vector, so any pytree works. The formulas are autograd's: SGD with momentum
(``v <- mass * v - (1 - mass) g``), RMSprop with the running mean of squares started
at one, and Adam with bias correction (Kingma & Ba, 2015). For tl.optim's pure,
PyTorch-style optimizers of models, see ``tlaloc.optim``.
"""
from __future__ import annotations

import functools

import numpy as np

from .flatten import ravel_pytree

__all__ = ["sgd", "rmsprop", "adam"]


def _over_pytrees(step_loop):
    """``step_loop(flat_grad, x, callback, **options)`` on vectors, offered on pytrees."""
    @functools.wraps(step_loop)
    def optimize(grad, x0, callback=None, *args, **kwargs):
        x, unflatten = ravel_pytree(x0)

        def flat_grad(v, i):
            return ravel_pytree(grad(unflatten(v), i))[0]
        flat_callback = None if callback is None else (lambda v, i, g: callback(unflatten(v), i, unflatten(g)))
        return unflatten(step_loop(flat_grad, np.asarray(x), flat_callback, *args, **kwargs))
    return optimize


@_over_pytrees
def sgd(grad, x, callback=None, num_iters=200, step_size=0.1, mass=0.9):
    """Stochastic gradient descent with momentum ``mass``; returns the final parameters."""
    velocity = np.zeros(len(x))
    for i in range(num_iters):
        g = grad(x, i)
        if callback:
            callback(x, i, g)
        velocity = mass * velocity - (1.0 - mass) * g
        x = x + step_size * velocity
    return x


@_over_pytrees
def rmsprop(grad, x, callback=None, num_iters=100, step_size=0.1, gamma=0.9, eps=1e-8):
    """RMSprop (running mean of squared gradients with decay ``gamma``); returns the final parameters."""
    mean_square = np.ones(len(x))
    for i in range(num_iters):
        g = grad(x, i)
        if callback:
            callback(x, i, g)
        mean_square = gamma * mean_square + (1 - gamma) * g ** 2
        x = x - step_size * g / (np.sqrt(mean_square) + eps)
    return x


@_over_pytrees
def adam(grad, x, callback=None, num_iters=100, step_size=0.001, b1=0.9, b2=0.999, eps=1e-8):
    """Adam with bias-corrected moment estimates; returns the final parameters."""
    m = np.zeros(len(x))
    v = np.zeros(len(x))
    for i in range(num_iters):
        g = grad(x, i)
        if callback:
            callback(x, i, g)
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * g ** 2 + b2 * v
        m_hat = m / (1 - b1 ** (i + 1))
        v_hat = v / (1 - b2 ** (i + 1))
        x = x - step_size * m_hat / (np.sqrt(v_hat) + eps)
    return x
