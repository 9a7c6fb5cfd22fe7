"""Pure-NumPy reimplementation of JAX's default counter-based PRNG.

This module reproduces, bit for bit, the stream of ``jax.random`` (jax 0.10.2)
for its default configuration:

* PRNG implementation ``threefry2x32`` (``jax_default_prng_impl``);
* ``jax_threefry_partitionable=True`` (the default since jax 0.5).  In this
  mode every output element ``i`` (row-major index of the requested shape) is
  derived from the 64-bit counter ``i`` split into ``(hi, lo)`` 32-bit words,
  hashed with one Threefry-2x32 block;
* ``jax_enable_x64=False`` (the default) for seeding, see :func:`key`.

Threefry-2x32 is the counter-based block cipher of Salmon, Moraes, Dror and
Shaw, "Parallel random numbers: as easy as 1, 2, 3", Proc. SC'11 (2011),
doi:10.1145/2063384.2063405, with 20 rounds.

Floating-point samplers follow JAX's bit-level construction (mantissa filling
for ``uniform``; ``sqrt(2) * erfinv(u)`` for ``normal``).  ``erfinv`` is
Giles' single/double precision polynomial ("Approximating the erfinv
function", GPU Computing Gems Jade Edition, 2011), evaluated exactly as XLA:CPU
does it: same operation order, the same ``log1p`` algorithm (Cephes rational
approximation for small arguments, a Cephes/Eigen-style ``log`` otherwise; for
float64 the C library ``log``) and fused multiply-adds wherever LLVM contracts
them on an FMA-capable x86-64 host.  FMAs are emulated exactly in NumPy
(error-free transformations + rounding to odd), so the results do not depend
on whether the host running *this* code has FMA.  The one host dependency is
float64 ``log``: like XLA:CPU we call the C library (``math.log``), not
NumPy's SIMD ``log`` which differs in rare last bits.  JAX itself gives
slightly different normals on x86-64 without FMA or on GPU; the reference
here is XLA:CPU on x86-64 with FMA; float16 ``uniform`` with non-default bounds
follows the host as XLA:CPU does (one fused multiply-add with AVX512-FP16, two
rounded operations without: ``xla_cpu_math.host_has_float16_fma``).

All public functions are pure: they take and return NumPy arrays, never mutate
their inputs and keep no state.
"""

from __future__ import annotations

import math
import operator

import ml_dtypes
import numpy as np

from .xla_cpu_math import ERFINV32, ERFINV64, erfinv, fma32, fma64, fma_small, host_has_float16_fma

__all__ = ["threefry2x32", "key", "split", "fold_in", "random_bits", "uniform", "normal"]

_U32 = np.uint32
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KS_PARITY = _U32(0x1BD11BDA)  # Threefish key-schedule parity constant
_UINT_BY_BITS = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
# dtype -> (total bits, explicit mantissa bits)
_FLOAT_FORMATS = {
    np.dtype(np.float16): (16, 10),
    np.dtype(ml_dtypes.bfloat16): (16, 7),
    np.dtype(np.float32): (32, 23),
    np.dtype(np.float64): (64, 52),
}
_FLOAT_NAMES = "float16, bfloat16, float32, float64"


# --------------------------------------------------------------------------
# argument checking
# --------------------------------------------------------------------------
def _check_key(key, name="key"):
    arr = np.asarray(key)
    if arr.dtype != np.uint32:
        raise ValueError(f"{name} must be a uint32 array of shape (2,), got dtype {arr.dtype}")
    if arr.shape != (2,):
        raise ValueError(f"{name} must be a uint32 array of shape (2,), got shape {arr.shape}")
    return arr


def _check_u32(x, name):
    arr = np.asarray(x)
    if arr.dtype != np.uint32:
        raise ValueError(f"{name} must have dtype uint32, got {arr.dtype}")
    return arr


def _check_shape(shape, name="shape"):
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        dims = tuple(operator.index(d) for d in dims)
    except TypeError:
        raise ValueError(f"{name} must be an int or a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"{name} must contain non-negative sizes, got {shape!r}")
    return dims


def _check_float_dtype(dtype):
    try:
        is_bf16 = isinstance(dtype, str) and dtype in ("bfloat16", "bf16")
        dt = np.dtype(ml_dtypes.bfloat16 if is_bf16 else dtype)
    except TypeError:
        raise ValueError(f"dtype must be one of {_FLOAT_NAMES}, got {dtype!r}") from None
    if dt not in _FLOAT_FORMATS:
        raise ValueError(f"dtype must be one of {_FLOAT_NAMES}, got {dt}")
    return dt


# --------------------------------------------------------------------------
# Threefry-2x32 and the key operations
# --------------------------------------------------------------------------
def _rotl32(v, r):
    return (v << _U32(r)) | (v >> _U32(32 - r))


def threefry2x32(key, x0, x1):
    """Threefry-2x32 block cipher, 20 rounds (Salmon et al., SC'11).

    Args:
      key: uint32 array of shape ``(2,)``.
      x0, x1: uint32 arrays (the two counter words), broadcast together.
    Returns:
      ``(y0, y1)``: two new uint32 arrays of the broadcast shape.
    Raises:
      ValueError: if ``key`` is not uint32 of shape ``(2,)``, if ``x0`` or
        ``x1`` is not uint32, or if ``x0`` and ``x1`` do not broadcast.
    """
    k = _check_key(key)
    x0, x1 = _check_u32(x0, "x0"), _check_u32(x1, "x1")
    try:
        x0, x1 = np.broadcast_arrays(x0, x1)
    except ValueError:
        raise ValueError(f"x0 and x1 must broadcast, got shapes {x0.shape} and {x1.shape}") from None
    ks = (k[0], k[1], k[0] ^ k[1] ^ _KS_PARITY)
    # 1-d working copies: uint32 array arithmetic wraps modulo 2**32 silently.
    a = x0.reshape(-1) + ks[0]
    b = x1.reshape(-1) + ks[1]
    for i in range(5):  # 5 x 4 rounds, key injection after every 4 rounds
        for r in _ROTATIONS[i % 2]:
            a += b
            b = _rotl32(b, r)
            b ^= a
        a += ks[(i + 1) % 3]
        b += ks[(i + 2) % 3]
        b += _U32(i + 1)
    return a.reshape(x0.shape), b.reshape(x0.shape)


def _counters(shape):
    """Row-major 64-bit iota over ``shape`` as (hi, lo) uint32 words."""
    idx = np.arange(math.prod(shape), dtype=np.uint64).reshape(shape)
    return (idx >> np.uint64(32)).astype(_U32), idx.astype(_U32)


def key(seed, *, x64=False):
    """Raw threefry key for an integer seed, like ``jax.random.key_data(jax.random.PRNGKey(seed))``.

    JAX bit-casts the seed to two uint32 words ``[hi, lo]``.  With
    ``x64=False`` (JAX's default, ``jax_enable_x64`` off) the seed is first
    truncated to 32 bits, so the key is ``[0, seed mod 2**32]`` (e.g. ``-1`` ->
    ``[0, 0xFFFFFFFF]`` and ``2**32 + 5`` -> ``[0, 5]``).  With ``x64=True``
    a Python int (treated as int64) or a 64-bit NumPy integer gives
    ``[(seed mod 2**64) >> 32, seed mod 2**32]`` while 8/16/32-bit NumPy
    integers still give ``[0, seed mod 2**32]``.

    Args:
      seed: Python int in ``[-2**63, 2**63)``, or a NumPy integer scalar
        (0-d integer arrays accepted).
      x64: emulate ``jax_enable_x64=True``.
    Returns:
      uint32 array of shape ``(2,)``.
    Raises:
      TypeError: if ``seed`` is not an integer.
      ValueError: if ``seed`` is a Python int outside the int64 range (JAX
        raises OverflowError there) or a non-scalar array.
    """
    if isinstance(seed, (int, np.integer)):
        value, width = int(seed), 64 if isinstance(seed, int) else np.dtype(type(seed)).itemsize * 8
        if isinstance(seed, int) and not -(2**63) <= value < 2**63:
            raise ValueError(f"seed must fit in int64, got {seed}")
    else:
        arr = np.asarray(seed)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"seed must be an integer, got {type(seed).__name__} of dtype {arr.dtype}")
        if arr.ndim != 0:
            raise ValueError(f"seed must be a scalar, got shape {arr.shape}")
        value, width = int(arr), arr.dtype.itemsize * 8
    hi = (value % 2**64) >> 32 if (x64 and width == 64) else 0
    return np.array([hi, value % 2**32], dtype=_U32)


def split(key, num=2):
    """Split a key into new keys, like ``jax.random.split`` (partitionable mode).

    Args:
      key: uint32 array of shape ``(2,)``.
      num: number of keys (int) or a shape (tuple of ints).
    Returns:
      uint32 array of shape ``(num, 2)`` (or ``(*num, 2)`` for a tuple).
    Raises:
      ValueError: bad ``key`` shape/dtype, or negative / non-integer ``num``.
    """
    k = _check_key(key)
    shape = _check_shape(num, "num")
    y0, y1 = threefry2x32(k, *_counters(shape))
    return np.stack([y0, y1], axis=-1)


def fold_in(key, data):
    """Fold a 32-bit integer into a key, like ``jax.random.fold_in``.

    The new key is ``threefry2x32(key, 0, data)`` (both output words).

    Args:
      key: uint32 array of shape ``(2,)``.
      data: Python int in ``[0, 2**32)``, or a NumPy integer scalar (which,
        like in JAX, is wrapped modulo 2**32).
    Returns:
      uint32 array of shape ``(2,)``.
    Raises:
      ValueError: bad ``key`` shape/dtype, a non-scalar ``data`` or a Python
        int ``data`` outside ``[0, 2**32)`` (JAX raises OverflowError there).
      TypeError: non-integer ``data`` (JAX silently truncates floats).
    """
    k = _check_key(key)
    if isinstance(data, int) and not isinstance(data, np.integer):
        if not 0 <= data < 2**32:
            raise ValueError(f"data must be in [0, 2**32), got {data}")
        value = data
    else:
        arr = np.asarray(data)
        if arr.ndim != 0:
            raise ValueError(f"data must be a scalar, got shape {arr.shape}")
        if arr.dtype.kind not in "iu":
            raise TypeError(f"data must be an integer, got dtype {arr.dtype}")
        value = int(arr) % 2**32
    y0, y1 = threefry2x32(k, np.zeros(1, _U32), np.array([value], _U32))
    return np.concatenate([y0, y1])


def random_bits(key, bit_width, shape):
    """Uniform random unsigned integers, like ``jax.random.bits``.

    Element ``i`` (row-major) hashes the counter ``i`` to ``(y0, y1)``; the
    result is ``y0 ^ y1`` (32 bits), ``(y0 << 32) | y1`` (64 bits) or the low
    bits of ``y0 ^ y1`` (8 and 16 bits, as JAX).

    Args:
      key: uint32 array of shape ``(2,)``.
      bit_width: 8, 16, 32 or 64.
      shape: int or tuple of non-negative ints.
    Returns:
      array of ``shape`` with dtype uint8/uint16/uint32/uint64.
    Raises:
      ValueError: bad ``key``, ``bit_width`` not in {8, 16, 32, 64}, or bad ``shape``.
    """
    k = _check_key(key)
    if not isinstance(bit_width, (int, np.integer)) or isinstance(bit_width, bool) \
            or int(bit_width) not in _UINT_BY_BITS:
        raise ValueError(f"bit_width must be one of 8, 16, 32, 64, got {bit_width!r}")
    y0, y1 = threefry2x32(k, *_counters(_check_shape(shape)))
    bit_width = int(bit_width)
    if bit_width == 64:
        return (y0.astype(np.uint64) << np.uint64(32)) | y1.astype(np.uint64)
    return (y0 ^ y1).astype(_UINT_BY_BITS[bit_width])


# --------------------------------------------------------------------------
# samplers
# --------------------------------------------------------------------------
def _uniform(k, shape, dt, minval, maxval):
    """uniform() on a shape of rank >= 1 (rank-0 becomes (1,): NumPy 0-d ops give scalars)."""
    nbits, nmant = _FLOAT_FORMATS[dt]
    rng_bits = 8 if nmant < 8 else nbits
    udt = _UINT_BY_BITS[nbits]
    lo, hi = np.asarray(minval).astype(dt), np.asarray(maxval).astype(dt)
    try:
        ok = np.broadcast_shapes(shape, lo.shape, hi.shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"minval {lo.shape} and maxval {hi.shape} must broadcast to shape {shape}")
    bits = random_bits(k, rng_bits, shape or (1,)).astype(udt)
    one = np.ones(1, dt)
    floats = ((bits >> udt(rng_bits - nmant)) | one.view(udt)).view(dt) - one  # in [0, 1)
    scale = np.asarray(hi - lo)
    if dt == np.float64:
        val = fma64(floats, scale, lo)
    elif dt == ml_dtypes.bfloat16 or (dt == np.float16 and not host_has_float16_fma()):
        val = floats * scale + lo  # XLA rounds every bfloat16 op (and float16 without AVX512-FP16)
    else:  # float16 (native AVX512-FP16 FMA) and float32
        val = fma_small(floats, scale, lo, dt)
    return np.asarray(np.maximum(lo, val), dt)


def uniform(key, shape=(), dtype=np.float32, minval=0.0, maxval=1.0):
    """Uniform floats in ``[minval, maxval)``, like ``jax.random.uniform``.

    Random bits fill the mantissa of a float in ``[1, 2)``; 1 is subtracted and
    the result is mapped to ``max(minval, u * (maxval - minval) + minval)``
    in ``dtype`` arithmetic.  float64 matches JAX with ``jax_enable_x64=True``.
    With non-default bounds the affine step is a fused multiply-add for
    float16/32/64, as XLA:CPU compiles it on x86-64 with FMA (and AVX512-FP16).

    Args:
      key: uint32 array of shape ``(2,)``.
      shape: int or tuple of non-negative ints.
      dtype: float16, bfloat16 (``ml_dtypes``), float32 or float64.
      minval, maxval: scalars or arrays broadcastable to ``shape``.
    Returns:
      array of ``shape`` and ``dtype``.
    Raises:
      ValueError: bad ``key``, unsupported ``dtype``, bad ``shape``, or
        bounds that do not broadcast to ``shape``.
    """
    k = _check_key(key)
    shape, dt = _check_shape(shape), _check_float_dtype(dtype)
    with np.errstate(all="ignore"):
        return _uniform(k, shape, dt, minval, maxval).reshape(shape)


def normal(key, shape=(), dtype=np.float32):
    """Standard normal floats, like ``jax.random.normal``.

    ``sqrt(2) * erfinv(u)`` with ``u ~ uniform(key, shape, dtype, nextafter(-1, 0), 1)``.
    For float16/bfloat16 ``erfinv`` runs in float32 and is rounded back, as in
    XLA.  Bit-exact against XLA:CPU on x86-64 with FMA (see module docstring).

    Args:
      key: uint32 array of shape ``(2,)``.
      shape: int or tuple of non-negative ints.
      dtype: float16, bfloat16 (``ml_dtypes``), float32 or float64.
    Returns:
      array of ``shape`` and ``dtype``.
    Raises:
      ValueError: bad ``key``, unsupported ``dtype`` or bad ``shape``.
    """
    k = _check_key(key)
    shape, dt = _check_shape(shape), _check_float_dtype(dtype)
    udt = _UINT_BY_BITS[_FLOAT_FORMATS[dt][0]]
    lo = ((-np.ones(1, dt)).view(udt) - udt(1)).view(dt)  # nextafter(-1, 0)
    with np.errstate(all="ignore"):
        u = _uniform(k, shape, dt, lo.reshape(()), np.ones((), dt))
        if dt == np.float64:
            e = erfinv(u, ERFINV64, fma64)
        else:
            e = erfinv(u.astype(np.float32), ERFINV32, fma32).astype(dt)
        return np.asarray(e * np.asarray(math.sqrt(2.0)).astype(dt), dt).reshape(shape)
