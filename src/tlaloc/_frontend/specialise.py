"""Specialising a lowering to the arguments' static signature.

Where the code reads a rank, a length or the Python value of an argument
(``np.eye(len(y))``, ``n, d = x.shape``, ``x[i*b:(i+1)*b]``), lowering raises
``structure.ShapeNeeded`` and the transform is built again at the first call,
for that call's signature: first the leaves' shapes and dtypes, then also the
values of integer arguments (``StaticValue``). Each signature is built once and
cached; each build is logged with its reason (``TLALOC_LOG_COMPILES=1`` shows
them as warnings, as ``tl.jit`` does for compiles).
"""
from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np

from .._core import aval as _aval
from .._core.builder import Value

log = logging.getLogger("tlaloc")


@dataclasses.dataclass(frozen=True)
class StaticValue:
    """An argument leaf lowered as its Python value (an integer argument whose value the code
    needs). The graph keeps an input for it (unused), so the call layout is unchanged."""
    value: object
    aval: _aval.AbstractValue

    def __hash__(self):
        if _is_int(self.value):
            return hash((int, self.value, self.aval))
        return hash((type(self.value), id(self.value)))

    def __eq__(self, other):
        if not isinstance(other, StaticValue) or type(other.value) is not type(self.value):
            return False
        if _is_int(self.value):
            return other.value == self.value and other.aval == self.aval
        return other.value is self.value


class FinalAvals(tuple):
    """Leaf avals of the most specialised build: a ShapeNeeded met here is a refusal."""


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_object(x) -> bool:
    """An argument leaf that is not an array or a number (a model object, a callable ...): static."""
    return not isinstance(x, (np.ndarray, np.generic, int, float, complex, bool)) and not hasattr(x, "__array__")


NOTHING = np.zeros((), np.float64)


def leaf_avals(raw, flat, values: bool):
    """Concrete avals for the argument leaves; objects as StaticValue; with ``values``,
    Python/NumPy integers as StaticValue too (then the avals are final)."""
    out = []
    for r, x in zip(raw, flat):
        if is_object(r):
            out.append(StaticValue(r, _aval.UNKNOWN))
            continue
        av = _aval.of(x)
        out.append(StaticValue(int(r), av) if values and _is_int(r) else av)
    return FinalAvals(out) if values else out


def known_avals(leaves):
    """Concrete avals of symbolic or constant leaves at a call site, or None if one is not known."""
    out = []
    for x in leaves:
        av = x.aval if type(x) is Value else _aval.of(np.asarray(x))
        if not av.is_concrete:
            return None
        out.append(av)
    return out


def log_build(name: str, reason: str) -> None:
    level = logging.WARNING if os.environ.get("TLALOC_LOG_COMPILES", "") not in ("", "0") else logging.DEBUG
    log.log(level, "tlaloc: building %s at the first call: %s", name, reason)
