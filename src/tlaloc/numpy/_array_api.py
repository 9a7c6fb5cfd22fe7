"""The Array API standard's names that NumPy spells differently, or that tlaloc
adds for it: dtype introspection (finfo, iinfo, isdtype, can_cast, result_type,
``__array_namespace_info__``), the short elementwise names (acos ... pow),
integer bit operations, set functions, and the manipulation and search names
(concat, permute_dims, unstack, broadcast_arrays, nonzero, count_nonzero, ...).

Integer bit operations, ``nonzero`` and the ``unique_*`` family have
data-dependent or bit-level results: they run eagerly (NumPy) and are refused
by name inside transforms (``NoRuleError``). Complex numbers are not supported:
``real``/``conj`` return a real ``x`` itself and ``imag`` its zeros.
"""
from __future__ import annotations

import builtins as _builtins
from collections import namedtuple

import numpy as _np

from .. import dtypes as _dt
from ..errors import ArgumentError, NoRuleError

__array_api_version__ = "2024.12"


def _tnp():
    from .. import numpy as tnp
    return tnp


def _dtype_of(x):
    tnp = _tnp()
    if tnp._is_symbolic(x):
        return x.aval.dtype
    if isinstance(x, (_np.ndarray, _np.generic)):
        return x.dtype
    return _np.dtype(x)


# -- data types ------------------------------------------------------------------------------

finfo_object = namedtuple("finfo_object", "bits eps max min smallest_normal dtype")


def finfo(type, /):
    """Machine limits of a floating dtype (or of an array's dtype), from ``numpy.finfo``
    as Python floats: ``(bits, eps, max, min, smallest_normal, dtype)``."""
    f = _np.finfo(_dtype_of(type))
    return finfo_object(int(f.bits), float(f.eps), float(f.max), float(f.min), float(f.smallest_normal),
                        f.dtype)


def iinfo(type, /):
    """Limits of an integer dtype (or of an array's dtype): ``numpy.iinfo`` (bits, max, min, dtype)."""
    return _np.iinfo(_dtype_of(type))


_KINDS = {
    "bool": lambda d: d.kind == "b",
    "signed integer": lambda d: d.kind == "i",
    "unsigned integer": lambda d: d.kind == "u",
    "integral": lambda d: d.kind in "iu",
    "real floating": lambda d: d.kind == "f" or d == _dt.bfloat16,
    "complex floating": lambda d: d.kind == "c",
    "numeric": lambda d: d.kind in "iufc" or d == _dt.bfloat16,
}


def isdtype(dtype, kind):
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name ('bool', 'signed integer',
    'unsigned integer', 'integral', 'real floating', 'complex floating', 'numeric'),
    or a tuple of those."""
    d = _np.dtype(dtype)
    if isinstance(kind, tuple):
        return _builtins.any(isdtype(d, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ArgumentError(f"isdtype: unknown kind {kind!r}; use one of {sorted(_KINDS)}")
        return _KINDS[kind](d)
    return d == _np.dtype(kind)


def result_type(*arrays_and_dtypes):
    """NumPy's promotion of the arguments (NEP 50: Python scalars are weak); under
    ``tl.numpy_dtype_promotion("strict")`` float32 and float64 together raise ``DTypeError``."""
    dts = [_dtype_of(a) for a in arrays_and_dtypes if not isinstance(a, (_builtins.bool, int, float, complex))]
    floats = {d for d in dts if _dt.is_float(d)}
    if len(floats) > 1:
        _dt.check_float_mix("result_type", {f"argument {i}": d for i, d in enumerate(dts)})
    scalars = [a for a in arrays_and_dtypes if isinstance(a, (_builtins.bool, int, float, complex))]
    return _np.result_type(*dts, *scalars)


def can_cast(from_, to, /):
    """Whether NumPy's 'safe' casting allows ``from_`` (dtype or array) -> ``to``."""
    return _np.can_cast(_dtype_of(from_), _np.dtype(to), casting="safe")


class _Info:
    """``__array_namespace_info__()``: one CPU device; the dtypes tlaloc supports."""

    _ALL = {"bool": _dt.bool_, "int8": _dt.int8, "int32": _dt.int32, "int64": _dt.int64,
            "uint8": _dt.uint8, "uint32": _dt.uint32, "uint64": _dt.uint64,
            "float32": _dt.float32, "float64": _dt.float64,
            "complex64": _np.dtype(_np.complex64), "complex128": _np.dtype(_np.complex128)}

    def capabilities(self):
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self):
        return "cpu"

    def devices(self):
        return ["cpu"]

    def default_dtypes(self, *, device=None):
        return {"real floating": _dt.float64, "complex floating": _np.dtype(_np.complex128), "integral": _dt.int64,
                "indexing": _dt.int64}

    def dtypes(self, *, device=None, kind=None):
        if kind is None:
            return dict(self._ALL)
        return {n: d for n, d in self._ALL.items() if isdtype(d, kind)}


def __array_namespace_info__():
    return _Info()


# -- elementwise names -----------------------------------------------------------------------

def positive(x, /):
    """``+x`` (a copy of x)."""
    return _tnp().copy(x)


def pow(x1, x2, /):
    """``x1 ** x2`` (the Array API name of ``power``)."""
    return _tnp().power(x1, x2)


def _complex_eager(x):
    return not _tnp()._is_symbolic(x) and _np.iscomplexobj(x)


def real(x, /):
    """The real part: ``x`` itself for real dtypes (complex arrays only eagerly, by NumPy)."""
    return _np.real(x) if _complex_eager(x) else x


def conj(x, /):
    """The complex conjugate: ``x`` itself for real dtypes (complex arrays only eagerly)."""
    return _np.conj(x) if _complex_eager(x) else x


def imag(x, /):
    """The imaginary part: zeros like ``x`` for real dtypes (complex arrays only eagerly)."""
    return _np.imag(x) if _complex_eager(x) else _tnp().zeros_like(x)


def _eager(name, fn, why):
    def call(*args, **kwargs):
        tnp = _tnp()
        if _builtins.any(tnp._is_symbolic(a) for a in args):
            raise NoRuleError(f"{name}: no symbolic form ({why}); compute it outside the transformed function")
        return fn(*args, **kwargs)
    call.__name__ = name
    call.__doc__ = f"NumPy's ``{fn.__name__}``, eagerly; refused inside transforms ({why})."
    return call


_BITS = "an integer bit operation, with no derivative and no tlaloc primitive"
bitwise_and = _eager("bitwise_and", _np.bitwise_and, _BITS)
bitwise_or = _eager("bitwise_or", _np.bitwise_or, _BITS)
bitwise_xor = _eager("bitwise_xor", _np.bitwise_xor, _BITS)
bitwise_invert = _eager("bitwise_invert", _np.invert, _BITS)
bitwise_left_shift = _eager("bitwise_left_shift", _np.left_shift, _BITS)
bitwise_right_shift = _eager("bitwise_right_shift", _np.right_shift, _BITS)


# -- manipulation -----------------------------------------------------------------------------

def concat(arrays, /, *, axis=0):
    """Join arrays along ``axis`` (None: flattened first)."""
    tnp = _tnp()
    if axis is None:
        return tnp.concatenate([tnp.ravel(a) for a in arrays], axis=0)
    return tnp.concatenate(arrays, axis=axis)


def permute_dims(x, /, axes):
    """``transpose(x, axes)``."""
    return _tnp().transpose(x, tuple(axes))


def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple (the length must be known)."""
    tnp = _tnp()
    n = tnp.shape(x)[axis]
    if type(n) is not int:
        from ..errors import RankUnknownError     # the front end builds again at the first call
        raise RankUnknownError("unstack: the axis length is unknown at definition time; annotate the argument")
    lead = (slice(None),) * axis if axis >= 0 else (Ellipsis,)
    tail = () if axis >= 0 else (slice(None),) * (-axis - 1)
    return tuple(tnp._getitem(x, lead + (i,) + tail) for i in range(n))


def broadcast_shapes(*shapes):
    """The broadcast of the shapes (NumPy rules)."""
    return _np.broadcast_shapes(*shapes)


def broadcast_arrays(*arrays):
    """The arrays broadcast against each other (a list)."""
    tnp = _tnp()
    if not _builtins.any(tnp._is_symbolic(a) for a in arrays):
        return [_np.array(a) for a in _np.broadcast_arrays(*arrays)]
    shape = broadcast_shapes(*(tnp.shape(a) for a in arrays))
    return [tnp.broadcast_to(a, shape) for a in arrays]


def empty_like(x, /, *, dtype=None, device=None):
    """Zeros like ``x`` (tlaloc's ``empty`` is zero-filled)."""
    return _tnp().zeros_like(x, dtype=dtype)


def from_dlpack(x, /, *, device=None, copy=None):
    """A NumPy array from a DLPack-capable object (``numpy.from_dlpack``)."""
    return _np.from_dlpack(x)


# -- searching and sets -----------------------------------------------------------------------

def count_nonzero(x, /, *, axis=None, keepdims=False):
    """The number of nonzero elements over ``axis`` (int64)."""
    tnp = _tnp()
    return tnp.sum(tnp.astype(tnp.not_equal(x, 0), _np.int64), axis=axis, keepdims=keepdims)


_DATA = "its output shape depends on the values"
def _nonzero(x):
    if _np.ndim(x) == 0:
        raise ValueError("nonzero: a 0-d array has no indices; use atleast_1d(x) first (Array API)")
    return _np.nonzero(_np.asarray(x))


nonzero = _eager("nonzero", _nonzero, _DATA)

UniqueAll = namedtuple("UniqueAll", "values indices inverse_indices counts")
UniqueCounts = namedtuple("UniqueCounts", "values counts")
UniqueInverse = namedtuple("UniqueInverse", "values inverse_indices")


def _unique(x):
    x = _np.asarray(x)
    vals, idx, inv, cnt = _np.unique(x.reshape(-1), return_index=True, return_inverse=True, return_counts=True)
    nan = _np.isnan(vals) if vals.dtype.kind == "f" else _np.zeros(vals.shape, bool)
    if nan.any():          # the Array API counts each NaN as a distinct value
        first = vals[~nan]
        where_nan = _np.flatnonzero(_np.isnan(x.reshape(-1)))
        vals = _np.concatenate([first, x.reshape(-1)[where_nan]])
        idx = _np.concatenate([idx[~nan], where_nan])
        cnt = _np.concatenate([cnt[~nan], _np.ones(where_nan.size, cnt.dtype)])
        inv = inv.copy()
        inv[where_nan] = _np.arange(first.size, first.size + where_nan.size)
    return vals, idx.astype(_np.int64), inv.reshape(x.shape).astype(_np.int64), cnt.astype(_np.int64)


unique_all = _eager("unique_all", lambda x: UniqueAll(*_unique(x)), _DATA)
unique_counts = _eager("unique_counts", lambda x: UniqueCounts(_unique(x)[0], _unique(x)[3]), _DATA)
unique_inverse = _eager("unique_inverse", lambda x: UniqueInverse(_unique(x)[0], _unique(x)[2]), _DATA)
unique_values = _eager("unique_values", lambda x: _unique(x)[0], _DATA)


def isin(x1, x2, /, *, invert=False):
    """Whether each element of ``x1`` occurs in ``x2`` (bool, shape of x1)."""
    tnp = _tnp()
    hit = tnp.any(tnp.equal(tnp.expand_dims(x1, -1), tnp.ravel(x2)), axis=-1)
    return tnp.logical_not(hit) if invert else hit


# -- linear algebra names of the main namespace ----------------------------------------------

def vecdot(x1, x2, /, *, axis=-1):
    """Σ conj(x1)·x2 over ``axis`` after broadcasting, in the operands' promoted dtype.

    Raises:
      ShapeError: the two lengths along ``axis`` differ (known sizes)."""
    tnp = _tnp()
    n1, n2 = tnp.shape(x1)[axis], tnp.shape(x2)[axis]
    if type(n1) is int and type(n2) is int and n1 != n2:
        from ..errors import ShapeError
        raise ShapeError(f"vecdot: x1 has length {n1} and x2 length {n2} along axis {axis}; they must be equal")
    prod = tnp.multiply(conj(x1), x2)
    dt = prod.aval.dtype if tnp._is_symbolic(prod) else _np.asarray(prod).dtype
    return tnp.sum(prod, axis=axis, dtype=dt)


def matrix_transpose(x, /):
    """Swap the last two axes."""
    return _tnp().swapaxes(x, -1, -2)


def cross(x1, x2, /, *, axis=-1):
    """The cross product of 3-vectors along ``axis`` (broadcast)."""
    tnp = _tnp()
    a = [tnp.take(x1, _np.array(i), axis=axis) for i in range(3)]
    b = [tnp.take(x2, _np.array(i), axis=axis) for i in range(3)]
    c = [tnp.subtract(tnp.multiply(a[1], b[2]), tnp.multiply(a[2], b[1])),
         tnp.subtract(tnp.multiply(a[2], b[0]), tnp.multiply(a[0], b[2])),
         tnp.subtract(tnp.multiply(a[0], b[1]), tnp.multiply(a[1], b[0]))]
    return tnp.stack(c, axis=axis)
