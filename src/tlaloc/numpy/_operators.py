"""NumPy's operators, methods and protocols on symbolic values (``Value``).

``tlaloc.numpy`` calls ``install_operators()`` once it is complete: ``x + y``,
``x @ y``, ``x.T``, ``x.sum()``, ``x[i]``, ``x.shape``, ``np.tanh(x)`` on a
``Value`` record the same DXIR nodes as the ``tlaloc.numpy`` functions. (The DXIR
layer defines ``Value``; the operators live here, in the layer that defines what
they mean, so the DXIR layer never imports ``tlaloc.numpy``.)
"""
from __future__ import annotations

from .._core.builder import Value
from .._prims.elementwise import integer_pow
from ._ufunc_dispatch import array_function, array_ufunc


def install_operators() -> None:
    from .. import numpy as tnp
    Value.shape = property(lambda a: tnp._shape_of(a))
    Value.__array_ufunc__ = array_ufunc
    Value.__array_function__ = array_function
    binops = {
        "add": tnp.add, "sub": tnp.subtract, "mul": tnp.multiply, "truediv": tnp.divide,
        "pow": tnp.power, "matmul": tnp.matmul, "floordiv": tnp.floor_divide, "mod": tnp.remainder,
    }
    for name, fn in binops.items():
        setattr(Value, f"__{name}__", (lambda f: lambda a, b: f(a, b))(fn))
        setattr(Value, f"__r{name}__", (lambda f: lambda a, b: f(b, a))(fn))
    cmps = {"lt": tnp.less, "le": tnp.less_equal, "gt": tnp.greater, "ge": tnp.greater_equal,
            "eq": tnp.equal, "ne": tnp.not_equal}
    for name, fn in cmps.items():
        setattr(Value, f"__{name}__", (lambda f: lambda a, b: f(a, b))(fn))
    def _pow(a, b):
        if isinstance(b, int) and not isinstance(b, bool):
            return integer_pow(a, b)
        return tnp.power(a, b)
    Value.__pow__ = _pow
    Value.__neg__ = lambda a: tnp.negative(a)
    Value.__pos__ = lambda a: tnp.positive(a)       # a copy, as NumPy's `+a`
    Value.__abs__ = lambda a: tnp.abs(a)
    Value.__invert__ = lambda a: tnp.logical_not(a)
    Value.__and__ = lambda a, b: tnp.logical_and(a, b)
    Value.__or__ = lambda a, b: tnp.logical_or(a, b)
    Value.__getitem__ = lambda a, idx: tnp._getitem(a, idx)
    Value.T = property(lambda a: tnp.transpose(a))
    Value.mT = property(lambda a: tnp.swapaxes(a, -1, -2))
    for m in ("sum", "mean", "max", "min", "prod", "std", "argmax", "argmin",
              "cumsum", "cumprod", "transpose", "reshape", "astype", "clip", "dot",
              "squeeze", "ravel", "flatten", "swapaxes", "any", "all", "copy",
              "argsort", "repeat", "take", "diagonal", "trace", "searchsorted"):
        setattr(Value, m, (lambda f: lambda self, *a, **k: f(self, *a, **k))(getattr(tnp, m)))
