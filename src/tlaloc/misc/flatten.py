"""A pytree of arrays as one flat vector, and back: ``ravel_pytree`` (JAX's name) and
``flatten`` (autograd's ``autograd.misc.flatten``), built on ``tlaloc._pytree``.

    flat, unflatten = tl.ravel_pytree({"W": W, "b": b})     # flat: (W.size + b.size,)
    params = unflatten(flat - 0.1 * g)                       # same structure, shapes, dtypes

Leaves are ordered as ``tlaloc._pytree.flatten`` orders them (dict keys sorted, as
autograd and JAX do). Both directions are written with ``tlaloc.numpy``, so they
run on NumPy arrays eagerly and record ``concatenate``/``slice``/``reshape`` nodes on
symbolic arrays: ``tl.grad`` differentiates a loss that flattens its parameters
(``np.dot(flat, flat)``) or rebuilds them from a vector (``flatten_func``).
"""
from __future__ import annotations

import numpy as np

from .. import _pytree
from .. import numpy as tnp
from ..errors import ArgumentError

__all__ = ["ravel_pytree", "flatten", "flatten_func"]


def ravel_pytree(tree):
    """``tree`` as one 1-D vector, and the function that rebuilds it.

    Args:
      tree: nested tuples, lists, dicts (and registered pytrees) of arrays or scalars.

    Returns:
      ``(flat, unflatten)``: ``flat`` of shape ``(sum of leaf sizes,)`` and the dtype the
      leaves promote to (float64 for an empty tree); ``unflatten(v)`` takes a vector of
      that length and returns ``tree``'s structure with each leaf's shape, cast back to
      the leaf's dtype where the leaves' dtypes differ.

    Raises:
      ArgumentError: (from ``unflatten``) ``v`` is not 1-D or has the wrong length.
    """
    leaves, treedef = _pytree.flatten(tree)
    dtypes = [_dtype(x) for x in leaves]
    common = np.result_type(*dtypes) if dtypes else np.dtype(np.float64)
    pieces = [tnp.ravel(x) for x in leaves]
    flat = tnp.concatenate(pieces) if pieces else np.zeros(0, np.float64)

    def unflatten(v):
        # the leaves' shapes are read here, not above: flattening alone works on arrays whose
        # shapes are not known yet (a function's output inside a transform)
        shapes = [tuple(tnp.shape(x)) for x in leaves]
        sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        total = sum(sizes)
        vshape = _known_shape(v)
        if vshape is not None and (len(vshape) != 1 or vshape[0] != total):
            raise ArgumentError(f"unflatten: expected a vector of shape ({total},), the flattened size of "
                                f"{treedef!r}, got shape {tuple(vshape)}")
        out, start = [], 0
        for shape, size, dt in zip(shapes, sizes, dtypes):
            piece = tnp.reshape(v[start:start + size], shape)
            out.append(piece if dt == common else tnp.astype(piece, dt))
            start += size
        return _pytree.unflatten(treedef, out)
    return flat, unflatten


def _known_shape(v):
    """``v``'s shape, or None for a symbolic array whose rank or sizes are not known yet."""
    aval = getattr(v, "aval", None)
    if aval is None:
        return np.shape(v)
    if aval.shape is None or any(type(d) is not int for d in aval.shape):
        return None
    return tuple(aval.shape)


def _dtype(x):
    aval = getattr(x, "aval", None)
    if aval is not None and aval.dtype is not None:
        return np.dtype(aval.dtype)
    return np.result_type(x)


def flatten(value):
    """autograd's ``flatten``: ``ravel_pytree`` under autograd's name (``autograd.misc.flatten``)."""
    return ravel_pytree(value)


def flatten_func(func, example):
    """autograd's ``flatten_func``: ``func`` of a pytree as a function of one vector.

    Returns ``(flat_func, unflatten, flat_example)`` where ``flat_func(x, *args)`` is
    ``ravel_pytree(func(unflatten(x), *args))[0]`` (a scalar objective stays a 0-d value
    raveled to shape ``(1,)``, as in autograd) and ``flat_example`` is ``example`` flattened.
    """
    flat_example, unflatten = ravel_pytree(example)

    def flat_func(x, *args):
        return ravel_pytree(func(unflatten(x), *args))[0]
    flat_func.__name__ = f"flat_{getattr(func, '__name__', 'func')}"
    return flat_func, unflatten, flat_example
