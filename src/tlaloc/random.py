"""``tlaloc.random``: counter-based pseudo-random numbers (Threefry-2x32).

A *key* is a ``uint32`` array of shape ``(2,)``. Every function is pure: the
same key gives the same numbers, and nothing is stored between calls. To draw
several independent samples, ``split`` the key (or ``fold_in`` a step number)
and use each new key once::

    k = tlaloc.random.key(0)
    k_init, k_drop = tlaloc.random.split(k)
    w = tlaloc.random.normal(k_init, (784, 256))          # (784, 256) float32

The generator is Threefry-2x32 with 20 rounds, the counter-based block cipher
of J. K. Salmon, M. A. Moraes, R. O. Dror and D. E. Shaw, "Parallel random
numbers: as easy as 1, 2, 3", Proc. SC'11 (2011), doi:10.1145/2063384.2063405.
The streams are bit-for-bit those of ``jax.random`` with JAX's defaults
(``threefry2x32``, partitionable mode); ``key`` seeds as JAX does with
``jax_enable_x64`` on (64-bit seeds; the same keys as x64 off for seeds in
``[0, 2**31)``), and float64 samples match JAX with x64 on.

Each function runs eagerly on NumPy arrays and records DXIR nodes on symbolic
values (inside ``grad``/``jit``), through the primitives of
``tlaloc/_prims/rng.py``. Shapes and dtypes are static Python values.
"""
from __future__ import annotations

import numpy as np

from . import dtypes as _dt
from ._core.builder import Value
from ._prims import rng as _rng
from ._prims import shape_ops as _sh
from ._prims import threefry_impl as _impl
from ._prims.conversion import convert as _convert
from ._prims.elementwise import floordiv_p as _floordiv_p
from .errors import ArgumentError, DTypeError

__all__ = ["key", "PRNGKey", "split", "fold_in", "bits", "uniform", "normal"]


def _floor_divide(x, y):
    return _floordiv_p.bind(x, y)


def _symbolic(x) -> bool:
    return type(x) is Value


def _integer_value(op, name, x):
    """A symbolic integer operand: refuse a known non-integer dtype."""
    if x.dtype is not None and x.dtype.kind not in "iu":
        raise DTypeError(f"{op}: {name} must be an integer, got dtype {x.dtype}")
    return x


def key(seed):
    """A key from an integer seed, like ``jax.random.PRNGKey(seed)`` with ``jax_enable_x64`` on.

    The int64 seed's two's-complement bits are split into ``[hi, lo]`` words:
    ``[(seed mod 2**64) >> 32, seed mod 2**32]`` (``2**40`` gives ``[256, 0]``,
    ``-1`` gives ``[0xFFFFFFFF, 0xFFFFFFFF]``), so distinct 64-bit seeds give
    distinct keys. 8/16/32-bit NumPy integers give ``[0, seed mod 2**32]``, as
    in JAX. Seeds in ``[0, 2**31)`` give the same key as JAX with x64 off.

    Args:
      seed: a Python int in ``[-2**63, 2**63)``, a NumPy integer scalar, or a
        symbolic integer scalar.
    Returns:
      uint32 array of shape ``(2,)``.
    Raises:
      DTypeError: ``seed`` is not an integer (a float, a bool).

    A symbolic seed whose dtype is unknown when the graph is built is read as
    int64 (a negative 8/16/32-bit seed then gets the high word ``0xFFFFFFFF``;
    give such seeds a dtype, or pass them as Python ints).
      ArgumentError: ``seed`` is a Python int outside the int64 range, or not a scalar.
    """
    if _symbolic(seed):
        seed = _integer_value("key", "seed", seed)
        low = _sh.reshape(_convert(seed, _dt.uint32), (1,))
        if seed.dtype is not None and seed.dtype.itemsize < 8:
            return _sh.concatenate([np.zeros(1, np.uint32), low])
        wide = seed if seed.dtype is not None else _convert(seed, _dt.int64)     # unknown dtype: read as int64
        high = _sh.reshape(_convert(_floor_divide(wide, 2**32), _dt.uint32), (1,))   # the top 32 bits
        return _sh.concatenate([high, low])
    if isinstance(seed, (bool, np.bool_)):
        raise DTypeError(f"key: seed must be an integer, got {seed!r}")
    try:
        return _impl.key(seed, x64=True)
    except TypeError as e:
        raise DTypeError(f"key: {e}; pass an int in [-2**63, 2**63) (e.g. int(seed))") from None
    except ValueError as e:
        raise ArgumentError(f"key: {e}; pass an int in [-2**63, 2**63) (reduce it, e.g. seed % 2**63)") from None


PRNGKey = key


def _stack_words(y0, y1):
    return _sh.concatenate([_sh.expand_dims(y0, -1), _sh.expand_dims(y1, -1)], -1)


def split(key, num=2):
    """New keys from ``key``, like ``jax.random.split``.

    Key ``i`` (row-major) is ``threefry2x32(key, hi(i), lo(i))`` of the 64-bit
    counter ``i``.

    Args:
      key: uint32 ``(2,)``.
      num: the number of keys (int), or a shape (tuple of ints).
    Returns:
      uint32 array of shape ``(num, 2)`` (or ``(*num, 2)``).
    Raises:
      ShapeError / DTypeError: ``key`` is not a uint32 array of shape ``(2,)``.
      ArgumentError: ``num`` is negative or not an int / tuple of ints.
    """
    shape = _rng.static_shape("split", num, "num")
    hi, lo = _impl._counters(shape)
    y0, y1 = _rng.threefry2x32(key, hi, lo)
    return _stack_words(y0, y1)


def fold_in(key, data):
    """A new key from ``key`` and a 32-bit integer, like ``jax.random.fold_in``.

    The new key is both words of ``threefry2x32(key, 0, data)``; use it to
    derive one key per step or per layer without splitting.

    Args:
      key: uint32 ``(2,)``.
      data: a Python int in ``[0, 2**32)``, or an integer scalar (NumPy or
        symbolic) taken modulo ``2**32``.
    Returns:
      uint32 array of shape ``(2,)``.
    Raises:
      ShapeError / DTypeError: bad ``key``.
      DTypeError: ``data`` is not an integer.
      ArgumentError: a Python int ``data`` outside ``[0, 2**32)``, or a non-scalar ``data``.
    """
    if _symbolic(data):
        word = _convert(_integer_value("fold_in", "data", data), _dt.uint32)
    else:
        if isinstance(data, (bool, np.bool_)):
            raise DTypeError(f"fold_in: data must be an integer, got {data!r}")
        if isinstance(data, int) and not 0 <= data < 2**32:
            raise ArgumentError(f"fold_in: data must be in [0, 2**32), got {data}")
        arr = np.asarray(data)
        if arr.dtype.kind not in "iu":
            raise DTypeError(f"fold_in: data must be an integer, got dtype {arr.dtype}")
        if arr.ndim != 0:
            raise ArgumentError(f"fold_in: data must be a scalar, got shape {arr.shape}")
        word = arr.astype(np.uint32)
    y0, y1 = _rng.threefry2x32(key, np.zeros(1, np.uint32), _sh.reshape(word, (1,)))
    return _sh.concatenate([y0, y1])


def bits(key, shape=(), dtype=np.uint32):
    """Uniform random unsigned integers, like ``jax.random.bits``.

    Args:
      key: uint32 ``(2,)``.
      shape: int or tuple of non-negative ints.
      dtype: uint8, uint16, uint32 (default) or uint64.
    Returns:
      array of ``shape`` and ``dtype``, every bit pattern equally likely.
    Raises:
      ShapeError / DTypeError: bad ``key``.
      ArgumentError: bad ``shape`` or ``dtype``.
    """
    width = _rng.bits_dtype("bits", dtype)
    return _rng.random_bits_p.bind(key, bit_width=width, shape=_rng.static_shape("bits", shape))


def uniform(key, shape=(), dtype=np.float32, minval=0.0, maxval=1.0):
    """Uniform floats in ``[minval, maxval)``, like ``jax.random.uniform``.

    Random bits fill the mantissa of a float in ``[1, 2)``; subtracting 1 gives
    ``u`` in ``[0, 1)`` and the result is ``max(minval, u * (maxval - minval) + minval)``
    in ``dtype``. Differentiable in ``minval`` (``1 - u``) and ``maxval`` (``u``).

    Args:
      key: uint32 ``(2,)``.
      shape: int or tuple of non-negative ints.
      dtype: float16, bfloat16, float32 (default) or float64.
      minval, maxval: Python floats, or arrays of ``dtype`` that broadcast to ``shape``.
    Returns:
      array of ``shape`` and ``dtype``.
    Raises:
      ShapeError / DTypeError: bad ``key``; bounds that do not broadcast to
        ``shape`` or whose float dtype is not ``dtype``.
      ArgumentError: bad ``shape`` or ``dtype``.
    """
    return _rng.random_uniform_p.bind(key, minval, maxval, shape=_rng.static_shape("uniform", shape),
                                      dtype=_rng.sample_dtype("uniform", dtype))


def normal(key, shape=(), dtype=np.float32):
    """Standard normal floats, like ``jax.random.normal``.

    ``sqrt(2) * erfinv(u)`` with ``u`` uniform on ``(-1, 1)``; for float16 and
    bfloat16 ``erfinv`` runs in float32 and is rounded back (as XLA).

    Args:
      key: uint32 ``(2,)``.
      shape: int or tuple of non-negative ints.
      dtype: float16, bfloat16, float32 (default) or float64.
    Returns:
      array of ``shape`` and ``dtype`` (mean 0, variance 1).
    Raises:
      ShapeError / DTypeError: bad ``key``.
      ArgumentError: bad ``shape`` or ``dtype``.
    """
    return _rng.random_normal_p.bind(key, shape=_rng.static_shape("normal", shape),
                                     dtype=_rng.sample_dtype("normal", dtype))
