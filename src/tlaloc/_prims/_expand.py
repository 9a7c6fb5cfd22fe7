"""Declaring composites: helpers whose body is built from other primitives.

The shape-only helpers of derivative code (``sum_to``, ``reshape_like``,
``dim_size``, ``matmul_t_lhs`` ...) are primitives so that a graph built before
shapes are known can hold them. Once the shapes of their operands are known,
``Builder.add`` builds their body instead (``Primitive.expansion``), so they need
no batching, lowering, specialisation or bounded-axis entry of their own.

An expansion reads shapes and dtypes with ``shape`` / ``dtype`` (which give up,
``NotImplemented``, when they are unknown) and records the body with ``node``.
"""
from __future__ import annotations

import numpy as np

from .._core.builder import Value, body_bind
from .._core.primitive import REGISTRY


class _NotConcrete(Exception):
    """An operand's shape or dtype is not known yet: the composite stays a node."""


def shape(x) -> tuple:
    """The concrete shape of ``x`` (a value or a constant); gives up when unknown."""
    s = x.aval.shape if type(x) is Value else np.shape(x)
    if s is None or any(type(d) is not int for d in s):
        raise _NotConcrete()
    return tuple(s)


def dtype(x):
    """The dtype of ``x``; gives up when unknown."""
    dt = x.aval.dtype if type(x) is Value else np.asarray(x).dtype
    if dt is None:
        raise _NotConcrete()
    return np.dtype(dt)


#: A body's operation on constants only is computed while building when its result has at
#: most this many elements (``reshape(1.0, (1,))``); a larger one stays a node, so that
#: ``broadcast_like(1.0, x)`` does not write an array of x's size into the program.
FOLD_LIMIT = 16


def node(name: str, *args, **params):
    """Apply primitive ``name`` in the body (see ``FOLD_LIMIT`` for constant operands)."""
    prim = REGISTRY[name]
    if not any(type(a) is Value for a in args):
        out = prim.apply_impl(*args, **params)
        if all(np.size(o) <= FOLD_LIMIT for o in (out if prim.multiple_results else (out,))):
            return out
    return body_bind(prim, args, params)


def norm_axes(axes, rank: int) -> tuple:
    """``axes`` (None, an int or ints, maybe negative) as a sorted tuple of axes."""
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    return tuple(sorted(int(a) % rank for a in axes)) if rank else ()


def reshape(x, s):
    return x if shape(x) == tuple(s) else node("reshape", x, shape=tuple(s))


def gives_up(fn):
    """Decorator: ``fn`` returns ``NotImplemented`` where ``shape``/``dtype`` met an unknown."""
    def wrapped(*args, **params):
        try:
            return fn(*args, **params)
        except _NotConcrete:
            return NotImplemented
    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


def composite(prim):
    """Decorator: ``fn(*operands, **params)`` is ``prim``'s body (``prim.expansion``)."""
    def register(fn):
        prim.expansion = gives_up(fn)
        return fn
    return register
