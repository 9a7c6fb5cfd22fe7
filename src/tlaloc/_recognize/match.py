"""Helpers the recognizers share: constants, shapes, commutative operands, reductions."""
from __future__ import annotations

import numpy as np

from .._core.graph import Literal, Var


def const_value(a):
    """The value of a scalar constant operand, else None."""
    if isinstance(a, Literal) and np.size(a.value) == 1 and np.asarray(a.value).dtype.kind in "fiu":
        return float(np.asarray(a.value).reshape(()))
    return None


def shape_of(a):
    return tuple(a.aval.shape) if a.aval.shape is not None else None


def both_orders(node):
    """Both orders of a binary node's operands."""
    a, b = node.inputs[0], node.inputs[1]
    return ((a, b), (b, a))


def is_last_axis(axes, rank):
    if axes is None or rank == 0:
        return False
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    return tuple(a % rank for a in axes) == (rank - 1,)


def reduce_last(ix, atom, name, nodes):
    """``name(x, axes=(-1,), keepdims=True)`` producing ``atom``: returns x."""
    n = ix.op(atom, name)
    if n is None or not n.params.get("keepdims"):
        return None
    x = n.inputs[0]
    if not is_last_axis(n.params.get("axes"), len(shape_of(x))):
        return None
    nodes.append(n)
    return x


def same_var(a, b) -> bool:
    return isinstance(a, Var) and isinstance(b, Var) and a.id == b.id
