"""Shared shape and dtype rules for primitive declarations.

Rules work on ``AbstractValue``s whose dtype or shape may be unknown (``None``);
an unknown input gives an unknown output, never a guess.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import ShapeError


def broadcast_shapes(op: str, *shapes):
    """NumPy broadcasting of shapes whose dims may be ints, names or ``None``."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        out.append(_broadcast_dim(op, dims, shapes))
    return tuple(out)


def _broadcast_dim(op, dims, shapes):
    known = {d for d in dims if type(d) is int and d != 1}
    if len(known) > 1:
        raise ShapeError(f"{op}: shapes {' and '.join(map(_fmt, shapes))} do not broadcast "
                         f"(sizes {sorted(known)} meet on one axis); reshape one operand "
                         f"or insert an axis of size 1")
    if known:
        return known.pop()
    named = [d for d in dims if isinstance(d, str)]
    if named:
        return named[0]
    if any(d is None for d in dims):
        return None
    return 1


def _fmt(shape) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + (",)" if len(shape) == 1 else ")")


def same_shape(x, *rest, **params):
    return x.shape


def elementwise_shape(op: str):
    def rule(*avals, **params):
        return broadcast_shapes(op, *(a.shape for a in avals))
    return rule


def elementwise_dtype(op: str, impl, names=None, promote: bool = False):
    """dtype rule: refuse a float mix where ``dtypes.check_float_mix`` does (strict mode;
    ``promote``: never, as for the derivative-only ``safe_mul``/``safe_div``), then ask
    NumPy with 0-d arrays (weak Python scalars as Python scalars, adopting a bfloat16
    operand's dtype)."""
    def rule(*avals, **params):
        labels = names or [f"operand {i}" for i in range(len(avals))]
        if not promote:
            _dt.check_float_mix(op, {labels[i] if i < len(labels) else f"operand {i}":
                                     (None if a.weak else a.dtype) for i, a in enumerate(avals)})
        if any(a.dtype is None and not a.weak for a in avals):
            return None
        if all(a.weak for a in avals):
            return None
        strong = _strong_float(a.dtype for a in avals if not a.weak)
        samples = [np.zeros((), a.dtype) if not a.weak else _weak_sample(a.dtype, strong) for a in avals]
        with np.errstate(all="ignore"):
            return np.asarray(impl(*samples, **params)).dtype
    return rule


# NumPy applies NEP 50 (a Python float adopts the array's float dtype) to its
# own float types only; ml_dtypes' bfloat16 * 2.0 gives float32 there.
_NUMPY_FLOATS = (_dt.float16, _dt.float32, _dt.float64)


def _strong_float(dtypes):
    """The one float dtype among ``dtypes`` that is not NumPy's own, or None."""
    found = {np.dtype(d) for d in dtypes if d is not None and _dt.is_float(d)}
    return found.pop() if len(found) == 1 and not found & set(_NUMPY_FLOATS) else None


def _weak_sample(dtype, strong_float):
    """A stand-in for a weak Python scalar whose kind ``dtype`` records (None: float)."""
    kind = None if dtype is None else np.dtype(dtype).kind
    if kind == "b":
        return False
    if kind in ("i", "u"):
        return 0
    return np.zeros((), strong_float) if strong_float is not None else 0.0


def normalize_axes(axes, rank: int, op: str = "reduction"):
    """``None`` -> all axes; ints may be negative. Returns a sorted tuple."""
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, int):
        axes = (axes,)
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ShapeError(f"{op}: axis {a} is out of range for an array of rank {rank}; "
                             f"use an axis in [{-rank}, {rank - 1}]")
        out.append(a % rank)
    return tuple(sorted(out))


def reduced_shape(shape, axes, keepdims, op="reduction"):
    if shape is None:
        return () if axes is None and not keepdims else None   # a full reduction is a scalar
    ax = normalize_axes(axes, len(shape), op)
    if keepdims:
        return tuple(1 if i in ax else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in ax)


def check_concrete_mix(op: str, operands: dict) -> None:
    """``check_float_mix`` for concrete operands ``{name: array or scalar}``.

    NumPy arrays and NumPy scalars carry their dtype; Python scalars are weak
    and never conflict.
    """
    floats = {getattr(a, "dtype", None) for a in operands.values()} & set(_dt.FLOATS)
    if len(floats) > 1:
        _dt.check_float_mix(op, {k: getattr(a, "dtype", None) for k, a in operands.items()})


def refuse_float_mix(op: str, impl, names=None, promote: bool = False):
    """``impl`` wrapped so that concrete operands promote as the dtype rule says.

    The dtype rule refuses a float mix in strict mode when a graph is built; this does
    the same for concrete operands (unless ``promote``, see ``elementwise_dtype``), so
    eager code, the interpreter and graphs agree. It
    also makes a weak Python float adopt a bfloat16 operand's dtype, which NumPy
    does for its own float types only (``bf16 * 2.0`` would give float32).
    """
    floats = frozenset(_dt.FLOATS)
    native = frozenset((_dt.float32, _dt.float64, _dt.float16))

    def checked(*args, **params):
        if len(args) > 1:
            # fast path: one pass over the operands' dtypes (this runs on every eager op)
            first, mixed, weak_float = None, False, False
            for a in args:
                if type(a) is float:
                    weak_float = True
                    continue
                dt = getattr(a, "dtype", None)
                if dt is not None and dt in floats:
                    if first is None:
                        first = dt
                    elif dt != first:
                        mixed = True
            if mixed and not promote:
                labels = names or ()
                check_concrete_mix(op, {labels[i] if i < len(labels) else f"operand {i}": a
                                        for i, a in enumerate(args)})
            if weak_float and first is not None and first not in native:
                args = tuple(first.type(a) if type(a) is float else a for a in args)
        return impl(*args, **params)
    checked.__name__ = getattr(impl, "__name__", op)
    checked.__wrapped__ = impl
    return checked


def accumulation_dtype(dtype):
    """The dtype NumPy's ``sum``/``prod``/``cumsum``/``cumprod`` return for
    ``dtype``: bool and narrow integers widen to 64 bits, floats keep theirs."""
    if dtype is None:
        return None
    dtype = np.dtype(dtype)
    if dtype.kind in "bi" and dtype.itemsize < 8:
        return np.dtype(np.int64)
    if dtype.kind == "u" and dtype.itemsize < 8:
        return np.dtype(np.uint64)
    return dtype
