"""The DXIR graph: immutable SSA values, nodes and graphs.

A ``Graph`` has input ``Var``s, a tuple of ``Node``s in execution order, and
outputs (``Var`` or ``Literal``). A ``Node`` applies one primitive to inputs with
static ``params``; structured control flow (``cond``, ``for_range``,
``while_loop``) keeps its regions as ``Graph`` values inside ``params``. Regions
are closed: every outer value a region uses is passed to it as an operand.

Graphs are immutable: passes build new graphs.
"""
from __future__ import annotations

import dataclasses
import itertools
from types import MappingProxyType
from typing import Any, Optional, Union

from .aval import AbstractValue

_ids = itertools.count()


class Var:
    """One SSA value. ``hint`` is the user-facing name suggestion (``"x"``, ``"y_bar"``)."""
    __slots__ = ("id", "aval", "hint")

    def __init__(self, aval: AbstractValue, hint: Optional[str] = None):
        self.id = next(_ids)
        self.aval = aval
        self.hint = hint

    def __repr__(self) -> str:
        return f"%{self.hint or 'v'}{self.id}:{self.aval}"


class Literal:
    """A constant operand: a Python scalar (weak) or a NumPy array."""
    __slots__ = ("value", "aval")

    def __init__(self, value, aval: AbstractValue):
        self.value = value
        self.aval = aval

    def __repr__(self) -> str:
        return f"Literal({self.value!r})"


Atom = Union[Var, Literal]


@dataclasses.dataclass(frozen=True)
class SourceLoc:
    """Where a node came from in the user's code."""
    filename: str
    lineno: int
    col: int
    line: str = ""          # the primal source line, used in renderer comments
    role: str = "primal"    # "grad" for nodes of a backward sweep, "tangent" for a forward sweep

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}:{self.col}"


@dataclasses.dataclass(frozen=True, eq=False)
class Node:
    prim: Any                         # Primitive (kept untyped to avoid an import cycle)
    inputs: tuple                     # tuple[Atom]
    outputs: tuple                    # tuple[Var]
    params: MappingProxyType
    loc: Optional[SourceLoc] = None

    def __post_init__(self):
        if not isinstance(self.params, MappingProxyType):
            object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    def regions(self) -> list:
        return [v for v in self.params.values() if isinstance(v, Graph)]


@dataclasses.dataclass(frozen=True, eq=False)
class Graph:
    inputs: tuple                     # tuple[Var]
    nodes: tuple                      # tuple[Node]
    outputs: tuple                    # tuple[Atom]
    name: str = "f"

    def __str__(self) -> str:
        from .printer import format_graph
        return format_graph(self)

    def in_avals(self) -> list:
        return [v.aval for v in self.inputs]

    def out_avals(self) -> list:
        return [v.aval for v in self.outputs]
