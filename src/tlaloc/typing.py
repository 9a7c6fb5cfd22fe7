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

import dataclasses

import numpy as np

from ._annotations import (BF16, F16, F32, F64, I32, I64, Bool, Dim, DTypeSpec, TensorType,  # noqa: F401
                           from_annotation, parse_dims, type_str)
from ._core.aval import AbstractValue
from ._core.primitive import Primitive
from .errors import ArgumentError, TypeAnnotationError


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

from ._typecheck import install_hooks as _install_hooks  # noqa: E402

_install_hooks()

__all__ = ["F32", "F64", "BF16", "F16", "I32", "I64", "Bool", "TensorType", "DTypeSpec", "Dim",
           "NamedArray", "named", "contract", "parse_dims", "from_annotation", "type_str"]
