"""The primitive table. Importing this package declares every primitive once."""
from . import (broadcasting, elementwise, conversion, selection, reductions, shape_ops, indexing,  # noqa: F401
               slicing, linalg, decompositions, misc, rng, special, checks, sorting, spectral, composites, diagonal)
from .._core.primitive import REGISTRY  # noqa: F401
