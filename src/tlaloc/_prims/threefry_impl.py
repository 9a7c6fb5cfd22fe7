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
here is XLA:CPU on x86-64 with FMA (and AVX512-FP16 for float16 ``uniform``
with non-default bounds).

All public functions are pure: they take and return NumPy arrays, never mutate
their inputs and keep no state.
"""

from __future__ import annotations

import math
import operator

import numpy as np
import ml_dtypes

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
# exact fused multiply-add emulation
# --------------------------------------------------------------------------
def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _round_to_odd(s, err):
    """Given the exact sum s + err (float64), return it rounded to odd (sticky last bit)."""
    bits = s.view(np.int64)
    inexact = (err != 0) & np.isfinite(err) & ((bits & 1) == 0)
    # the odd neighbour towards err: one step up or down in magnitude
    step = np.where((err > 0) == (s > 0), np.int64(1), np.int64(-1))
    return np.where(inexact, bits + step, bits).view(np.float64)


def _fma_small(a, b, c, dtype):
    """Correctly rounded a*b+c for float16/float32 operands (exact in float64 + round to odd)."""
    p = np.asarray(a, np.float64) * np.asarray(b, np.float64)  # exact: <= 48 significant bits
    s, err = _two_sum(p, np.asarray(c, np.float64))
    return _round_to_odd(s, err).astype(dtype)


def _fma32(a, b, c):
    return _fma_small(a, b, c, np.float32)


def _fma64(a, b, c):
    """Correctly rounded float64 a*b+c (Boldo & Melquiond, IEEE TC 57(4), 2008)."""
    a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
    p = a * b
    t = a * 134217729.0  # Veltkamp/Dekker splitting, 2**27 + 1
    ah = t - (t - a)
    t = b * 134217729.0
    bh = t - (t - b)
    al, bl = a - ah, b - bh
    p_err = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    th, tl = _two_sum(c, p)
    v = _round_to_odd(*_two_sum(tl, p_err))
    out = th + v
    # exact zeros (sign rules) and inf/nan: the plain expression is already exact
    return np.where(np.isfinite(out) & (out != 0), out, p + c)


# --------------------------------------------------------------------------
# log1p and erfinv as compiled by XLA:CPU
# --------------------------------------------------------------------------
def _f32(bits):
    return np.array(bits, np.uint32).view(np.float32)[()]


def _f64(bits):
    return np.array(bits, np.uint64).view(np.float64)[()]


# log1p(x) for |x| < sqrt(2) - 1: x - x^2/2 + x^3 * N(x)/D(x) (Cephes coefficients).
_L1P_THRESH32 = _f32(0x3ED413CD)
_L1P_NUM32 = [np.float32(4.527e-05)] + [_f32(b) for b in (
    0x3EFF40C5, 0x40D284FA, 0x41EF4B9C, 0x4273CC76, 0x426473AD, 0x41A05101)]
_L1P_DEN32 = [np.float32(1.0)] + [_f32(b) for b in (
    0x417101AD, 0x42A6185B, 0x435DC32D, 0x439A8CA3, 0x43586D8A, 0x42707982)]
_L1P_THRESH64 = _f64(0x3FDA827999FCEF32)
_L1P_NUM64 = [_f64(b) for b in (
    0x3F07BC0962B395CA, 0x3FDFE818A0FE1A83, 0x401A509F46F4FA53, 0x403DE9738B8CB9C9,
    0x404E798EB86C3351, 0x404C8E7597479A10, 0x40340A202D99830A)]
_L1P_DEN64 = [1.0] + [_f64(b) for b in (
    0x402E20359E903E37, 0x4054C30B52213498, 0x406BB86590FCFB56, 0x407351945DC908A5,
    0x406B0DB13E48E066, 0x404E0F304466448E)]
# float32 log(m), m in [sqrt(.5), sqrt(2)): Cephes polynomial in three interleaved chains.
_LOG_P32 = [_f32(b) for b in (0x3D9021BB, 0xBDEBD1B8, 0x3DEF251A, 0xBDFE5D4F, 0x3E11E9BF,
                              0xBE2AAE50, 0x3E4CCEAC, 0xBE7FFFFC, 0x3EAAAAAA)]
_LN2_LO32, _LN2_HI32 = _f32(0xB95E8083), _f32(0x3F318000)


def _log1p_small(x, num, den, fma):
    x2 = x * x
    zero = x * x.dtype.type(0)  # keeps XLA's inf/nan propagation
    n, d = zero + num[0], zero + den[0]
    for cn, cd in zip(num[1:], den[1:]):
        n, d = fma(n, x, cn), fma(d, x, cd)
    return x + fma(x2, x.dtype.type(-0.5), (x * x2) * (n / d))


def _log_f32(y):
    """XLA:CPU float32 log (Cephes/Eigen range reduction, FMA-contracted)."""
    fma, one, tiny = _fma32, np.float32(1), _f32(0x00800000)  # smallest normal float32
    yc = np.where(y > tiny, y, tiny)
    bits = yc.view(np.uint32)
    m = ((bits & _U32(0x807FFFFF)) | _U32(0x3F000000)).view(np.float32)
    e = ((bits >> _U32(23)).astype(np.int32) - 127).astype(np.float32) + one
    low = m < _f32(0x3F3504F3)
    e = np.where(low, e - one, e)
    xm = (m - one) + np.where(low, m, np.float32(0))
    x2 = xm * xm
    x3 = x2 * xm
    p = _LOG_P32
    y1, y2, y3 = fma(xm, p[0], p[1]), fma(xm, p[3], p[4]), fma(xm, p[6], p[7])
    y1, y2, y3 = fma(y1, xm, p[2]), fma(y2, xm, p[5]), fma(y3, xm, p[8])
    poly = fma(fma(fma(y1, x3, y2), x3, y3), x3, e * _LN2_LO32)
    r = fma(e, _LN2_HI32, fma(-x2, np.float32(0.5), xm) + poly)
    r = np.where(np.isnan(y) | (y < 0), _f32(0xFFFFFFFF), r)  # XLA's all-ones NaN
    r = np.where(y == 0, np.float32(-np.inf), r)
    return np.where(y == np.inf, np.float32(np.inf), r)


def _log_f64(y):
    """XLA:CPU calls the C library log() for float64 (NumPy's SIMD log differs in rare ulps)."""
    out = np.full(y.shape, np.nan)
    ok = y > 0
    out[ok] = np.fromiter(map(math.log, y[ok].tolist()), np.float64, int(ok.sum()))
    out[y == 0] = -np.inf
    return out


def _log1p(x):
    """log1p(x) for float32/float64 arrays, select(|x| < sqrt(2)-1, rational, log(1 + x))."""
    if x.dtype == np.float64:
        thresh, num, den, fma, log = _L1P_THRESH64, _L1P_NUM64, _L1P_DEN64, _fma64, _log_f64
    else:
        thresh, num, den, fma, log = _L1P_THRESH32, _L1P_NUM32, _L1P_DEN32, _fma32, _log_f32
    small = np.abs(x) < thresh  # each branch is evaluated on its own elements only
    out = np.empty_like(x)
    out[small] = _log1p_small(x[small], num, den, fma)
    out[~small] = log(x[~small] + x.dtype.type(1))
    return out


# Giles' erfinv coefficients, highest degree first, per branch: (upper bound of w,
# offset subtracted from w (first branch) or from sqrt(w) (other branches), coeffs).
_ERFINV32 = [
    (5.0, 2.5, [np.float32(c) for c in (
        "2.81022636e-08", "3.43273939e-07", "-3.5233877e-06", "-4.39150654e-06", "0.00021858087",
        "-0.00125372503", "-0.00417768164", "0.246640727", "1.50140941")]),
    (np.inf, 3.0, [np.float32(c) for c in (
        "-0.000200214257", "0.000100950558", "0.00134934322", "-0.00367342844", "0.00573950773",
        "-0.0076224613", "0.00943887047", "1.00167406", "2.83297682")]),
]
_ERFINV64 = [
    (6.25, 3.125, [
        -3.64441206401782e-21, -1.6850591381820166e-19, 1.28584807152564e-18, 1.1157877678025181e-17,
        -1.3331716628546209e-16, 2.0972767875968562e-17, 6.6376381343583238e-15,
        -4.0545662729752069e-14, -8.1519341976054722e-14, 2.6335093153082323e-12,
        -1.2975133253453532e-11, -5.4154120542946279e-11, 1.0512122733215323e-09,
        -4.1126339803469837e-09, -2.9070369957882005e-08, 4.2347877827932404e-07,
        -1.3654692000834679e-06, -1.3882523362786469e-05, 0.00018673420803405714,
        -0.000740702534166267, -0.0060336708714301491, 0.24015818242558962, 1.6536545626831027]),
    (16.0, 3.25, [
        2.2137376921775787e-09, 9.0756561938885391e-08, -2.7517406297064545e-07,
        1.8239629214389228e-08, 1.5027403968909828e-06, -4.013867526981546e-06,
        2.9234449089955446e-06, 1.2475304481671779e-05, -4.7318229009055734e-05,
        6.8284851459573175e-05, 2.4031110387097894e-05, -0.00035503752036284748,
        0.0009532893797373805, -0.0016882755560235047, 0.0024914420961078508,
        -0.0037512085075692412, 0.0053709145535900636, 1.0052589676941592, 3.0838856104922208]),
    (np.inf, 5.0, [
        -2.7109920616438573e-11, -2.5556418169965252e-10, 1.5076572693500548e-09,
        -3.789465440126737e-09, 7.61570120807834e-09, -1.496002662714924e-08,
        2.9147953450901081e-08, -6.7711997758452339e-08, 2.2900482228026655e-07,
        -9.9298272942317e-07, 4.5260625972231537e-06, -1.9681778105531671e-05,
        7.5995277030017761e-05, -0.00021503011930044477, -0.00013871931833623122,
        1.0103004648645344, 4.8499064014085844]),
]


def _erfinv(x, table, fma):
    """erfinv as chlo.erf_inv decomposes it: w = -log1p(-x*x), piecewise Horner in w."""
    t = x.dtype.type
    w = -_log1p(x * -x)
    out = np.empty_like(x)
    todo = np.ones(x.shape, bool)
    for i, (bound, offset, coeffs) in enumerate(table):
        sel = todo & (w < bound) if i < len(table) - 1 else todo  # NaN w: last branch
        todo = todo & ~sel
        wi = w[sel]
        arg = (wi if i == 0 else np.sqrt(wi)) - t(offset)
        p = np.full_like(wi, coeffs[0])
        for c in coeffs[1:]:
            p = fma(p, arg, t(c))  # XLA:CPU contracts every Horner step
        out[sel] = x[sel] * p
    return np.where(np.abs(x) == 1, x * t(np.inf), out)


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
        val = _fma64(floats, scale, lo)
    elif dt == ml_dtypes.bfloat16:  # XLA rounds every bfloat16 op, so no fusion
        val = floats * scale + lo
    else:  # float16 (native AVX512-FP16 FMA) and float32
        val = _fma_small(floats, scale, lo, dt)
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
            e = _erfinv(u, _ERFINV64, _fma64)
        else:
            e = _erfinv(u.astype(np.float32), _ERFINV32, _fma32).astype(dt)
        return np.asarray(e * np.asarray(math.sqrt(2.0)).astype(dt), dt).reshape(shape)
