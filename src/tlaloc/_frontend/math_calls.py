"""Python's ``math`` functions called with an array value inside a differentiated function.

``math.exp(theta)`` on a scalar argument is common in plain Python code; autograd and JAX refuse
it (their traced values are not floats). Here each such call becomes the ``tlaloc.numpy`` (or
``tlaloc.scipy.special``) function of the same mathematics, computed as ``math`` computes it:

* every array argument is converted to float64 first (``math`` converts its arguments to C
  doubles), so ``math.exp`` of a float32 or integer value is a float64, as the original's float is;
* the argument must be one number, a 0-d array (NumPy 2.4 refuses to convert anything else to a
  Python float): another known shape is refused here, at the call's file:line:col, with the NumPy
  function to use instead; a shape known only at the first call is checked there (the rest of the
  function is then built for the arguments' shapes). ``x.item()`` takes any size-1 array, as NumPy;
* complex values are refused (``math`` raises TypeError for them).

The builtin ``float(x)`` and the method ``x.item()`` are the same conversion (:func:`lower_float`,
:func:`lower_item`): the identity on the number, so its derivative flows through.

The result is a 0-d float64 array where the original gives a Python ``float``, with the same value
up to the last bit of the two libraries' implementations (``lgamma`` is SciPy's ``gammaln``, within
~1e-13 of the C library's). Being float64, it is not the weak Python float NumPy would cast to a
float32 operand by NumPy's promotion. So an arithmetic operator (``+ - * / ** // %``) that meets
such a value and an array of another float dtype first converts the value to the array's dtype,
as NumPy converts the Python float (``math.exp(x) + x`` with a float32 ``x`` is float32, and so
is its derivative); the value keeps this role through arithmetic with Python numbers. Where ``math`` raises ValueError
("math domain error": ``math.sqrt(-1.0)``, ``math.log(0.0)``) the NumPy function gives NaN or
-inf, as NumPy does; ``math.floor``, ``ceil`` and ``trunc`` (which return ints) and the rest of the module are
refused by name.
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


def _check(lowerer, x, name, node, instead=None, size_one=False):
    """Refuses an argument ``math`` would refuse: a container, a complex value, an array that is
    not 0-d (NumPy 2.4: "only 0-dimensional arrays can be converted to Python scalars"), or, with
    size_one (``x.item()``), one holding more than one number. name: what is called, as the message
    shows it; instead: the elementwise NumPy spelling."""
    instead = instead or f"np.{_numpy_name(name.removeprefix('math.'))}"
    if isinstance(x, (list, tuple, dict)):
        raise lowerer.src.error(node, f"`{name}` takes a real number, not a {type(x).__name__}; use {instead}")
    if not is_symbolic(x):
        return
    aval = x.aval
    if aval.dtype is not None and aval.dtype.kind == "c":
        raise lowerer.src.error(node, f"`{name}` takes a real number, but its argument is complex; use {instead}")
    known = aval.shape is not None and all(isinstance(d, int) for d in aval.shape)
    if not known:
        if lowerer.ctx.specialisable:                  # known at the first call: checked there
            from .structure import ShapeNeeded
            raise lowerer.src.error(node, f"`{name}` needs to know that its argument is one number", ShapeNeeded)
        raise lowerer.src.error(node, f"`{name}` takes one number, but the size of its argument depends on the "
                                      f"data (e.g. a boolean mask); use {instead}")
    if aval.shape != () and not (size_one and int(np.prod(aval.shape)) == 1):
        what = "one number" if size_one else "a number (a 0-d array)"
        raise lowerer.src.error(node, f"`{name}` takes {what}, but its argument is an array of shape "
                                      f"{tuple(aval.shape)}; use {instead}, which works elementwise")


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
                if name in ("floor", "ceil", "trunc") else "write it with NumPy / scipy.special functions")
        raise lowerer.src.error(node, f"`math.{name}` cannot take an array inside a differentiated function; {hint}")
    if len(args) != count:
        raise lowerer.src.error(node, f"`math.{name}` takes {count} argument{'s' if count > 1 else ''}, "
                                      f"got {len(args)}")
    for a in args:
        _check(lowerer, a, f"math.{name}", node)
    eq = _equivalent(name, count)
    return _python_float(lowerer, lowerer._checked(lambda *xs: eq(*[_float64_scalar(x) for x in xs]),
                                                   list(args), {}, node))


def lower_float(lowerer, x, node):
    """The builtin ``float(x)`` of a one-number array value: that number as a 0-d float64."""
    _check(lowerer, x, "float", node, instead="x.astype(np.float64)")
    return _python_float(lowerer, lowerer._checked(_float64_scalar, [x], {}, node))


def _python_float(lowerer, v):
    """Record ``v`` as standing for a Python float (see the module docstring)."""
    if is_symbolic(v):
        lowerer.ctx.python_floats.add(v.var.id)
    return v


def is_python_float(lowerer, v) -> bool:
    return is_symbolic(v) and v.var.id in lowerer.ctx.python_floats


def weak_operands(lowerer, a, b, node):
    """``(a, b)`` for an arithmetic operator, with an operand that stands for a Python float
    converted to the other operand's float dtype, as NumPy converts a Python float (NEP 50).

    Raises ShapeNeeded (through the caller's first-call build) where the other dtype is not
    known yet and can be at the first call."""
    pa, pb = is_python_float(lowerer, a), is_python_float(lowerer, b)
    if pa == pb:
        return a, b
    value, other = (a, b) if pa else (b, a)
    if not is_symbolic(other):
        return a, b                      # a Python number or a constant array: NumPy's rules as they are
    dt = other.aval.dtype
    if dt is None:
        if lowerer.ctx.specialisable:
            from .structure import ShapeNeeded
            raise lowerer.src.error(node, "a `math` result meets an array whose dtype is known at the first "
                                          "call", ShapeNeeded)
        return a, b
    if dt.kind != "f" or dt == np.float64 or other.aval.weak:
        return a, b
    value = tnp.asarray(value, dtype=dt)
    return (value, b) if pa else (a, value)


def result_is_python_float(lowerer, a, b, out):
    """After ``a op b``: a Python float op a Python number is a Python float."""
    pa, pb = is_python_float(lowerer, a), is_python_float(lowerer, b)
    if (pa and (pb or isinstance(b, (int, float)))) or (pb and isinstance(a, (int, float))):
        _python_float(lowerer, out)
    return out


def lower_int(lowerer, x, node):
    """The builtin ``int(x)`` of a one-number array value (``int(np.argmax(d))``): that number as a 0-d
    int64, truncated towards zero from a float as Python does (no derivative flows through it)."""
    _check(lowerer, x, "int", node, instead="x.astype(np.int64)")
    dtype = x.aval.dtype
    if dtype is None and lowerer.ctx.specialisable:
        from .structure import ShapeNeeded
        raise lowerer.src.error(node, "`int(x)` needs the dtype of the array; it is known at the first call",
                                ShapeNeeded)

    def as_int(v):
        v = v if v.aval.shape == () else tnp.reshape(v, ())
        if v.aval.dtype is not None and v.aval.dtype.kind == "f":
            v = tnp.trunc(tnp.stop_gradient(v))
        return v.astype(np.int64)
    return lowerer._checked(as_int, [x], {}, node)


def lower_item(lowerer, x, node):
    """``x.item`` of an array value: a function giving its one number (a 0-d float64 for a float
    array, as Python's float is; an integer or bool array's 0-d value as it is)."""
    def item(*args):
        if args:
            raise lowerer.src.error(node, "`x.item(index)` inside a differentiated function: index the array "
                                          "(`x[i]`) instead")
        _check(lowerer, x, "x.item()", node, instead="an index (`x[i]`) or the array itself", size_one=True)
        dtype = x.aval.dtype
        if dtype is None and lowerer.ctx.specialisable:
            from .structure import ShapeNeeded
            raise lowerer.src.error(node, "`x.item()` needs the dtype of the array; it is known at the first call",
                                    ShapeNeeded)
        if dtype is not None and dtype.kind in "iub":
            return lowerer._checked(lambda v: v if v.aval.shape == () else tnp.reshape(v, ()), [x], {}, node)
        return lowerer._checked(_float64_scalar, [x], {}, node)
    return item
