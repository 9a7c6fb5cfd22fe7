"""A ``tl.jit`` call's signature: its arguments split into statics and pytree leaves, their avals,
and why a signature compiles anew (``TLALOC_LOG_COMPILES=1`` logs it).

The cache key of a call is ``(statics, trees, ((dtype, shape, weak) per leaf))``; see
:meth:`tlaloc._jit.api.Jitted._prepare`.
"""
from __future__ import annotations

import numpy as np

from .. import _pytree
from .._core.aval import AbstractValue
from ..errors import ArgumentError


def array_types() -> frozenset:
    """The array types the XLA back end takes as leaves: NumPy arrays and jaxlib's device arrays."""
    types = [np.ndarray]
    try:
        from jaxlib import _jax
        types.append(_jax.ArrayImpl)
    except Exception:                                      # pragma: no cover
        pass
    return frozenset(types)


def iree_array_types() -> frozenset:
    """The array types the IREE back end takes as leaves: NumPy arrays and IREE's device arrays."""
    try:
        from iree.runtime import DeviceArray
        return frozenset({np.ndarray, DeviceArray})
    except ImportError:                                    # pragma: no cover
        return frozenset({np.ndarray})


def as_tuple(nums, name: str) -> tuple:
    """``static_argnums``/``donate_argnums`` as a tuple of ints; ArgumentError naming ``name`` otherwise."""
    if nums is None:
        return ()
    if isinstance(nums, (int, np.integer)) and not isinstance(nums, bool):
        return (int(nums),)
    try:
        return tuple(int(a) for a in nums)
    except TypeError:
        raise ArgumentError(f"jit: {name} must be an int or a tuple of ints, got {nums!r}") from None


def leaf_aval(x) -> AbstractValue:
    """The aval of one argument leaf: an array's dtype and shape, or a weak scalar for a Python number."""
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        if type(x) is int and not -2 ** 63 <= x < 2 ** 63:
            # regression: 2**63 wrapped to -2**63 + 1 silently, and 2**64 + 5 became an object array
            raise ArgumentError(f"jit: the Python int {x} does not fit in int64; pass a float, or an array of an "
                                f"explicit dtype")
        # a Python number is weak, as in the interpreter: it adopts the other operand's dtype
        return AbstractValue(np.asarray(x).dtype, (), weak=True)
    if isinstance(x, (str, bytes)):
        # regression: a str in a dict argument leaked an internal ShapeNeeded, one in a dataclass
        # "no StableHLO type for dtype <U1"
        raise ArgumentError(f"jit: the str {x!r:.40} is inside an argument's structure (a dict, list or dataclass "
                            f"field); a compiled program takes arrays there. Pass it as an argument of its own "
                            f"(a str argument is static), or close over it")
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        return AbstractValue(np.dtype(x.dtype), tuple(int(d) for d in x.shape))
    try:
        arr = np.asarray(x)
    except Exception:
        raise ArgumentError(f"jit: expected an array or a number, got {type(x).__name__}") from None
    if arr.dtype == object:
        raise ArgumentError(f"jit: expected an array or a number, got {type(x).__name__}")
    return AbstractValue(arr.dtype, arr.shape)


def split_args(args: tuple, static_argnums: tuple, name: str) -> tuple:
    """``(statics, trees, leaves)``: ``((position, value), ...)`` of the static arguments, one TreeDef
    per positional argument (None for a static one) and the leaves of the others, in order.

    Raises ArgumentError for a static position out of range or an unhashable static value."""
    n = len(args)
    static = tuple(sorted(a % n for a in static_argnums)) if n else ()
    for a in static_argnums:
        if not -n <= a < n:
            raise ArgumentError(f"jit: static_argnums={a} but {name} got {n} positional arguments")
    statics = []
    for a in static:
        try:
            hash(args[a])
        except TypeError:
            raise ArgumentError(f"jit: static argument {a} ({type(args[a]).__name__}) must be hashable; "
                                f"pass arrays as ordinary arguments") from None
        statics.append((a, args[a]))
    dyn, trees = [], []
    for k, a in enumerate(args):
        if k in static:
            trees.append(None)
            continue
        leaves, tree = _pytree.flatten(a)
        dyn.extend(leaves)
        trees.append(tree)
    return tuple(statics), trees, dyn


def compile_reason(key, seen: list, rows: dict) -> str:
    """Why ``key`` compiles: first call, residual stacks grown, or what differs from the keys in ``seen``."""
    if not seen:
        return "first call"
    if key in rows and key in seen:
        return f"residual stacks of a reverse-mode while grown to {rows[key]} trips"
    statics, trees, sig = key
    same_tree = [k for k in seen if k[1] == trees]
    if not same_tree:
        return "new argument structure"
    if all(k[0] != statics for k in same_tree):
        return "new static value"
    same = [k for k in same_tree if k[0] == statics]
    shapes = tuple(s[1] for s in sig)
    if all(tuple(s[1] for s in k[2]) != shapes for k in same):
        return "new shape"
    return "new dtype"


__all__ = ["array_types", "as_tuple", "compile_reason", "iree_array_types", "leaf_aval", "split_args"]
