"""``elementwise_grad`` and ``hessian_vector_product``: autograd's names, built on tlaloc's transforms.

autograd programs port to tlaloc by changing imports only; these two names are
the ones its examples import besides ``grad`` and ``value_and_grad`` (which take
autograd's ``argnum=`` spelling directly). Each is a composition of public
transforms, so it differentiates exactly what ``tl.vjp`` / ``tl.jvp`` do.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOATS
from ..errors import ArgumentError
from .api import _normalize_argnums, grad, vjp
from .forward_api import jvp


def _one_argnum(name, argnum, n_args):
    (a,), single = _normalize_argnums(argnum, name)
    if not single:
        raise ArgumentError(f"{name}: argnum must be one int, got {argnum!r}")
    if not -n_args <= a < n_args:
        raise ArgumentError(f"{name}: argnum={a} but the call passed {n_args} positional arguments")
    return a % n_args


def elementwise_grad(fun, argnum=0):
    """autograd's ``elementwise_grad``: the VJP of ``fun`` with a cotangent of ones.

    ``elementwise_grad(f)(x)`` is ``vjp(f, x)[1](ones_like(f(x)))`` -- the gradient of
    ``sum(f(x))``, of ``x``'s shape (axes as ``x``). It equals the elementwise derivative
    ``f'(x)`` exactly when each output element depends only on the input element at
    the same position (a diagonal Jacobian), as for ``np.tanh``; otherwise it is the
    column sum of the Jacobian (autograd's definition; JAX writes
    ``vmap(grad(f))`` or ``grad(lambda x: f(x).sum())``).

    Built as ``grad`` of ``sum(fun(*args))`` (the same VJP: the sum's derivative seeds ones),
    so it nests: ``elementwise_grad(elementwise_grad(f))`` is a second derivative, and it
    may be called inside another transformed function.

    Args:
      fun: a function of arrays returning one floating-point array.
      argnum: which positional argument to differentiate (one int).

    Raises:
      ArgumentError: ``argnum`` is not one int.
      GradientError / FenceError: as ``tl.grad``.
    """
    if not isinstance(argnum, (int, np.integer)) or isinstance(argnum, bool):
        raise ArgumentError(f"elementwise_grad: argnum must be one int, got {argnum!r}")

    def summed(*args):
        return np.sum(fun(*args))

    summed.__name__ = getattr(fun, "__name__", "f")
    g = grad(summed, argnum)
    g.__name__ = g.name = f"elementwise_grad_{summed.__name__}"
    return g


def hessian_vector_product(fun, argnum=0):
    """autograd's ``hessian_vector_product``: ``H(x) @ v`` without forming ``H``.

    ``hessian_vector_product(f)(*args, v)`` is the Hessian of the scalar ``f`` with
    respect to ``args[argnum]`` (shape ``x.shape + x.shape``) contracted with ``v``
    over all of ``x``'s axes: a result of ``x``'s shape. Computed forward over reverse,
    ``jvp(grad(f), args, tangents)`` with tangent ``v`` on ``x`` and zeros elsewhere
    (Pearlmutter, "Fast exact multiplication by the Hessian", 1994); autograd's reverse
    over reverse gives the same value because the Hessian is symmetric.

    Raises:
      ArgumentError: no vector was passed, ``v``'s shape differs from ``x``'s (autograd's
        tensor products of higher rank are not offered), or an argument other than ``x``
        is not floating point and so cannot carry a zero tangent.
    """
    g = grad(fun, argnum)

    def hvp(*args_and_vector):
        if len(args_and_vector) < 2:
            raise ArgumentError("hessian_vector_product: call it as hvp(*args, vector), "
                                "the vector last")
        args, vector = args_and_vector[:-1], np.asarray(args_and_vector[-1])
        a = _one_argnum("hessian_vector_product", argnum, len(args))
        x = np.asarray(args[a])
        if vector.shape != x.shape:
            raise ArgumentError(f"hessian_vector_product: the vector must have the shape of argument "
                                f"{a}, {x.shape}, got {vector.shape}")
        tangents = []
        for k, arg in enumerate(args):
            arr = np.asarray(arg)
            if arr.dtype not in FLOATS:
                raise ArgumentError(f"hessian_vector_product: argument {k} has dtype {arr.dtype}; only "
                                    f"floating-point arguments are supported (close over the others)")
            tangents.append(vector.astype(arr.dtype) if k == a else np.zeros_like(arr))
        return jvp(g, tuple(args), tuple(tangents))[1]

    hvp.__name__ = f"hessian_vector_product_{getattr(fun, '__name__', 'f')}"
    return hvp
