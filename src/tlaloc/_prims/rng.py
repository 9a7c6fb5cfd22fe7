"""Counter-based random numbers: ``threefry2x32`` and the samplers built on it.

Threefry-2x32 (20 rounds) is the counter-based block cipher of J. K. Salmon,
M. A. Moraes, R. O. Dror and D. E. Shaw, "Parallel random numbers: as easy as
1, 2, 3", Proc. SC'11 (2011), doi:10.1145/2063384.2063405. A key is a
``uint32`` array of shape ``(2,)``; element ``i`` of a stream is the hash of
its counter ``i``, so streams need no state and split without coordination.
The NumPy implementations (``threefry_impl.py``) reproduce ``jax.random``
(jax 0.10.2 defaults) bit for bit.

=================  ======================================  =====================
primitive          operands -> result                      params
=================  ======================================  =====================
threefry2x32       key u32[2], x0 u32[s], x1 u32[s]        (two results, u32[s])
random_bits        key u32[2] -> uint{8,16,32,64}[shape]   bit_width, shape
random_uniform     key, minval, maxval -> dtype[shape]     shape, dtype
random_normal      key -> dtype[shape]                     shape, dtype
=================  ======================================  =====================

Derivatives: keys and bits are integers and carry none. ``random_uniform`` is
affine in its bounds, ``u · (maxval - minval) + minval`` with ``u`` the
uniform sample on [0, 1) of the same key, so its VJP gives ``1 - u`` to
``minval`` and ``u`` to ``maxval`` (the final ``max(minval, ·)`` that guards
against rounding below ``minval`` is treated as the identity).

Lowering (``tlaloc/_render/stablehlo_rng.py``): ``threefry2x32`` expands into
``stablehlo`` add/shift/or/xor ops on ``ui32``, as JAX's CPU lowering (JAX
calls the ``cu_threefry2x32`` custom call on GPU; the bits are the same); the
samplers add ``iota`` counters, ``xor`` / ``shift_right_logical`` /
``bitcast_convert`` and ``chlo.erf_inv``, so compiled code gives the bits above.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from .._core import aval as _aval
from .._core.primitive import Primitive
from ..errors import ArgumentError, DTypeError, ShapeError
from . import threefry_impl as _impl
from ._rules import broadcast_shapes
from .broadcasting import sum_to
from .elementwise import multiply, subtract

_BITS = {8: _dt.uint8, 16: np.dtype(np.uint16), 32: _dt.uint32, 64: _dt.uint64}
SAMPLE_DTYPES = (_dt.float16, _dt.bfloat16, _dt.float32, _dt.float64)


def _check_key(op, key):
    if key.dtype is not None and key.dtype != _dt.uint32:
        raise DTypeError(f"{op}: key must have dtype uint32, got {key.dtype}; make one with "
                         f"tlaloc.random.key(seed)")
    if key.shape is not None and (len(key.shape) != 1 or type(key.shape[0]) is int and key.shape[0] != 2):
        raise ShapeError(f"{op}: key must have shape (2,), got {tuple(key.shape)}; to use one of "
                         f"several keys from split(), index it: keys[i]")


def _check_u32(op, name, x):
    if not x.weak and x.dtype is not None and x.dtype != _dt.uint32:
        raise DTypeError(f"{op}: {name} must have dtype uint32, got {x.dtype}")


def _checked(prim_name, impl):
    """Run the primitive's shape and dtype rules on concrete operands first, so
    eager calls raise the same errors as graph building."""
    def run(*args, **params):
        from .._core.primitive import REGISTRY
        REGISTRY[prim_name].abstract_eval(*(_aval.of(a) for a in args), **params)
        return impl(*args, **params)
    run.__name__ = prim_name
    return run


# -- threefry2x32 -------------------------------------------------------------------

def _threefry_shape(key, x0, x1):
    _check_key("threefry2x32", key)
    s = broadcast_shapes("threefry2x32", x0.shape, x1.shape)
    return s, s


def _threefry_dtype(key, x0, x1):
    _check_key("threefry2x32", key)
    _check_u32("threefry2x32", "x0", x0)
    _check_u32("threefry2x32", "x1", x1)
    return _dt.uint32, _dt.uint32


def _threefry_impl(key, x0, x1):
    return _impl.threefry2x32(key, np.asarray(x0, np.uint32), np.asarray(x1, np.uint32))


threefry2x32_p = Primitive("threefry2x32", impl=_checked("threefry2x32", _threefry_impl),
                           hlo="stablehlo.add/shift/xor (threefry2x32)", multiple_results=True,
                           shape_rule=_threefry_shape, dtype_rule=_threefry_dtype)
threefry2x32_p.vjp = lambda gs, key, x0, x1, out: (None, None, None)
threefry2x32_p.jvp = lambda t, key, x0, x1, out: (None, None)


def threefry2x32(key, x0, x1):
    """Threefry-2x32 hash of the counter words ``(x0, x1)`` under ``key``.

    Args:
      key: uint32 ``(2,)``.
      x0, x1: uint32 arrays that broadcast together, shape ``s``.
    Returns:
      ``(y0, y1)``: uint32 arrays of shape ``s``.
    """
    return threefry2x32_p.bind(key, x0, x1)


# -- samplers -----------------------------------------------------------------------

def _bits_impl(key, *, bit_width, shape):
    return _impl.random_bits(key, bit_width, shape)


def _bits_shape(key, *, bit_width, shape):
    _check_key("bits", key)
    return tuple(shape)


random_bits_p = Primitive("random_bits", impl=_checked("random_bits", _bits_impl),
                          hlo="threefry2x32+stablehlo.xor", shape_rule=_bits_shape,
                          dtype_rule=lambda key, *, bit_width, shape: _BITS[bit_width])
random_bits_p.vjp = lambda g, key, out, **_: (None,)
random_bits_p.jvp = lambda t, key, out, **_: None


def _bound_check(op, bound, name, shape, dtype):
    """``minval``/``maxval``: a weak Python number or an array of ``dtype`` that
    broadcasts to ``shape``."""
    if not bound.weak and _dt.is_float(bound.dtype) and bound.dtype != dtype:
        raise DTypeError(f"{op}: {name} is {bound.dtype.name} but dtype is {dtype.name}; float dtypes "
                         f"never mix implicitly. Pass {name} as a Python float or convert it, e.g. "
                         f"`{name}.astype(np.{dtype.name})`.")
    if bound.shape is None:
        return
    fits = len(bound.shape) <= len(shape) and all(
        type(d) is not int or d in (1, s) for d, s in zip(reversed(bound.shape), reversed(shape)))
    if not fits:
        raise ShapeError(f"{op}: {name} of shape {tuple(bound.shape)} does not broadcast to "
                         f"shape {tuple(shape)}")


def _uniform_shape(key, lo, hi, *, shape, dtype):
    _check_key("uniform", key)
    _bound_check("uniform", lo, "minval", shape, dtype)
    _bound_check("uniform", hi, "maxval", shape, dtype)
    return tuple(shape)


def _uniform_impl(key, lo, hi, *, shape, dtype):
    return _impl.uniform(key, shape, dtype, lo, hi)


random_uniform_p = Primitive("random_uniform", impl=_checked("random_uniform", _uniform_impl),
                             hlo="threefry2x32+stablehlo.bitcast_convert", shape_rule=_uniform_shape,
                             dtype_rule=lambda key, lo, hi, *, shape, dtype: np.dtype(dtype))


def _unit_uniform(key, shape, dtype):
    return random_uniform_p.bind(key, 0.0, 1.0, shape=shape, dtype=dtype)


def _uniform_vjp(g, key, lo, hi, out, shape, dtype):
    u = _unit_uniform(key, shape, dtype)
    return None, sum_to(multiply(g, subtract(1.0, u)), lo), sum_to(multiply(g, u), hi)


def _uniform_jvp(t, key, lo, hi, out, shape, dtype):
    if t[1] is None and t[2] is None:
        return None
    u = _unit_uniform(key, shape, dtype)
    lo_part = None if t[1] is None else multiply(t[1], subtract(1.0, u))
    hi_part = None if t[2] is None else multiply(t[2], u)
    if lo_part is None:
        return hi_part
    from .elementwise import add
    return lo_part if hi_part is None else add(lo_part, hi_part)


random_uniform_p.vjp, random_uniform_p.jvp = _uniform_vjp, _uniform_jvp


def _normal_shape(key, *, shape, dtype):
    _check_key("normal", key)
    return tuple(shape)


def _normal_impl(key, *, shape, dtype):
    return _impl.normal(key, shape, dtype)


random_normal_p = Primitive("random_normal", impl=_checked("random_normal", _normal_impl),
                            hlo="threefry2x32+chlo.erf_inv", shape_rule=_normal_shape,
                            dtype_rule=lambda key, *, shape, dtype: np.dtype(dtype))
random_normal_p.vjp = lambda g, key, out, **_: (None,)
random_normal_p.jvp = lambda t, key, out, **_: None


def static_shape(op, shape, name="shape") -> tuple:
    """A shape (argument ``name``) as a tuple of non-negative Python ints, or ArgumentError."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    ok = isinstance(dims, (tuple, list)) and all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims)
    if not ok or isinstance(shape, bool):
        raise ArgumentError(f"{op}: {name} must be an int or a tuple of non-negative Python ints, got {shape!r}")
    return tuple(int(d) for d in dims)


def sample_dtype(op, dtype) -> np.dtype:
    """A float dtype the samplers support, or ArgumentError."""
    try:
        dt = np.dtype(_dt.bfloat16 if isinstance(dtype, str) and dtype in ("bfloat16", "bf16") else dtype)
    except TypeError:
        dt = None
    if dt not in SAMPLE_DTYPES:
        raise ArgumentError(f"{op}: dtype must be one of float16, bfloat16, float32, float64, got {dtype!r}")
    return dt


def bits_dtype(op, dtype) -> int:
    """The bit width of an unsigned dtype for ``bits``, or ArgumentError."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    widths = {v: k for k, v in _BITS.items()}
    if dt not in widths:
        raise ArgumentError(f"bits: dtype must be uint8, uint16, uint32 or uint64, got {dtype!r}")
    return widths[dt]
