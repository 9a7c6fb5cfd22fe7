"""What a name can hold while a function is lowered.

* a ``Value`` (a symbolic array, see ``tlaloc._core.builder``);
* a static Python object (numbers, tuples, modules, functions ...), folded as a constant;
* ``Undefined``: a name assigned on only some paths; reading it is refused (``StaleView``: a
  view of an array written in place since, that cannot be followed);
* ``LocalFunction``: a ``def``/``lambda`` nested in the function being lowered;
* ``SymbolicRange``: ``range(...)`` with a symbolic bound.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .._core.builder import Value


RET, RETURNED, BROKE, CONT = ".retval", ".returned", ".broke", ".continued"
FLAGS = (RETURNED, BROKE, CONT)


@dataclasses.dataclass
class Undefined:
    name: str
    where: str            # "line 12" of the assignment that exists on another path

    def __repr__(self):
        return f"Undefined({self.name})"


@dataclasses.dataclass
class StaleView(Undefined):
    """A name that may be a view of an array written in place since, where the view cannot be
    followed (``views.py``): reading it is refused with ``message``."""
    message: str = ""
    shape_dependent: bool = False   # known once shapes are: a more specialised build may follow it

    def __repr__(self):
        return f"StaleView({self.name})"


class LocalFunction:
    """A nested ``def`` or ``lambda``; calls are inlined in the caller's graph.

    (A plain class, not a dataclass: it must stay a pytree leaf.)
    """

    def __init__(self, node, src, env, scope, name):
        self.node = node      # ast.FunctionDef | ast.Lambda
        self.src = src        # FunctionSource of the enclosing function
        self.env = env        # the enclosing scope (read at call time: Python's late binding)
        self.scope = scope    # the enclosing Scope (for globals/closure)
        self.name = name

    def __repr__(self):
        return f"<local function {self.name}>"


class SymbolicRange:
    """``range(start, stop, step)`` where a bound is symbolic (a pytree leaf)."""

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step


def is_symbolic(x) -> bool:
    return type(x) is Value


def maybe_int(x) -> bool:
    """A symbolic value that may be a Python-int-like scalar (a size, an integer argument)."""
    if type(x) is not Value:
        return False
    av = x.aval
    return (av.shape is None or av.shape == ()) and (av.dtype is None or av.dtype.kind in "iu")
