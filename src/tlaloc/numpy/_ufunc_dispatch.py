"""NumPy calls on symbolic values: ``np.tanh(value)``, ``np.sum(value)``.

``Value.__array_ufunc__`` and ``__array_function__`` map NumPy's functions onto
``tlaloc.numpy`` by name, so model code written with NumPy traces unchanged.
A NumPy function without an equivalent is refused by name.
"""
from __future__ import annotations

from ..errors import NoRuleError


def array_ufunc(self, ufunc, method, *inputs, **kwargs):
    from .. import numpy as tnp
    if method != "__call__" or kwargs.get("out") is not None:
        raise NoRuleError(f"numpy.{ufunc.__name__}.{method} is not supported on symbolic arrays")
    fn = getattr(tnp, ufunc.__name__, None)
    if fn is None:
        raise NoRuleError(f"numpy.{ufunc.__name__} has no tlaloc equivalent; use tlaloc.numpy")
    kwargs.pop("out", None)
    return fn(*inputs, **kwargs)


def array_function(self, func, types, args, kwargs):
    from .. import numpy as tnp
    mod = func.__module__ or ""
    target = tnp.linalg if "linalg" in mod else tnp
    fn = getattr(target, func.__name__, None)
    if fn is None:
        raise NoRuleError(f"numpy.{func.__name__} has no tlaloc equivalent; use tlaloc.numpy")
    return fn(*args, **kwargs)
