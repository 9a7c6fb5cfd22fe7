"""Floating-point functions exactly as XLA:CPU computes them, in NumPy: fused multiply-adds,
``log1p`` and ``erfinv``.

``tlaloc._prims.threefry_impl`` builds ``jax.random.normal`` from ``erfinv`` bit for bit,
so these follow XLA:CPU's own evaluation: the same operation order, the same ``log1p``
algorithm (the Cephes rational approximation for small arguments, a Cephes/Eigen-style
``log`` otherwise; for float64 the C library ``log``), and a fused multiply-add wherever
LLVM contracts one on an FMA-capable x86-64 host. FMAs are emulated exactly (error-free
transformations and rounding to odd), so the results do not depend on whether the host
running this code has FMA.
"""

from __future__ import annotations

import math

import numpy as np

_U32 = np.uint32


def host_has_float16_fma(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether XLA:CPU on this host computes float16 ``a * b + c`` as one fused multiply-add.

    With AVX512-FP16 (Intel Sapphire Rapids and later) LLVM contracts the float16
    multiply and add into one native FMA; without it (AMD Zen 4, older Intel) XLA widens
    each float16 operation to float32 and rounds its result back, so the multiply and
    the add are rounded separately, as for bfloat16. Read from ``/proc/cpuinfo`` (the
    ``avx512_fp16`` flag, as Linux spells it); on a host where that file is absent, ``False``.
    """
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return "avx512_fp16" in line.split()
    except OSError:
        pass
    return False


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


def fma_small(a, b, c, dtype):
    """Correctly rounded a*b+c for float16/float32 operands (exact in float64 + round to odd)."""
    p = np.asarray(a, np.float64) * np.asarray(b, np.float64)  # exact: <= 48 significant bits
    s, err = _two_sum(p, np.asarray(c, np.float64))
    return _round_to_odd(s, err).astype(dtype)


def fma32(a, b, c):
    """Correctly rounded float32 a*b+c."""
    return fma_small(a, b, c, np.float32)


def fma64(a, b, c):
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
    fma, one, tiny = fma32, np.float32(1), _f32(0x00800000)  # smallest normal float32
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
        thresh, num, den, fma, log = _L1P_THRESH64, _L1P_NUM64, _L1P_DEN64, fma64, _log_f64
    else:
        thresh, num, den, fma, log = _L1P_THRESH32, _L1P_NUM32, _L1P_DEN32, fma32, _log_f32
    small = np.abs(x) < thresh  # each branch is evaluated on its own elements only
    out = np.empty_like(x)
    out[small] = _log1p_small(x[small], num, den, fma)
    out[~small] = log(x[~small] + x.dtype.type(1))
    return out


# Giles' erfinv coefficients, highest degree first, per branch: (upper bound of w,
# offset subtracted from w (first branch) or from sqrt(w) (other branches), coeffs).
ERFINV32 = [
    (5.0, 2.5, [np.float32(c) for c in (
        "2.81022636e-08", "3.43273939e-07", "-3.5233877e-06", "-4.39150654e-06", "0.00021858087",
        "-0.00125372503", "-0.00417768164", "0.246640727", "1.50140941")]),
    (np.inf, 3.0, [np.float32(c) for c in (
        "-0.000200214257", "0.000100950558", "0.00134934322", "-0.00367342844", "0.00573950773",
        "-0.0076224613", "0.00943887047", "1.00167406", "2.83297682")]),
]
ERFINV64 = [
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


def erfinv(x, table, fma):
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


__all__ = ["ERFINV32", "ERFINV64", "erfinv", "fma32", "fma64", "fma_small"]
