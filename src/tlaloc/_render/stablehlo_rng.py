"""StableHLO lowerings of the random primitives (``tlaloc._prims.rng``).

The ops are JAX's own (``jax._src.prng``, jax 0.10.2 defaults), so XLA
compiles the same arithmetic and the bits are those of ``jax.random`` and of
the NumPy implementation (``tlaloc._prims.threefry_impl``):

* ``threefry2x32``: 20 rounds in 5 groups of 4 on ``ui32`` (``add``, a rotate
  as ``shift_left | shift_right_logical``, ``xor``), key words
  ``k0, k1, k0 ^ k1 ^ 0x1BD11BDA`` injected after every group with the group
  number added to the second word (as JAX's CPU lowering, unrolled);
* ``random_bits``: element ``i`` (row-major) hashes the 64-bit counter ``i`` as
  ``(hi, lo)`` words (partitionable mode); 32 bits are ``y0 ^ y1``, 8 and 16
  bits its low bits, 64 bits ``(y0 << 32) | y1``;
* ``random_uniform``: the top mantissa bits of a random word ``| bits(1.0)``,
  bitcast to the float in ``[1, 2)``, minus 1, then
  ``max(minval, u * (maxval - minval) + minval)`` (bfloat16 draws 8 bits);
* ``random_normal``: ``sqrt(2) * chlo.erf_inv(u)`` with ``u`` uniform on
  ``[nextafter(-1, 0), 1)`` (XLA evaluates ``erf_inv`` of float16/bfloat16 in
  float32).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from .._prims import rng as _rng
from .stablehlo import Val, out_aval
from .stablehlo_structural import slice_

U32, U64 = _dt.uint32, _dt.uint64
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KS_PARITY = 0x1BD11BDA
_UINT = {8: _dt.uint8, 16: np.dtype(np.uint16), 32: U32, 64: U64}
_FORMATS = {_dt.float16: (16, 10), _dt.bfloat16: (16, 7), _dt.float32: (32, 23), _dt.float64: (64, 52)}


def _key_word(em, key: Val, i: int, shape) -> Val:
    """``key[i]`` broadcast to ``shape``."""
    return em.broadcast(em.reshape(slice_(em, key, [i], [i + 1]), ()), shape)


def threefry(em, key: Val, x0: Val, x1: Val):
    """Threefry-2x32 of the counter words ``x0, x1`` (ui32, one shape) under ``key`` (ui32[2])."""
    shape = x0.shape
    consts: dict = {}

    def c(value):
        if value not in consts:
            consts[value] = em.const(value, U32, shape)
        return consts[value]

    def add(a, b):
        return em.binary("stablehlo.add", a, b)

    k0, k1 = _key_word(em, key, 0, shape), _key_word(em, key, 1, shape)
    ks = (k0, k1, em.binary("stablehlo.xor", em.binary("stablehlo.xor", k0, k1), c(_KS_PARITY)))
    a, b = add(x0, ks[0]), add(x1, ks[1])
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            a = add(a, b)
            b = em.binary("stablehlo.or", em.binary("stablehlo.shift_left", b, c(r)),
                          em.binary("stablehlo.shift_right_logical", b, c(32 - r)))
            b = em.binary("stablehlo.xor", b, a)
        a = add(a, ks[(i + 1) % 3])
        b = add(add(b, ks[(i + 2) % 3]), c(i + 1))
    return a, b


def _counter_words(em, n: int):
    """The row-major counters ``0 .. n-1`` as ``(hi, lo)`` ui32 words of shape ``(n,)``."""
    if n < 2**32:
        return em.const(0, U32, (n,)), em.op("stablehlo.iota", [], (U32, (n,)), attrs={"iota_dimension": "0 : i64"})
    idx = em.op("stablehlo.iota", [], (U64, (n,)), attrs={"iota_dimension": "0 : i64"})
    hi = em.binary("stablehlo.shift_right_logical", idx, em.const(32, U64, (n,)))
    return em.convert(hi, U32), em.convert(idx, U32)


def random_bits(em, key: Val, bit_width: int, n: int) -> Val:
    """``n`` random words of ``bit_width`` bits, flat ``(n,)``."""
    y0, y1 = threefry(em, key, *_counter_words(em, n))
    if bit_width == 64:
        hi = em.binary("stablehlo.shift_left", em.convert(y0, U64), em.const(32, U64, (n,)))
        return em.binary("stablehlo.or", hi, em.convert(y1, U64))
    return em.convert(em.binary("stablehlo.xor", y0, y1), _UINT[bit_width])


def unit_floats(em, key: Val, dtype, shape) -> Val:
    """Uniform floats in ``[0, 1)`` of ``dtype`` and ``shape``: random mantissa bits
    under the exponent of 1.0, bitcast, minus 1."""
    nbits, nmant = _FORMATS[np.dtype(dtype)]
    rng_bits = 8 if nmant < 8 else nbits
    udt, n = _UINT[nbits], math.prod(shape)
    bits = em.convert(random_bits(em, key, rng_bits, n), udt)
    one_bits = int(np.ones((), dtype).view(udt))
    mant = em.binary("stablehlo.shift_right_logical", bits, em.const(rng_bits - nmant, udt, (n,)))
    floats = em.op("stablehlo.bitcast_convert",
                   [em.binary("stablehlo.or", mant, em.const(one_bits, udt, (n,)))], (dtype, (n,)))
    return em.reshape(em.binary("stablehlo.subtract", floats, em.const(1.0, dtype, (n,))), shape)


def _affine(em, u: Val, lo: Val, hi: Val) -> Val:
    """``max(lo, u * (hi - lo) + lo)``, in JAX's op order."""
    val = em.binary("stablehlo.add", em.binary("stablehlo.multiply", u, em.binary("stablehlo.subtract", hi, lo)), lo)
    return em.binary("stablehlo.maximum", lo, val)


# -- rules ------------------------------------------------------------------------------------

def _threefry_rule(em, node, key, x0, x1):
    _, sh = out_aval(node)
    return list(threefry(em, em.value(key, U32), em.value(x0, U32, sh), em.value(x1, U32, sh)))


def _bits_rule(em, node, key):
    _, sh = out_aval(node)
    return em.reshape(random_bits(em, em.value(key, U32), int(node.params["bit_width"]), math.prod(sh)), sh)


def _uniform_rule(em, node, key, lo, hi):
    dt, sh = out_aval(node)
    u = unit_floats(em, em.value(key, U32), dt, sh)
    return _affine(em, u, em.value(lo, dt, sh), em.value(hi, dt, sh))


def _normal_rule(em, node, key):
    dt, sh = out_aval(node)
    udt = _UINT[_FORMATS[dt][0]]
    lo = ((-np.ones((), dt)).view(udt) - udt.type(1)).view(dt)            # nextafter(-1, 0)
    u = _affine(em, unit_floats(em, em.value(key, U32), dt, sh), em.const(lo, dt, sh), em.const(1.0, dt, sh))
    e = em.op("chlo.erf_inv", [u], (dt, sh))
    return em.binary("stablehlo.multiply", em.const(math.sqrt(2.0), dt, sh), e)


LOWERINGS = {
    _rng.threefry2x32_p.name: _threefry_rule,
    _rng.random_bits_p.name: _bits_rule,
    _rng.random_uniform_p.name: _uniform_rule,
    _rng.random_normal_p.name: _normal_rule,
}
