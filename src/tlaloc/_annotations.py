"""The annotation vocabulary of typed tensors: ``F32["batch", "hidden"]`` and its parts.

``Dim``, ``TensorType``, ``DTypeSpec`` (``F32`` ... ``Bool``), ``parse_dims``,
``from_annotation`` and ``type_str``. ``tlaloc.typing`` documents the syntax and
re-exports these names; the front end's typing checks (``tlaloc._typecheck``,
``tlaloc._frontend.names``) import them from here, below both.
"""
from __future__ import annotations

import ast
import dataclasses
import sys
from typing import Optional

import numpy as np

from . import dtypes as _dt
from ._core.aval import AbstractValue
from .errors import TypeAnnotationError

_ANY = None     # ``dtypes`` of a TensorType that accepts any dtype


# -- dims and types -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Dim:
    """One entry of a shape annotation.

    ``kind`` is ``"named"``, ``"fixed"``, ``"anon"``, ``"variadic"`` (``...`` when
    ``name`` is None, else ``*name``) or ``"symbolic"`` (``name`` holds the expression).
    ``bound`` is the upper bound of a bounded named axis (``"seq<=512"``), else None.
    """
    kind: str
    name: Optional[str] = None
    size: Optional[int] = None
    broadcastable: bool = False
    bound: Optional[int] = None

    def __str__(self) -> str:
        hash_ = "#" if self.broadcastable else ""
        if self.kind == "named":
            return hash_ + self.name + (f"<={self.bound}" if self.bound is not None else "")
        if self.kind == "fixed":
            return str(self.size)
        if self.kind == "anon":
            return "_"
        if self.kind == "variadic":
            return "..." if self.name is None else f"*{self.name}"
        return self.name


class TensorType:
    """``F32["batch", "hidden"]``: a dtype set and a tuple of ``Dim``."""
    __slots__ = ("label", "dtypes", "dims")

    def __init__(self, label: str, dtypes, dims: tuple):
        self.label, self.dtypes, self.dims = label, dtypes, tuple(dims)
        if sum(d.kind == "variadic" for d in self.dims) > 1:
            raise _annotation_error(f"{self}: at most one `...` or `*name` per annotation")

    def __repr__(self) -> str:
        return f"{self.label}[{', '.join(map(str, self.dims))}]"

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorType) and (self.label, self.dtypes, self.dims) == \
            (other.label, other.dtypes, other.dims)

    def __hash__(self) -> int:
        return hash((self.label, self.dims))

    @property
    def variadic(self) -> bool:
        return any(d.kind == "variadic" for d in self.dims)

    @property
    def bounds(self) -> dict:
        """``{axis name: bound}`` of the bounded axes (``"seq<=512"``); empty when none."""
        return {d.name: d.bound for d in self.dims if d.bound is not None}

    def aval(self) -> AbstractValue:
        """What the front end knows of an argument with this annotation."""
        dtype = self.dtypes[0] if self.dtypes is not _ANY and len(self.dtypes) == 1 else None
        if self.variadic:
            return AbstractValue(dtype, None)
        shape = tuple(d.size if d.kind == "fixed" else None for d in self.dims)
        names = tuple(d.name if d.kind == "named" else None for d in self.dims)
        return AbstractValue(dtype, shape, names if any(n is not None for n in names) else None)


class DTypeSpec:
    """``F32``, ``F64`` ...: subscript with dims to get a ``TensorType``."""

    def __init__(self, label: str, dtypes):
        self.label, self.dtypes = label, dtypes

    def __getitem__(self, item) -> TensorType:
        items = item if isinstance(item, tuple) else (item,)
        dims = []
        for it in items:
            if it is Ellipsis:
                dims.append(Dim("variadic"))
            elif isinstance(it, (int, np.integer)) and not isinstance(it, bool):
                dims.append(Dim("fixed", size=int(it)))
            elif isinstance(it, str):
                dims.extend(parse_dims(it))
            else:
                raise _annotation_error(f"{self.label}[...]: a dim is a name, an int or `...`, got {it!r}")
        return TensorType(self.label, self.dtypes, dims)

    def __repr__(self) -> str:
        return self.label


F32 = DTypeSpec("F32", (_dt.float32,))
F64 = DTypeSpec("F64", (_dt.float64,))
BF16 = DTypeSpec("BF16", (_dt.bfloat16,))
F16 = DTypeSpec("F16", (_dt.float16,))
I32 = DTypeSpec("I32", (_dt.int32,))
I64 = DTypeSpec("I64", (_dt.int64,))
Bool = DTypeSpec("Bool", (_dt.bool_,))
_LABELS = {s.dtypes[0]: s.label for s in (F32, F64, BF16, F16, I32, I64, Bool)}


def parse_dims(text: str) -> list:
    """jaxtyping's dim grammar: space-separated tokens (see the module docstring)."""
    out = []
    for tok in text.split():
        if "," in tok:
            raise _annotation_error(f"dims are separated by spaces, not commas: {text!r}")
        if tok == "...":
            out.append(Dim("variadic"))
            continue
        broadcastable = variadic = anonymous = False
        while tok and tok[0] in "#*_?":
            broadcastable |= tok[0] == "#"
            variadic |= tok[0] == "*"
            anonymous |= tok[0] == "_"
            tok = tok[1:]
        if "<=" in tok:
            out.append(_bounded_dim(tok, text, broadcastable, variadic or anonymous))
            continue
        if tok.count("=") == 1:
            tok = tok.split("=")[1]
        if variadic:
            out.append(Dim("variadic", None if anonymous or not tok else tok))
        elif anonymous:
            out.append(Dim("anon"))
        elif tok.isdigit():
            out.append(Dim("fixed", size=int(tok), broadcastable=broadcastable))
        elif tok.isidentifier():
            out.append(Dim("named", tok, broadcastable=broadcastable))
        else:
            _check_expression(tok)
            out.append(Dim("symbolic", tok))
    return out


def _bounded_dim(tok: str, text: str, broadcastable: bool, other_prefix: bool) -> Dim:
    """``"seq<=512"``: a named axis of any size up to 512."""
    name, _, bound = tok.partition("<=")
    if other_prefix or broadcastable or not name.isidentifier() or not bound.isdigit() or int(bound) < 1:
        raise _annotation_error(f"cannot read the bounded dim {tok!r} in {text!r}: write `name<=N` with an "
                                f"identifier and a positive integer bound, e.g. \"seq<=512\"")
    return Dim("named", name, bound=int(bound))


def type_str(aval: AbstractValue) -> str:
    """An aval as a type, e.g. ``F32[batch, 3]`` (``?`` for an unknown size)."""
    dtype = _LABELS.get(aval.dtype, _dt.short_name(aval.dtype) if aval.dtype is not None else "?")
    if aval.shape is None:
        return f"{dtype}[...]"
    dims = []
    for i, d in enumerate(aval.shape):
        name = aval.names[i] if aval.names is not None else None
        dims.append(name if name is not None else ("?" if not isinstance(d, int) else str(d)))
    return f"{dtype}[{', '.join(dims)}]"


def _annotation_error(msg: str) -> TypeAnnotationError:
    """A TypeAnnotationError at the user's frame (the line that wrote the annotation)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    if frame is None:
        return TypeAnnotationError(msg)
    return TypeAnnotationError(msg, frame.f_code.co_filename, frame.f_lineno, 1)


_EXPR_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load,
               ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.USub)


def _check_expression(text: str):
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        tree = None
    if tree is None or not all(isinstance(n, _EXPR_NODES) for n in ast.walk(tree)):
        raise _annotation_error(f"cannot read the dim {text!r}: use a name, an int, `_`, `#name`, "
                                f"`*name`, `...` or an expression of names with + - * //")


# -- jaxtyping ---------------------------------------------------------------------------

def from_annotation(ann) -> Optional[TensorType]:
    """A ``TensorType`` for a tlaloc or jaxtyping annotation, else None."""
    if isinstance(ann, TensorType):
        return ann
    if "jaxtyping" in getattr(type(ann), "__module__", "") and hasattr(ann, "dims") and hasattr(ann, "dtypes"):
        return _from_jaxtyping(ann)
    return None


def _from_jaxtyping(ann) -> TensorType:
    dtypes = ann.dtypes
    if isinstance(dtypes, tuple):
        known = []
        for name in dtypes:
            try:
                known.append(np.dtype(name))
            except TypeError:
                pass                             # float8 and friends: not tlaloc dtypes
        dtypes = tuple(known)
    else:
        dtypes = _ANY
    dims = []
    for d in ann.dims:
        kind = type(d).__name__
        b = bool(getattr(d, "broadcastable", False))
        if kind == "_NamedDim":
            dims.append(Dim("named", d.name, broadcastable=b))
        elif kind == "_FixedDim":
            dims.append(Dim("fixed", size=int(d.size), broadcastable=b))
        elif kind == "_AnonymousDim":
            dims.append(Dim("anon"))
        elif kind == "_AnonymousVariadicDim":
            dims.append(Dim("variadic"))
        elif kind == "_NamedVariadicDim":
            dims.append(Dim("variadic", d.name))
        elif kind == "_SymbolicDim":
            _check_expression(d.elem)
            dims.append(Dim("symbolic", d.elem))
        else:
            raise TypeAnnotationError(f"jaxtyping dim {d!r} ({kind}) is not supported by tlaloc")
    label = getattr(ann.dtype, "__name__", "Shaped")
    return TensorType(label, dtypes, dims)
