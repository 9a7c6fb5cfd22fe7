"""What a name can hold while a function is lowered.

* a ``Value`` (a symbolic array, see ``tlaloc._core.builder``);
* a static Python object (numbers, tuples, modules, functions ...), folded as a constant;
* ``Undefined``: a name assigned on only some paths; reading it is refused;
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
class LocalFunction:
    """A nested ``def`` or ``lambda``; calls are inlined in the caller's graph."""
    node: Any             # ast.FunctionDef | ast.Lambda
    src: Any              # FunctionSource of the enclosing function
    env: dict             # the enclosing scope (read at call time: Python's late binding)
    scope: Any            # the enclosing Scope (for globals/closure)
    name: str


@dataclasses.dataclass
class SymbolicRange:
    start: Any
    stop: Any
    step: Any


def is_symbolic(x) -> bool:
    return type(x) is Value
