"""Building DXIR: a ``Builder`` records nodes; a ``Value`` is a symbolic array
that records every operation applied to it.

Builders nest: a region (an ``if`` branch, a loop body) is built by a child
builder. A child that meets a ``Value`` of an enclosing builder captures it as a
new region input, so every finished region is a closed graph; ``captures`` lists
the outer values in the order of those extra inputs.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Optional

import numpy as np

from ..errors import ShapeError, DTypeError, TlalocError, TypeAnnotationError
from . import aval as _aval
from .graph import Graph, Literal, Node, SourceLoc, Var

_state = threading.local()


def _stack() -> list:
    if not hasattr(_state, "stack"):
        _state.stack = []
    return _state.stack


def current_builder(value: "Value | None" = None) -> "Builder":
    stack = _stack()
    if not stack:
        raise TlalocError(
            "a symbolic value was used outside the function being lowered; "
            "do not keep values from inside a transform")
    return stack[-1]


class Builder:
    def __init__(self, parent: Optional["Builder"] = None, name: str = "f"):
        self.parent = parent
        self.name = name
        self.inputs: list[Var] = []
        self.nodes: list[Node] = []
        self.captures: list["Value"] = []       # outer values, one per captured input
        self.capture_vars: list[Var] = []       # our input var for each capture
        self._captured: dict[int, Var] = {}    # outer var id -> our input var
        self.outer: dict[int, "Value"] = {}     # our capture var id -> the outer value it stands for
        self.loc: Optional[SourceLoc] = None
        self.producers: dict[int, Node] = {}    # var id -> the node (of this builder) defining it

    # -- values -------------------------------------------------------------
    def new_input(self, aval=_aval.UNKNOWN, hint: Optional[str] = None) -> "Value":
        v = Var(aval, hint)
        self.inputs.append(v)
        return Value(v, self)

    def atom(self, x) -> "Var | Literal":
        """The operand for ``x``: our own var, a captured outer var, or a literal."""
        if type(x) is Value:
            if x.builder is self:
                return x.var
            return self._capture(x)
        if isinstance(x, Literal):
            return x
        if x is None:                    # UNDEF: a value no path assigned (see _core/control.py)
            if getattr(_state, "user_operands", None):
                raise NoneOperand("None is not an array operand")
            return Literal(None, _aval.UNKNOWN)
        if isinstance(x, np.ndarray) and not x.flags.c_contiguous:
            # a constant is rendered as a C-ordered array: keep it so here too, so that the rendered code
            # and the interpreter sum in the same order (regression: np.flip(...) * np.arange(6.0) left a
            # reversed view, which np.einsum summed in another order: 1 ulp between them)
            x = np.ascontiguousarray(x)
        if isinstance(x, (bool, int, float, np.generic)) or isinstance(x, np.ndarray):
            return Literal(x, _aval.of(x))
        if hasattr(x, "__array__") and not isinstance(x, (str, bytes)):
            arr = np.asarray(x)
            return Literal(arr, _aval.of(arr))
        if isinstance(x, (list, tuple)) and _numbers_only(x):
            arr = np.asarray(x)          # `x * [1.0, 2.0]`, `np.concatenate([x, [1.0]])`: NumPy's conversion
            if arr.dtype.kind in "biuf":
                return Literal(arr, _aval.of(arr))
        raise TypeError(f"cannot use {type(x).__name__} {x!r} as an array operand")

    def _capture(self, x: "Value") -> Var:
        key = x.var.id
        if key in self._captured:
            return self._captured[key]
        b = self.parent
        while b is not None and b is not x.builder:
            b = b.parent
        if b is None:
            raise TlalocError(f"value {x.var!r} escaped the function that built it")
        if self.parent is not x.builder:
            outer = Value(self.parent._capture(x), self.parent)
        else:
            outer = x
        inner = Var(x.var.aval, x.var.hint)
        self._captured[key] = inner
        self.outer[inner.id] = outer
        self.captures.append(outer)
        self.capture_vars.append(inner)
        return inner

    # -- nodes --------------------------------------------------------------
    def add(self, prim, args, params):
        hook = getattr(_state, "node_hook", None)
        if hook is not None:
            return hook(self, prim, args, params)
        return self.add_plain(prim, args, params)

    def add_plain(self, prim, args, params):
        """``add`` without the node hook (what a hook calls to add the node itself).

        A composite primitive (``prim.expansion``) whose operand shapes are known is
        not added: its body is built in its place (its nodes go through ``add``)."""
        if prim.expansion is not None:
            out = self._expand(prim, args, params)
            if out is not NotImplemented:
                return out
        ins = tuple(self.atom(a) for a in args)
        try:
            out_avals = prim.abstract_eval(*(a.aval for a in ins), **params)
            if _NAMES_HOOK is not None and any(a.aval.names is not None for a in ins):
                out_avals = _NAMES_HOOK(prim, [a.aval for a in ins], out_avals, params)
        except TypeAnnotationError as e:
            if e.where is None and self.loc is not None:
                raise TypeAnnotationError(e.msg, self.loc.filename, self.loc.lineno, self.loc.col) from None
            raise
        except (ShapeError, DTypeError) as e:
            if self.loc is not None and not getattr(e, "_located", False):
                e.args = (f"{self.loc}: {e.args[0] if e.args else ''}",) + e.args[1:]
                e._located = True
            raise
        hint = params.pop("_hint", None) if "_hint" in params else None
        if prim.multiple_results:
            outs = tuple(Var(a, hint) for a in out_avals)
        else:
            outs = (Var(out_avals, hint),)
        node = Node(prim, ins, outs, params, self.loc)
        self.nodes.append(node)
        for o in outs:
            self.producers[o.id] = node
        vals = tuple(Value(o, self) for o in outs)
        return vals if prim.multiple_results else vals[0]

    def _expand(self, prim, args, params):
        """The body of composite ``prim`` built here, or ``NotImplemented``."""
        body_params = {k: v for k, v in params.items() if k != "_hint"}
        try:
            with self.active():
                out = prim.expansion(*args, **body_params)
        except (ShapeError, DTypeError) as e:
            if self.loc is not None and not getattr(e, "_located", False):
                e.args = (f"{self.loc}: {e.args[0] if e.args else ''}",) + e.args[1:]
                e._located = True
            raise
        if out is not NotImplemented and "_hint" in params:
            hint = params.pop("_hint")
            for o in (out if prim.multiple_results else (out,)):
                if type(o) is Value and o.builder is self and o.var.hint is None:
                    o.var.hint = hint
        return out

    def add_node(self, node: Node) -> None:
        hook = getattr(_state, "node_hook", None)
        if hook is not None:
            hook.check_node(self, node)
        self.nodes.append(node)
        for o in node.outputs:
            self.producers[o.id] = node

    def producer(self, x) -> Optional[Node]:
        """The node of this builder that defines ``x``, if any."""
        if type(x) is Value and x.builder is self:
            return self.producers.get(x.var.id)
        return None

    def value(self, atom):
        """A node operand as something ``bind`` accepts."""
        return atom.value if isinstance(atom, Literal) else Value(atom, self)

    def finish(self, outputs, name: Optional[str] = None) -> Graph:
        """The closed graph: explicit inputs, then one input per captured outer value."""
        outs = tuple(self.atom(o) for o in outputs)
        return Graph(tuple(self.inputs) + tuple(self.capture_vars), tuple(self.nodes), outs,
                     name or self.name)

    @contextlib.contextmanager
    def active(self):
        _stack().append(self)
        try:
            yield self
        finally:
            _stack().pop()

    @contextlib.contextmanager
    def at(self, loc: Optional[SourceLoc]):
        old, self.loc = self.loc, loc if loc is not None else self.loc
        try:
            yield
        finally:
            self.loc = old


def expansion_graph(prim, in_avals, params) -> Optional[Graph]:
    """The body of composite ``prim`` at operand avals ``in_avals`` as a closed graph
    (one input per operand), or ``None`` when the avals do not decide it. The generic
    batching and lowering rules of composites read it."""
    b = Builder(name=prim.name)
    with b.active():
        ins = [b.new_input(a) for a in in_avals]
        out = b._expand(prim, ins, dict(params))
        if out is NotImplemented:
            return None
        return b.finish(tuple(out) if prim.multiple_results else (out,))


@contextlib.contextmanager
def _thread_setting(name: str, value):
    """Set ``_state.<name>`` for this thread while the block runs."""
    old = getattr(_state, name, None)
    setattr(_state, name, value)
    try:
        yield
    finally:
        setattr(_state, name, old)


class NoneOperand(TypeError):
    """A None met as an array operand in user code (``user_operands``)."""


@contextlib.contextmanager
def user_operands(on: bool = True):
    """While the block runs (``on``), a None operand raises ``NoneOperand`` instead of standing
    for UNDEF, the value no path assigned that control flow and transforms bind: the front end
    evaluates the user's operators and calls inside it, so ``a * x`` with ``a`` None is refused
    where it is written; ``passes.inline`` turns it off for the graphs it copies."""
    with _thread_setting("user_operands", on):
        yield


def body_bind(prim, args, params):
    """Apply ``prim`` inside a composite's body: a node of the active builder (even of
    constants), or, while ``rebinding(fn)`` is active, ``fn(prim, args, params)``."""
    fn = getattr(_state, "rebind", None)
    if fn is not None:
        return fn(prim, args, params)
    return current_builder().add(prim, args, params)


@contextlib.contextmanager
def rebinding(fn):
    """Route the primitives of composite bodies through ``fn(prim, args, params)`` while the
    block runs (specialisation applies its rules to them: a body's ``matmul`` becomes a
    ``dot_general``)."""
    with _thread_setting("rebind", fn):
        yield fn


@contextlib.contextmanager
def node_hook(hook):
    """Route every ``Builder.add`` of this thread through ``hook(builder, prim, args, params)``
    while the block runs (``tlaloc._jit.bounded`` tracks padded axes this way); the hook
    adds nodes with ``builder.add_plain``. Nodes built elsewhere (control flow) and added
    with ``Builder.add_node`` are shown to ``hook.check_node(builder, node)`` first."""
    with _thread_setting("node_hook", hook):
        yield hook


_NAMES_HOOK = None


def set_names_hook(fn) -> None:
    """Install ``fn(prim, in_avals, out_avals, params) -> out_avals``: axis names through
    one node, run by ``Builder.add`` when an operand has names (the typed-tensor front
    end installs it; ``tlaloc._frontend.typing_hooks``). ``None`` removes it."""
    global _NAMES_HOOK
    _NAMES_HOOK = fn


class Value:
    """A symbolic array inside a function being lowered.

    It supports the NumPy array protocol that user code uses (``+ - * / @ **``,
    comparisons, ``x.shape``, ``x.T``, ``x.sum()``, ``x[i]`` ...), each recorded as a
    DXIR node; ``tlaloc.numpy`` installs them (``tlaloc/numpy/_operators.py``).
    """
    __slots__ = ("var", "builder")
    __array_priority__ = 1000

    def __init__(self, var: Var, builder: Builder):
        self.var = var
        self.builder = builder

    # -- metadata -------------------------------------------------------------
    @property
    def aval(self):
        return self.var.aval

    @property
    def dtype(self):
        return self.var.aval.dtype

    @property
    def ndim(self):
        r = self.var.aval.rank
        if r is None:
            raise ShapeError("the rank of this value is unknown at definition time; "
                             "annotate the argument (e.g. F32['n']) to use .ndim")
        return r

    def __repr__(self) -> str:
        return f"Value({self.var!r})"

    def __bool__(self):
        raise TlalocError(
            "the truth value of an array is not known while the function is being "
            "lowered; inside grad/jit/vmap write the condition as an `if` on the array "
            "in the function body, or use tl.cond / tl.where")

    def __iter__(self):
        raise TlalocError("cannot iterate over an array of unknown length; "
                          "use `for i in range(len(x))` and index with x[i]")

    def __len__(self):
        raise TlalocError("len() of a symbolic array; use x.shape[0]")

    def __hash__(self):
        return id(self)


def _numbers_only(items, depth=0) -> bool:
    """A (nested) list or tuple of Python or NumPy numbers only, the kind NumPy turns into an array."""
    if depth > 32:
        return False
    for item in items:
        if isinstance(item, (list, tuple)):
            if not _numbers_only(item, depth + 1):
                return False
        elif not isinstance(item, (bool, int, float, np.generic)):
            return False
    return True
