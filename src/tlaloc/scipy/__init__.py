"""``tlaloc.scipy``: the SciPy functions real programs call, built from tlaloc's primitives.

``tlaloc.scipy.special``, ``tlaloc.scipy.stats``, ``tlaloc.scipy.linalg`` and
``tlaloc.scipy.signal`` (``convolve``) take
SciPy's names, arguments and conventions (``loc``/``scale``, ``axis``, ``b=``,
``(c, lower)`` factor tuples). Inside ``grad``/``jvp``/``vmap``/``jit`` the AST
front end maps user code written against SciPy (``scipy.special.logsumexp``,
``from scipy.stats import norm``) onto these functions, so it differentiates
unchanged; a SciPy function without an equivalent here is refused by name at
the call's file:line:col.
"""
from __future__ import annotations

from . import linalg, signal, spatial, special, stats  # noqa: F401

__all__ = ["special", "stats", "linalg", "signal", "spatial"]
