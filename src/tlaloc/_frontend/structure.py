"""``StructureNeeded``: lowering needs the pytree structure of an argument.

Raised at definition time when the body indexes an argument by a string,
reads an attribute of it, or unpacks it: the argument is a container whose
structure is only known at the first call, so the derivative is built then.
"""
from __future__ import annotations

from ..errors import FenceError


class StructureNeeded(FenceError):
    pass


class StaticMutation(FenceError):
    """A Python container is mutated inside a region (a branch or loop body).

    A ``for`` over a static ``range`` catches it and unrolls the loop instead,
    so the mutation happens once per iteration, in order."""


class ShapeNeeded(StructureNeeded):
    """Lowering needs a rank, a length or the Python value of an argument
    (``np.eye(len(y))``, ``n, d = x.shape``, ``x[i*b:(i+1)*b]``): the remaining
    lowering is specialised at the first call for the arguments' static
    signature (shapes, dtypes, then the values of integer arguments)."""
