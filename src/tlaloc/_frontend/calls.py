"""Resolving what a call in user code means.

* ``tlaloc.numpy`` functions and ``Value`` methods: called directly (they record nodes).
* NumPy functions (``np.tanh``, ``np.linalg.solve``): mapped by name onto
  ``tlaloc.numpy``; with only static arguments they simply run.
* user Python functions and nested ``def``s: their source is lowered too, inline.
* transformed functions (``tl.grad(f)``): their DXIR graph is inlined.
* a few builtins (``len``, ``range``, ``abs``, ``min``, ``max``, ``sum``, ``zip``,
  ``enumerate``, ...), with static or symbolic arguments.
Anything else that receives a symbolic array is refused by name.
"""
from __future__ import annotations

import builtins
import types

import numpy as np

from .. import numpy as tnp
from .._prims import misc as _misc
from .values import LocalFunction, SymbolicRange, is_symbolic


def _any_symbolic(args, kwargs) -> bool:
    from .. import _pytree
    leaves = _pytree.leaves((list(args), dict(kwargs)))
    return any(is_symbolic(x) for x in leaves)


def numpy_equivalent(fn):
    """The ``tlaloc.numpy`` function for a NumPy function object, or None."""
    name = getattr(fn, "__name__", None)
    if name is None:
        return None
    mod = getattr(fn, "__module__", None) or ""
    if isinstance(fn, np.ufunc) or mod.startswith("numpy"):
        if "linalg" in mod:
            return getattr(tnp.linalg, name, None)
        if mod.startswith("numpy.fft"):
            return getattr(tnp.fft, name, None)
        return getattr(tnp, name, None)
    return None


def is_numpy_callable(fn) -> bool:
    mod = getattr(fn, "__module__", None) or ""
    return isinstance(fn, np.ufunc) or mod.startswith("numpy")


def is_tlaloc_callable(fn) -> bool:
    mod = getattr(fn, "__module__", None) or ""
    return mod.startswith("tlaloc.numpy") or mod.startswith("tlaloc._prims") or \
        getattr(fn, "__self__", None).__class__.__module__ == "tlaloc._core.primitive"


def symbolic_len(x):
    r = x.aval.rank
    if r == 0:
        raise TypeError("len() of a 0-d array")
    if r is not None and type(x.aval.shape[0]) is int:
        return x.aval.shape[0]
    return _misc.dim_size(x, 0)


def builtin_call(fn, args, kwargs):
    """Symbolic-aware versions of the builtins user code calls; None if not handled."""
    if fn is builtins.len and len(args) == 1 and is_symbolic(args[0]):
        return True, symbolic_len(args[0])
    if fn is builtins.range and any(is_symbolic(a) for a in args):
        if len(args) == 1:
            return True, SymbolicRange(0, args[0], 1)
        return True, SymbolicRange(args[0], args[1], args[2] if len(args) > 2 else 1)
    if fn is builtins.abs and len(args) == 1 and is_symbolic(args[0]):
        return True, tnp.abs(args[0])
    if fn in (builtins.max, builtins.min) and len(args) >= 2 and any(is_symbolic(a) for a in args):
        op = tnp.maximum if fn is builtins.max else tnp.minimum
        out = args[0]
        for a in args[1:]:
            out = op(out, a)
        return True, out
    if fn is builtins.sum and len(args) >= 1 and not is_symbolic(args[0]):
        items = list(args[0])
        if any(is_symbolic(i) for i in items):
            out = args[1] if len(args) > 1 else 0
            for i in items:
                out = out + i
            return True, out
    if fn is builtins.sum and len(args) == 1 and is_symbolic(args[0]):
        return True, tnp.sum(args[0], axis=0)
    if fn is builtins.pow and len(args) == 2 and any(is_symbolic(a) for a in args):
        return True, args[0] ** args[1]
    return False, None


def is_user_function(fn) -> bool:
    if isinstance(fn, LocalFunction):
        return True
    if not isinstance(fn, types.FunctionType):
        return False
    mod = getattr(fn, "__module__", "") or ""
    return not (mod.startswith("tlaloc.") or mod.startswith("numpy") or mod == "builtins")
