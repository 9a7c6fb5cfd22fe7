"""One function per primitive, named after it and taking exactly the
primitive's operands and params: ``lax.multiply(x, y)``,
``lax.reduce_sum(x, axes=None, keepdims=False)``, ``lax.sum_to(g, like)``.

Generated derivative source calls primitives through this module, so every
node renders as one call with a fixed signature. Each call runs the primitive's
NumPy implementation on arrays (and records a DXIR node on symbolic values);
on plain NumPy arrays it skips ``bind``'s checks (``_prims/_eager.py``).
"""
from __future__ import annotations

from .. import _prims  # noqa: F401  (declares every primitive)
from .._core import control as _control  # noqa: F401  (cond, for_range, while_loop)
from .._core.primitive import REGISTRY
from .._prims import _eager

for _name, _prim in REGISTRY.items():
    globals()[_name] = _eager.entry(_prim)

__all__ = sorted(REGISTRY)


def __getattr__(name):
    # primitives declared after import (control flow, custom rules) are found late
    if name in REGISTRY:
        fn = globals()[name] = _eager.entry(REGISTRY[name])
        return fn
    raise AttributeError(f"tlaloc.numpy.lax has no primitive {name!r}")


def truth(pred, what="if"):
    """The Python truth of a scalar array condition (``if``/``while`` in generated code).

    Raises ShapeError for a non-scalar condition, as the interpreter does.
    """
    from .._core.control import _scalar_pred
    return _scalar_pred(pred, what)


def check_trips(trips, max_trips):
    """Refuse a ``while`` loop that runs past its declared ``max_trips``."""
    if trips >= max_trips:
        from ..errors import TlalocError
        raise TlalocError(f"while loop ran past its declared bound max_trips={max_trips}; raise the bound")
