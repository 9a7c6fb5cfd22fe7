"""``StructureNeeded``: lowering needs the pytree structure of an argument.

Raised at definition time when the body indexes an argument by a string,
reads an attribute of it, or unpacks it: the argument is a container whose
structure is only known at the first call, so the derivative is built then.
"""
from __future__ import annotations

from ..errors import FenceError


class StructureNeeded(FenceError):
    pass
