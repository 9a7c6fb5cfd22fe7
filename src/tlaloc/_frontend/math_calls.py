"""Python's ``math`` functions called with an array value inside a differentiated function.

``math.exp(theta)`` on a scalar argument is common in plain Python code; autograd and JAX refuse
it (their traced values are not floats). Here each such call becomes the ``tlaloc.numpy`` (or
``tlaloc.scipy.special``) function of the same mathematics, computed as ``math`` computes it:

* every array argument is converted to float64 first (``math`` converts its arguments to C
  doubles), so ``math.exp`` of a float32 or integer value is a float64, as the original's float is;
* the argument must hold one number: a known shape with more than one element is refused here,
  at the call's file:line:col, with the NumPy function to use instead; a shape known only at the
  first call is checked there (the rest of the function is then built for the arguments' shapes);
  a size-1 array is accepted, as ``math`` accepts it;
* complex values are refused (``math`` raises TypeError for them).

The result is a 0-d float64 array where the original gives a Python ``float``, with the same value
up to the last bit of the two libraries' implementations. Where ``math`` raises ValueError
("math domain error": ``math.sqrt(-1.0)``, ``math.log(0.0)``) the NumPy function gives NaN or
-inf, as NumPy does; ``math.floor``, ``ceil`` and ``trunc`` (which return ints) and the rest of the
module are refused by name.
"""
from __future__ import annotations

import math

import numpy as np

from .. import numpy as tnp
from .values import is_symbolic

#: math function -> tlaloc.numpy function of one argument
_UNARY = {"exp": "exp", "expm1": "expm1", "log1p": "log1p", "log2": "log2", "log10": "log10",
          "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tan": "tan", "asin": "arcsin", "acos": "arccos",
          "atan": "arctan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "arcsinh",
          "acosh": "arccosh", "atanh": "arctanh", "fabs": "absolute", "degrees": "degrees",
          "radians": "radians", "exp2": "exp2"}
#: math function -> tlaloc.numpy function of two arguments
_BINARY = {"atan2": "arctan2", "pow": "power", "hypot": "hypot", "copysign": "copysign"}
#: math function -> tlaloc.scipy.special function of one argument
_SPECIAL = {"erf": "erf", "erfc": "erfc", "lgamma": "gammaln", "gamma": "gamma"}


def is_math_function(fn) -> bool:
    return getattr(math, getattr(fn, "__name__", ""), None) is fn


def _numpy_name(name: str) -> str:
    return _UNARY.get(name) or _BINARY.get(name) or _SPECIAL.get(name) or name


def _check(lowerer, x, name, node):
    """Refuses an argument ``math`` would refuse, or that holds more than one number (known now)."""
    if not is_symbolic(x):
        return
    aval = x.aval
    if aval.dtype is not None and aval.dtype.kind == "c":
        raise lowerer.src.error(node, f"`math.{name}` takes a real number, but its argument is complex; "
                                      f"use np.{_numpy_name(name)}")
    if aval.shape is None and lowerer.ctx.specialisable:   # known at the first call: checked there
        from .structure import ShapeNeeded
        raise lowerer.src.error(node, f"`math.{name}` needs to know that its argument is one number", ShapeNeeded)
    if aval.shape is not None and aval.shape != () and int(np.prod(aval.shape)) != 1:
        raise lowerer.src.error(node, f"`math.{name}` takes one number, but its argument is an array of shape "
                                      f"{tuple(aval.shape)}; use np.{_numpy_name(name)}, which works elementwise")


def _float64_scalar(x):
    """x as a 0-d float64 value, as ``math`` converts it to a C double (a static number passes)."""
    if not is_symbolic(x):
        return x
    if x.aval.shape != ():
        x = tnp.reshape(x, ())
    return x if x.aval.dtype == np.float64 else tnp.asarray(x, dtype=np.float64)


def _equivalent(name: str, count: int):
    if name == "log":
        return tnp.log if count == 1 else (lambda x, base: tnp.log(x) / tnp.log(base))
    if name in _SPECIAL:
        from ..scipy import special
        return getattr(special, _SPECIAL[name])
    return getattr(tnp, _numpy_name(name))


def lower_math_call(lowerer, fn, args, kwargs, node):
    """``math.<name>(*args)`` with an array argument, as the tlaloc function computing it."""
    name = getattr(fn, "__name__", repr(fn))
    if kwargs:
        raise lowerer.src.error(node, f"`math.{name}` takes no keyword arguments")
    count = 1 if name in _UNARY or name in _SPECIAL else 2 if name in _BINARY else None
    if name == "log":
        count = len(args) if len(args) in (1, 2) else 1
    if count is None:
        hint = ("it returns an int, which has no derivative; keep the value an array (np.floor)"
                if name in ("floor", "ceil", "trunc") else "use the NumPy function of the same name")
        raise lowerer.src.error(node, f"`math.{name}` cannot take an array inside a differentiated function; {hint}")
    if len(args) != count:
        raise lowerer.src.error(node, f"`math.{name}` takes {count} argument{'s' if count > 1 else ''}, "
                                      f"got {len(args)}")
    for a in args:
        _check(lowerer, a, name, node)
    eq = _equivalent(name, count)
    return lowerer._checked(lambda *xs: eq(*[_float64_scalar(x) for x in xs]), list(args), {}, node)
