"""Abstract values: what DXIR knows about a value before it runs.

A dim is an ``int``, a symbolic name (``str``, e.g. ``"n"``) or ``None``
(unknown). A shape of ``None`` means the rank itself is unknown: graphs built at
definition time from unannotated code are rank- and dtype-polymorphic and are
specialised when concrete arguments arrive (``jit``).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Union

import numpy as np

from .. import dtypes as _dt

Dim = Union[int, str, None]


@dataclasses.dataclass(frozen=True)
class AbstractValue:
    """dtype, dims and optional axis names of one DXIR value.

    Attributes:
      dtype: a NumPy dtype, or ``None`` when unknown.
      shape: tuple of dims, or ``None`` when the rank is unknown.
      names: one axis name (or ``None``) per dim, or ``None`` when untracked.
      weak: True for Python scalars, which adopt the other operand's dtype.
    """
    dtype: Optional[np.dtype] = None
    shape: Optional[tuple] = None
    names: Optional[tuple] = None
    weak: bool = False

    @property
    def rank(self) -> Optional[int]:
        return None if self.shape is None else len(self.shape)

    @property
    def is_concrete(self) -> bool:
        return (self.dtype is not None and self.shape is not None
                and all(type(d) is int for d in self.shape))

    def with_(self, **kw) -> "AbstractValue":
        return dataclasses.replace(self, **kw)

    def __str__(self) -> str:
        dt = _dt.short_name(self.dtype) + ("~" if self.weak else "")
        if self.shape is None:
            return f"{dt}[...]"
        dims = []
        for i, d in enumerate(self.shape):
            s = "?" if d is None else str(d)
            if self.names is not None and self.names[i] is not None:
                s = f"{self.names[i]}={s}" if d is not None and d != self.names[i] else self.names[i]
            dims.append(s)
        return f"{dt}[{','.join(dims)}]"


UNKNOWN = AbstractValue()


def of(value) -> AbstractValue:
    """The abstract value of a concrete value (array or Python scalar)."""
    if isinstance(value, (bool, np.bool_)) and not isinstance(value, np.ndarray):
        return AbstractValue(_dt.bool_, (), weak=type(value) is bool)
    if type(value) is int:         # weak: adopts the other operand's dtype (NEP 50)
        return AbstractValue(np.dtype(np.int64), (), weak=True)
    if type(value) is float:
        return AbstractValue(np.dtype(np.float64), (), weak=True)
    arr = np.asarray(value)
    return AbstractValue(arr.dtype, tuple(arr.shape))
