"""Typed tensors: dtype, rank and named axes in annotations.

    from tlaloc.typing import F32

    @tl.grad
    def loss(x: F32["batch", "hidden"], w: F32["hidden", "out"]):
        return tl.contract(x, w).sum()          # contracts over `hidden`

An annotation is ``<DTYPE>[dims]`` with ``DTYPE`` one of ``F32 F64 BF16 F16 I32
I64 Bool``. Dims follow jaxtyping's conventions (``Float[np.ndarray, "b h"]``
annotations are accepted too when jaxtyping is installed):

=================  ============================================================
``"batch"``        a named axis; every axis of that name has one size per call
``3``/``"n=3"``    a fixed size
``"_"``/``"_b"``   any size, not checked
``"#batch"``       ``batch`` or size 1 (broadcastable)
``...``/``"*b"``   any number of axes (``*b`` binds them all to one shape)
``"n+1"``          a size computed from other names (checked at call time)
``"seq<=512"``     a named axis of any size up to 512 (a *bounded* axis)
=================  ============================================================

A bounded axis is refused over its bound when the size is a constant the front
end sees (an annotated local, ``x: F32["seq<=512"] = tnp.zeros(5000)``, or a
constant passed to an annotated function), else when the function is called.
``tl.jit`` compiles a function with bounded arguments once per bucket of the
axis (``tlaloc._jit.bounded``), not once per size.

Several dims may share one string (``F32["batch hidden"]``); ``F32[()]`` is a scalar.
Linters read string dims as forward references (pyflakes/ruff F821, F722); as
with jaxtyping, disable those two checks for annotated modules.

When ``grad``/``jvp``/``jit``/``vmap`` lowers an annotated function, dtypes and
axis names ride on the DXIR values (``tlaloc._frontend.names`` has the rule
table) and a broadcast, contraction or dtype mix that does not fit is refused at
definition time with ``file:line:col`` and both types. At call time the argument
arrays are checked against the annotations. Arrays stay plain ``numpy.ndarray``:
nothing wraps them on the hot path. A dims list with ``...`` or ``*name`` gives
the front end an unknown rank, so its names are checked at call time only.

Named values outside annotated functions: ``tl.named(x, "batch hidden")`` gives
an eager array names (a small ``NamedArray``), or renames a symbolic value
inside a transformed function; ``tl.contract(a, b)`` contracts over the axis
names ``a`` and ``b`` share, in either setting.
"""
from __future__ import annotations

import ast
import dataclasses
import sys
from typing import Optional

import numpy as np

from . import dtypes as _dt
from ._core.aval import AbstractValue
from ._core.primitive import Primitive
from .errors import ArgumentError, TypeAnnotationError

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


# -- named values and contraction ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class NamedArray:
    """An eager array with axis names (``tl.named``); NumPy sees the plain array."""
    array: np.ndarray
    names: tuple

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.array, dtype=dtype)

    @property
    def shape(self):
        return self.array.shape

    @property
    def dtype(self):
        return self.array.dtype

    def __repr__(self) -> str:
        return f"NamedArray({type_str(AbstractValue(self.dtype, self.shape, self.names))}, {self.array!r})"


def _names_tuple(names) -> tuple:
    if isinstance(names, str):
        names = names.split()
    out = tuple(None if n in (None, "_") else n for n in names)
    for n in out:
        if n is not None and (not isinstance(n, str) or not n.isidentifier()):
            raise ArgumentError(f"named: an axis name is an identifier (or None / '_'), got {n!r}")
    return out


class _NameAxes(Primitive):
    """``name_axes(x, names=...)``: identity that sets (or, with ``names=None``, clears) axis names."""

    def abstract_eval(self, x, *, names):
        if names is not None and x.shape is not None and len(x.shape) != len(names):
            raise TypeAnnotationError(f"tl.named: {type_str(x)} has {len(x.shape)} axes but {len(names)} "
                                      f"names were given ({' '.join(n or '_' for n in names)})")
        if names is not None and x.shape is None:
            shape = (None,) * len(names)
        else:
            shape = x.shape
        return AbstractValue(x.dtype, shape, names if names and any(n is not None for n in names) else None,
                             x.weak)


name_axes_p = _NameAxes("name_axes", impl=lambda x, *, names: x, hlo=None,
                        shape_rule=lambda x, **_: x.shape, dtype_rule=lambda x, **_: x.dtype)
name_axes_p.vjp = lambda g, x, out, names: (name_axes_p.bind(g, names=x.aval.names),)
name_axes_p.jvp = lambda t, x, out, names: None if t[0] is None else name_axes_p.bind(t[0], names=names)


def named(x, names):
    """Give ``x`` axis names.

    Args:
      x: an array (eager) or a value inside a transformed function.
      names: ``"batch hidden"`` or ``("batch", "hidden")``; ``_``/None leaves an axis unnamed.
    Returns:
      eagerly a ``NamedArray`` (for ``tl.contract``); inside a transform, ``x``
      with those names (a ``name_axes`` node; it renames axes that had names).
    """
    names = _names_tuple(names)
    if type(x).__name__ == "Value":
        return name_axes_p.bind(x, names=names)
    arr = np.asarray(x.array if isinstance(x, NamedArray) else x)
    if arr.ndim != len(names):
        raise ArgumentError(f"named: an array of shape {arr.shape} needs {arr.ndim} names, got {names}")
    return NamedArray(arr, names)


def contract(a, b):
    """Contract ``a`` and ``b`` over every axis name they share.

    The result has ``a``'s other axes, then ``b``'s, names kept. Inside a
    transformed function the names come from annotations (or ``tl.named``) and
    the contraction is an ``einsum`` node; eagerly both operands must be
    ``NamedArray`` (``tl.named(x, "batch seq")``) and the result is one too.

    Raises:
      TypeAnnotationError: the operands share no name, an operand lacks names, or
        one operand repeats a name (inside a transform: at the call's file:line:col).
    """
    from . import numpy as tnp
    symbolic = type(a).__name__ == "Value" or type(b).__name__ == "Value"
    if symbolic:
        an, bn = _symbolic_names(a, "a"), _symbolic_names(b, "b")
        ta, tb = type_str(a.aval), type_str(b.aval)
    else:
        if not (isinstance(a, NamedArray) and isinstance(b, NamedArray)):
            raise ArgumentError("contract: eagerly both operands need axis names; wrap them with "
                                "tl.named(x, 'batch seq'), or call contract inside a function whose "
                                "arguments are annotated (F32['batch', 'seq'])")
        an, bn = a.names, b.names
        ta = type_str(AbstractValue(a.dtype, a.shape, an))
        tb = type_str(AbstractValue(b.dtype, b.shape, bn))
    for ns, t in ((an, ta), (bn, tb)):
        dup = [n for n in ns if n is not None and ns.count(n) > 1]
        if dup:
            raise _located(f"contract: {t} names two axes `{dup[0]}`; give them distinct names "
                           f"(tl.named) before contracting", symbolic)
    shared = [n for n in an if n is not None and n in bn]
    if not shared:
        raise _located(f"contract: {ta} and {tb} share no axis name, so there is nothing to contract; "
                       f"rename an axis with tl.named, or use matmul/einsum for a positional contraction",
                       symbolic)
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    by_name: dict = {}

    def letter(n):
        if n is None:
            return next(letters)
        if n not in by_name:
            by_name[n] = next(letters)
        return by_name[n]

    sa, sb = "".join(map(letter, an)), "".join(map(letter, bn))
    keep = [c for c, n in zip(sa, an) if n not in shared] + [c for c, n in zip(sb, bn) if n not in shared]
    spec = f"{sa},{sb}->{''.join(keep)}"
    if symbolic:
        return tnp.einsum(spec, a, b)
    out = np.einsum(spec, a.array, b.array)
    return NamedArray(out, tuple(n for n in an if n not in shared) + tuple(n for n in bn if n not in shared))


def _symbolic_names(x, label) -> tuple:
    aval = getattr(x, "aval", None)
    if aval is None or aval.shape is None or aval.names is None:
        t = type_str(aval) if aval is not None else type(x).__name__
        raise _located(f"contract: operand {label} ({t}) has no axis names; annotate the argument it "
                       f"comes from (F32['batch', 'seq']) or name it with tl.named(x, 'batch seq')", True)
    return aval.names


def _located(msg: str, symbolic: bool) -> TypeAnnotationError:
    if symbolic:
        from ._core.builder import current_builder
        try:
            loc = current_builder().loc
        except Exception:
            loc = None
        if loc is not None:
            return TypeAnnotationError(msg, loc.filename, loc.lineno, loc.col)
    return TypeAnnotationError(msg)


# -- hooks ----------------------------------------------------------------------------------------

def _install():
    from . import _typecheck
    if not hasattr(_typecheck, "call_bound_violation"):
        return          # _typecheck is being imported first: it calls _install when it is complete
    from ._frontend import names as _names, typing_hooks
    typing_hooks.install(_typecheck.avals_from_annotations, _names.propagate_names, _typecheck.check_call,
                         _typecheck.bound_violation, _typecheck.call_bound_violation)


_install()

__all__ = ["F32", "F64", "BF16", "F16", "I32", "I64", "Bool", "TensorType", "DTypeSpec", "Dim",
           "NamedArray", "named", "contract", "parse_dims", "from_annotation", "type_str"]
