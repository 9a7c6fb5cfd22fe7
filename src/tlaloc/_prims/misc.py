"""Small primitives the NumPy surface needs: ``stop_gradient``, ``dim_size``,
``reduced_count`` (how many elements a reduction combines), ``grad_seed``.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from .._core.primitive import Primitive
from ..errors import GradientError
from ._rules import normalize_axes

stop_gradient_p = Primitive("stop_gradient", impl=lambda x: x, hlo=None,
                            shape_rule=lambda x: x.shape, dtype_rule=lambda x: x.dtype)
stop_gradient_p.vjp = lambda g, x, out: (None,)
stop_gradient_p.jvp = lambda t, x, out: None


def stop_gradient(x):
    """Identity whose derivative is zero in every transform."""
    return stop_gradient_p.bind(x)


dim_size_p = Primitive("dim_size", impl=lambda x, *, axis: np.int64(np.shape(x)[axis]), hlo=None,
                       shape_rule=lambda x, *, axis: (), dtype_rule=lambda x, *, axis: np.dtype(np.int64))
dim_size_p.vjp = lambda g, x, out, axis: (None,)
dim_size_p.jvp = lambda t, x, out, axis: None


def dim_size(x, axis):
    return dim_size_p.bind(x, axis=int(axis))


def _count_impl(x, *, axes):
    shape = np.shape(x)
    ax = normalize_axes(axes, len(shape))
    n = math.prod(shape[a] for a in ax)
    dt = np.asarray(x).dtype
    return np.asarray(n, dtype=dt if _dt.is_float(dt) else np.float64)


reduced_count_p = Primitive("reduced_count", impl=_count_impl, hlo=None, shape_rule=lambda x, *, axes: (),
                            dtype_rule=lambda x, *, axes: x.dtype if _dt.is_float(x.dtype)
                            else (None if x.dtype is None else np.dtype(np.float64)))
reduced_count_p.vjp = lambda g, x, out, axes: (None,)
reduced_count_p.jvp = lambda t, x, out, axes: None


def reduced_count(x, axes):
    return reduced_count_p.bind(x, axes=axes)


def _grad_seed_impl(out):
    """The output cotangent that starts ``grad``: ones of the output's shape. The output must
    hold one element: a scalar, or (as autograd allows) an array of size 1 such as shape (1,)."""
    out = np.asarray(out)
    if out.size != 1:
        raise GradientError(f"grad requires a scalar output, but the function returned an array of "
                            f"shape {out.shape}; reduce it (e.g. .sum()) or use tl.vjp / tl.jacrev")
    if not _dt.is_float(out.dtype):
        raise GradientError(f"grad requires a floating-point output, got {out.dtype}; "
                            f"differentiate a float computation")
    return np.ones(out.shape, out.dtype)


grad_seed_p = Primitive("grad_seed", impl=_grad_seed_impl, hlo="stablehlo.constant",
                        shape_rule=lambda x: x.shape, dtype_rule=lambda x: x.dtype)
grad_seed_p.vjp = lambda g, x, out: (None,)
grad_seed_p.jvp = lambda t, x, out: None


# -- creation with sizes known only at run time --------------------------------------------

def _arange_impl(start, stop, step, *, dtype):
    return np.arange(start, stop, step, dtype=dtype)


arange_p = Primitive("arange", impl=_arange_impl, hlo="stablehlo.iota",
                     shape_rule=lambda start, stop, step, *, dtype: (None,),
                     dtype_rule=lambda start, stop, step, *, dtype: None if dtype is None else np.dtype(dtype))
arange_p.vjp = lambda g, start, stop, step, out, dtype: (None, None, None)
arange_p.jvp = lambda t, start, stop, step, out, dtype: None


def _full_impl(*dims, fill_value, dtype):
    return np.full(tuple(int(d) for d in dims), fill_value, dtype=dtype)


full_p = Primitive("full", impl=_full_impl, hlo="stablehlo.broadcast_in_dim",
                   shape_rule=lambda *dims, fill_value, dtype: tuple(None for _ in dims),
                   dtype_rule=lambda *dims, fill_value, dtype: np.dtype(dtype))
full_p.vjp = lambda g, *dims, out, fill_value, dtype: (None,) * len(dims)
full_p.jvp = lambda t, *dims, out, fill_value, dtype: None


copy_p = Primitive("copy", impl=lambda x: np.array(x, copy=True), hlo=None,
                   shape_rule=lambda x: x.shape, dtype_rule=lambda x: x.dtype)
copy_p.vjp = lambda g, x, out: (g,)
copy_p.jvp = lambda t, x, out: t[0]
