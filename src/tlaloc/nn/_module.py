"""``Module``: the base of every ``tl.nn`` layer. A module is a frozen dataclass,
hence a pytree (``tlaloc._pytree`` treats dataclass instances as nodes): its
array fields are leaves, and fields declared with ``static_field()`` are part
of the structure (hyperparameters such as ``num_heads``).

A layer is written as::

    @dataclasses.dataclass(frozen=True, eq=False, repr=False)
    class Scale(nn.Module):
        weight: np.ndarray                      # (features,)
        features: int = nn.static_field()

        def __init__(self, features, *, dtype=np.float32):
            self._set(weight=np.ones(features, dtype), features=features)

        def __call__(self, x):                  # (..., features) -> (..., features)
            return x * self.weight

No metaclass: ``__init__`` takes hyperparameters (and a ``key`` where weights
are random) and sets fields with ``_set`` (the dataclass is frozen). To build a
module from given arrays, or change one, use ``replace``. Static field values
must be hashable (they key the caches of ``grad``, ``capture`` and ``jit``).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import _pytree
from .. import dtypes as _dt
from .. import random as _random
from .._prims import checks as _checks
from ..errors import ArgumentError, ShapeError


def static_field(**kwargs):
    """A dataclass field that is structure, not a leaf (a hyperparameter)."""
    return dataclasses.field(metadata={"static": True}, **kwargs)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Module:
    """Base class of ``tl.nn`` layers (see the module docstring)."""

    def _set(self, **fields) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def replace(self, **changes) -> "Module":
        """A copy with some fields replaced, e.g. ``lin.replace(weight=w)``.

        Unlike ``dataclasses.replace`` it does not call ``__init__`` (which
        takes hyperparameters), so it also works for layers with custom init.
        """
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ArgumentError(f"{type(self).__name__}.replace: no field(s) {unknown}; fields are {sorted(names)}")
        new = object.__new__(type(self))
        for f in dataclasses.fields(self):
            object.__setattr__(new, f.name, changes.get(f.name, getattr(self, f.name)))
        return new

    def __repr__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name, None)
            parts.append(f"{f.name}={_short(v)}")
        return f"{type(self).__name__}({', '.join(parts)})"


def _short(v) -> str:
    if isinstance(v, np.ndarray) or (hasattr(v, "shape") and hasattr(v, "dtype")):
        return f"{np.dtype(v.dtype).name}{list(v.shape)}"
    if isinstance(v, tuple) and v and all(isinstance(x, Module) for x in v):
        return "(" + ", ".join(_short(x) for x in v) + ")"
    if callable(v) and hasattr(v, "__name__") and not isinstance(v, Module):
        return v.__name__
    return repr(v)


def as_key(key, who: str):
    """A ``tlaloc.random`` key from a key (uint32 ``(2,)``) or an int seed."""
    if key is None:
        raise ArgumentError(f"{who}: needs `key=` (a tlaloc.random key or an int seed) to initialise its weights")
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return _random.key(int(key))
    k = np.asarray(key)
    if k.shape != (2,) or k.dtype != np.uint32:
        raise ArgumentError(f"{who}: key must be a tlaloc.random key (uint32, shape (2,)) or an int seed, "
                            f"got {k.dtype}{list(k.shape)}")
    return k


def size_arg(value, name: str, who: str, meaning: str, example: str, *, minimum: int = 1) -> int:
    """``value`` as an int; ArgumentError naming ``name`` unless it is an int >= ``minimum``
    (a bool, a float such as 2.5 or 2.0, a string: refused, never rounded)."""
    kind = "a positive int" if minimum == 1 else f"an int >= {minimum}"
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise ArgumentError(f"{who}: {name} must be {kind} ({meaning}), got {value!r} of type "
                            f"{type(value).__name__}; pass an int, e.g. {example}")
    if value < minimum:
        raise ArgumentError(f"{who}: {name} must be {kind} ({meaning}), got {value}; pass a value >= {minimum}, "
                            f"e.g. {example}")
    return int(value)


def split_key(key, n: int):
    """``n`` independent keys (a list) from ``key``."""
    ks = _random.split(key, n)                 # (n, 2); indexed, so symbolic keys work too
    return [ks[i] for i in range(n)]


def known_shape(x):
    """The shape of ``x`` as a tuple of ints, or None where it is not known yet (shape-generic code)."""
    try:
        shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
    except Exception:                          # a rank unknown while the graph is built
        return None
    return shape if all(type(d) is int for d in shape) else None


def known_dtype(x):
    """The dtype of ``x``, or None where it is not known yet (a Python scalar or list: NumPy's)."""
    aval = getattr(x, "aval", None)
    if aval is not None:
        return getattr(aval, "dtype", None)
    try:
        return np.result_type(x)
    except (TypeError, ValueError):
        return None


def check_input(x, who: str, what: str, *, trailing: tuple = (), rank=None):
    """``x``, refused (ShapeError) if its shape does not end in ``trailing`` (or lacks the ``rank``),
    and (ArgumentError) if it is an integer or bool array (NumPy would promote it to float64):
    broadcasting would otherwise give a result of another shape, or a raw NumPy error.

    A known shape is checked here. Where it is not known yet (``tl.grad``/``tl.jit`` lower the
    code before the shapes are known) the result is ``x`` through a check node, which refuses
    the shape when the graph runs on arrays or ``tl.jit`` specialises it: use the returned value.
    """
    dtype = known_dtype(x)
    msg = _checks.input_dtype_message(dtype, who=who, what=what)
    if msg is not None:
        raise ArgumentError(msg)
    shape = known_shape(x)
    if shape is None or dtype is None:
        return _checks.check_input_shape(x, who, what, trailing, rank)
    msg = _checks.input_shape_message(shape, who=who, what=what, trailing=tuple(trailing), rank=rank)
    if msg is not None:
        raise ShapeError(msg)
    return x


def num_params(tree) -> int:
    """Total number of array elements among the leaves of ``tree``."""
    return int(sum(np.size(x) for x in _pytree.leaves(tree)))


def astype(tree, dtype):
    """``tree`` with every floating-point leaf converted to ``dtype``."""
    dtype = np.dtype(dtype)

    def conv(x):
        a = np.asarray(x)
        return a.astype(dtype) if _dt.is_float(a.dtype) else x     # bfloat16's kind is 'V', not 'f'

    return _pytree.tree_map(conv, tree)


def to_numpy(tree):
    """``tree`` with every leaf a ``numpy.ndarray`` (device arrays returned by ``tl.jit``
    are copied to the host), e.g. to run a compiled-trained model eagerly."""
    return _pytree.tree_map(np.asarray, tree)
