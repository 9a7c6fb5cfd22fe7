"""``tlaloc.numpy``: the NumPy / Array-API names, built from tlaloc's primitives.

Every function works eagerly on ``numpy.ndarray`` (returning ``numpy.ndarray``)
and symbolically inside ``grad``/``jit``/``vmap`` (recording DXIR). NumPy
semantics apply (broadcasting, NEP 50 weak Python scalars, ``float32 + float64``
is float64); ``tl.numpy_dtype_promotion("strict")`` refuses a float mix instead.
"""
from __future__ import annotations

import builtins as _builtins
import operator as _operator

import numpy as _np

from .. import _prims  # noqa: F401
from .. import dtypes as _dt
from .._prims import elementwise as _ew
from .._prims import shape_ops as _sh
from .._prims import indexing as _ix
from .._prims import selection as _sel
from .._prims import misc as _misc
from ..errors import RankUnknownError, ShapeError
from . import lax  # noqa: F401
from ._pad import pad  # noqa: F401

float64, float32, float16, bfloat16 = _dt.float64, _dt.float32, _dt.float16, _dt.bfloat16
int8, int32, int64, uint32, bool_ = _dt.int8, _dt.int32, _dt.int64, _dt.uint32, _dt.bool_
uint8, uint64 = _dt.uint8, _dt.uint64
# complex dtypes for eager NumPy work (and elementwise code under tl.jit); grad/jvp refuse them by name
complex64, complex128 = _np.dtype(_np.complex64), _np.dtype(_np.complex128)
pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, None
ndarray = _np.ndarray


def _is_symbolic(x) -> bool:
    from .._core.builder import Value
    return type(x) is Value


# -- elementwise ---------------------------------------------------------------

def _unary(p):
    def fn(x):
        return p.bind(x)
    fn.__name__ = p.name
    fn.__doc__ = f"Elementwise ``{p.name}`` (primitive ``{p.name}``, lowers to ``{p.hlo}``). Shape: same as x."
    return fn


for _n, _p in _ew.UNARY.items():
    globals()[_n] = _unary(_p)

_round_to_integer = globals()["round"]


def round(a, decimals=0):
    """NumPy ``round``/``around``: half to even at ``decimals`` digits, computed as NumPy does
    (``rint(a * 10**d) / 10**d``, or ``rint(a / 10**-d) * 10**-d`` for ``d < 0``), so the same bits.
    Shape and dtype: as ``a``. The derivative is zero. (Regression: ``np.round(x, 1)`` was refused
    with "_unary.<locals>.fn() takes 1 positional argument but 2 were given".)"""
    decimals = _operator.index(decimals)
    if decimals == 0:
        return _round_to_integer(a)
    if decimals > 0:
        f = 10.0 ** decimals
        return divide(_round_to_integer(multiply(a, f)), f)
    f = 10.0 ** -decimals
    return multiply(_round_to_integer(divide(a, f)), f)


around = round


def sign(x):
    """-1, 0 or 1 by the sign of x (NaN stays NaN); a zero of either sign gives +0
    (the Array API's rule). Derivative 0."""
    s = _ew.UNARY["sign"].bind(x)
    return where(equal(s, 0), zeros_like(s), s)      # not s + 0: compilers fold that away

absolute = globals()["abs"]
arcsin, arccos, arctan = globals()["arcsin"], globals()["arccos"], globals()["arctan"]


def _binary(p, name=None):
    def fn(x, y):
        return p.bind(x, y)
    fn.__name__ = name or p.name
    fn.__doc__ = f"Elementwise ``{p.name}`` with NumPy broadcasting (lowers to ``{p.hlo}``)."
    return fn


add, subtract, multiply, divide = (_binary(_ew.add_p), _binary(_ew.sub_p), _binary(_ew.mul_p),
                                   _binary(_ew.div_p))
true_divide = divide
power, maximum, minimum, arctan2 = (_binary(_ew.pow_p), _binary(_ew.max_p), _binary(_ew.min_p),
                                    _binary(_ew.atan2_p))
remainder, floor_divide = _binary(_ew.rem_p), _binary(_ew.floordiv_p)
mod = remainder
less, less_equal, greater, greater_equal = (_binary(_ew.lt_p), _binary(_ew.le_p), _binary(_ew.gt_p),
                                            _binary(_ew.ge_p))
equal, not_equal = _binary(_ew.eq_p), _binary(_ew.ne_p)
logical_and, logical_or = _binary(_ew.and_p), _binary(_ew.or_p)
logistic = _unary(_ew.logistic_p)
rsqrt = _unary(_ew.rsqrt_p)


def square(x):
    return _ew.integer_pow(x, 2)


def logaddexp(x, y):
    """log(exp(x) + exp(y)) without overflow: the (gradient-stopped) larger operand is
    factored out where finite, so ``logaddexp(inf, inf) = inf`` and ``(-inf, -inf) = -inf``."""
    m = stop_gradient(maximum(x, y))
    m = where(isfinite(m), m, 0.0)
    return add(m, log(add(exp(subtract(x, m)), exp(subtract(y, m)))))


def sigmoid(x):
    return logistic(x)


def astype(x, dtype, /, *, copy=True, device=None):
    """``x`` converted to ``dtype`` (a no-op node when the dtype already matches).
    ``copy=False`` returns ``x`` itself when the dtype already matches (eagerly)."""
    if not copy and not _is_symbolic(x) and _np.asarray(x).dtype == _np.dtype(dtype):
        return x
    return _ew.convert(x, dtype)


def stop_gradient(x):
    """``x`` itself, with a zero derivative in every transform (grad, jvp, vmap of grad).

    Shape and dtype: those of ``x``. Used e.g. for the max-subtraction in a stable
    softmax, whose value cancels and whose gradient should not flow."""
    return _misc.stop_gradient(x)


def where(condition, x, y):
    """``x`` where ``condition`` else ``y``, with broadcasting. Its gradient sends
    exactly zero to the unselected operand (no NaN from the branch not taken)."""
    return _sel.select(condition, x, y)


def clip(a, min=None, max=None, *, a_min=None, a_max=None):
    """``a`` limited to ``[a_min, a_max]`` (or the Array API's ``min=``/``max=``);
    gradient 1 on the closed interval (bounds included, as PyTorch), 0 outside.
    No bounds: a copy of ``a``. Python-scalar bounds keep ``a``'s dtype."""
    a_min = min if a_min is None else a_min       # NumPy's keywords a_min/a_max, the Array API's min/max
    a_max = max if a_max is None else a_max
    if a_min is None and a_max is None:
        return copy(a)
    if a_min is None:
        return minimum(a, a_max)
    if a_max is None:
        return maximum(a, a_min)
    return _sel.clamp(a_min, a, a_max)


def _rank(x, op):
    if _is_symbolic(x):
        r = x.aval.rank
        if r is None:
            raise RankUnknownError(f"{op}: the rank of an operand is unknown at definition time; "
                             f"annotate the argument (e.g. F64['n', 'm'])")
        return r
    return _np.ndim(x)


# -- shapes ----------------------------------------------------------------------

def reshape(a, shape=None, *more, newshape=None, copy=None, order="C"):
    """``a`` with a new shape (static ints, one of them may be -1); ``newshape=`` is
    NumPy's older keyword. ``order="F"``: read and write in Fortran (first index fastest) order,
    as the transposes around a C-order reshape."""
    newshape = shape if newshape is None else newshape
    if more:
        newshape = (newshape,) + more
    if isinstance(newshape, (int, _np.integer)):
        newshape = (int(newshape),)
    if _builtins.any(_is_symbolic(d) for d in newshape):
        raise ShapeError("reshape: sizes must be Python ints at definition time; "
                         "use -1 for the one size to infer")
    newshape = tuple(int(d) for d in newshape)
    if order == "F":
        return _sh.transpose(_sh.reshape(_sh.transpose(a, None), newshape[::-1]), None)
    if order not in ("C", "A"):
        raise ValueError(f"reshape: order must be 'C' or 'F', got {order!r}")
    return _sh.reshape(a, newshape)


def ravel(a, order="C"):
    """``a`` as one axis (a view of ``a`` in NumPy where its layout allows); ``order="F"`` reads
    it first index fastest."""
    if order == "F":
        return _sh.reshape(_sh.transpose(a, None), (-1,))
    if order not in ("C", "A", "K"):
        raise ValueError(f"ravel: order must be 'C' or 'F', got {order!r}")
    return _sh.reshape(a, (-1,))


def flatten(a, order="C"):
    """``a.flatten()``: ``a`` as one axis, always a copy in NumPy (later writes into ``a`` do not
    change it); ``order="F"`` reads it first index fastest."""
    out = ravel(a, order)
    return _misc.copy_p.bind(out) if _is_symbolic(out) else _np.array(out, copy=True)


def transpose(a, axes=None, *more):
    if more:
        axes = (axes,) + more
    return _sh.transpose(a, axes)


def swapaxes(a, axis1, axis2):
    """Swap two axes (works on arrays of unknown rank with negative axes)."""
    return _sh.swapaxes(a, axis1, axis2)


def moveaxis(a, source, destination):
    """Axes ``source`` moved to ``destination`` (ints or equal-length sequences), the others in order."""
    r = _rank(a, "moveaxis")
    src = [source] if isinstance(source, (int, _np.integer)) else list(source)
    dst = [destination] if isinstance(destination, (int, _np.integer)) else list(destination)
    if len(src) != len(dst):
        raise ShapeError(f"moveaxis: source and destination must have the same length, got {src} and {dst}")
    src, dst = [int(s) % r for s in src], [int(d) % r for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"moveaxis: repeated axes in {src} or {dst}")
    rest = [i for i in range(r) if i not in src]
    perm = [None] * r
    for s, d in zip(src, dst):
        perm[d] = s
    it = iter(rest)
    perm = [p if p is not None else next(it) for p in perm]
    return _sh.transpose(a, tuple(perm))


def expand_dims(a, axis):
    return _sh.expand_dims(a, axis)


def squeeze(a, axis=None):
    return _sh.squeeze(a, axis)


def broadcast_to(a, shape):
    return _sh.broadcast_to(a, shape)


def concatenate(arrays, axis=0):
    """NumPy's ``concatenate``; ``axis=None`` joins the arrays flattened."""
    if axis is None:
        return _sh.concatenate([ravel(a) for a in arrays], 0)
    return _sh.concatenate(list(arrays), axis)


def stack(arrays, axis=0):
    return _sh.concatenate([expand_dims(a, axis) for a in arrays], axis)


def flip(a, axis=None):
    return _sh.flip(a, axis)


def take(a, indices, axis=None, mode="raise"):
    """NumPy's ``take``; ``mode="clip"`` clips the indices into range and ``mode="wrap"`` wraps them,
    both before indexing (the axis's size must be known)."""
    if mode not in ("raise", "clip", "wrap"):
        raise ValueError(f"take: mode must be 'raise', 'clip' or 'wrap', got {mode!r}")
    src = ravel(a) if axis is None else a
    ax = 0 if axis is None else axis
    if mode != "raise":
        n = shape(src)[ax]
        if _is_symbolic(n):
            raise ShapeError(f"take(mode={mode!r}): the size of the axis is not known yet")
        indices = clip(indices, 0, n - 1) if mode == "clip" else remainder(indices, n)
    return _ix.gather(src, indices, ax)


def tril(m, k=0):
    from .._prims.decompositions import tril as _tril
    return _tril(m, k)


def triu(m, k=0):
    from .._prims.decompositions import tril_mask_p
    return where(tril_mask_p.bind(m, k=k - 1), 0.0, m)


def _getitem(x, idx):
    return _ix.getitem(x, idx)


def _shape_of(x):
    """``x.shape`` for a symbolic value: ints where known, symbolic sizes elsewhere."""
    r = x.aval.rank
    if r is None:
        return _SymbolicShape(x)
    return tuple(d if type(d) is int else _misc.dim_size(x, i) for i, d in enumerate(x.aval.shape))


class _SymbolicShape:
    """The shape of a value of unknown rank: ``shape[i]`` is a symbolic size."""

    def __init__(self, x):
        self._x = x

    def __getitem__(self, i):
        if not isinstance(i, int):
            raise ShapeError("only integer indexing of a shape of unknown rank is supported")
        return _misc.dim_size(self._x, i)

    def __len__(self):
        raise ShapeError("len(x.shape): the rank is unknown at definition time; use x.ndim on an "
                         "annotated argument")


def shape(a):
    return _shape_of(a) if _is_symbolic(a) else _np.shape(a)


def size(a):
    return _misc.reduced_count(a, None) if _is_symbolic(a) else _np.size(a)


def ndim(a):
    return _rank(a, "ndim")


from ._reductions import (sum, prod, max, min, amax, amin, mean, var, std, argmax, argmin,  # noqa: E402,F401
                          cumsum, cumprod, any, all, logsumexp, softmax, log_softmax)
from ._contractions import (matmul, dot, vdot, inner, outer, einsum, tensordot, trace,  # noqa: E402,F401
                            diagonal, kron)
from ._composite import (log2, log10, exp2, hypot, sinc, isnan, isinf, logical_xor, trunc,  # noqa: E402,F401
                         rad2deg, deg2rad, degrees, radians, split)
from ._creation import (copy, asarray, array, zeros_like, ones_like, full_like, eye, identity,  # noqa: E402,F401
                        linspace, arange, full, zeros, ones, empty)
from ._array_api import (__array_api_version__, __array_namespace_info__, finfo, iinfo, isdtype,  # noqa: E402,F401
                         result_type, can_cast, positive, pow, real, conj, imag, bitwise_and, bitwise_or,
                         bitwise_xor, bitwise_invert, bitwise_left_shift, bitwise_right_shift, concat,
                         permute_dims, unstack, broadcast_shapes, broadcast_arrays, empty_like, from_dlpack,
                         count_nonzero, nonzero, unique_all, unique_counts, unique_inverse, unique_values,
                         isin, vecdot, matrix_transpose, cross)
from ._ordering import argsort, sort, searchsorted, take_along_axis  # noqa: E402,F401
from ._arrange import (repeat, roll, tile, hstack, vstack, dstack, column_stack, meshgrid,  # noqa: E402,F401
                       atleast_1d, atleast_2d, atleast_3d, diag, flipud, fliplr, rot90, diff)
from ._more_elementwise import (arccosh, signbit, copysign, nextafter, nancumsum, nancumprod,  # noqa: E402,F401
                                cumulative_sum, cumulative_prod)
from ._quantiles import (quantile, percentile, median, nanquantile, nanpercentile,  # noqa: E402,F401
                         nanmedian)
from ._nan_reductions import nansum, nanprod, nanmean, nanvar, nanstd, nanmax, nanmin  # noqa: E402,F401
from ._interp import interp  # noqa: E402,F401
from ._more_numpy import (cbrt, nan_to_num, ptp, fmax, fmin, heaviside, isclose, allclose,  # noqa: E402,F401
                          append, select, block, array_split, diagflat, ediff1d, conjugate)
from ._more_numpy_stats import (average, cov, corrcoef, trapezoid, polyval, vander,  # noqa: E402,F401
                                convolve, correlate)
from ._gradient import gradient  # noqa: E402,F401
from ._running import maximum_accumulate, minimum_accumulate  # noqa: E402,F401
from ._fitting import polyfit, digitize  # noqa: E402,F401
from . import linalg, fft  # noqa: E402,F401

# Symbolic values (DXIR) get NumPy's operators and methods from this module.
from ._operators import install_operators as _install_value_operators  # noqa: E402

# the Array API's short names and its ``bool`` dtype (kept last: the module's own code uses builtins)
acos, asin, atan, acosh, asinh, atanh, atan2 = arccos, arcsin, arctan, arccosh, arcsinh, arctanh, arctan2
bool = bool_  # noqa: A001

_install_value_operators()
