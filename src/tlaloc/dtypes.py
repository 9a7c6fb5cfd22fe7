"""The dtypes tlaloc knows, and the one promotion rule it adds to NumPy's.

Supported: float64, float32, bfloat16, float16 (the last two from ml_dtypes /
NumPy), int8, int32, int64, uint32 (RNG keys) and bool.

Promotion follows NumPy (NEP 50: Python scalars are weak and adopt the array's
dtype): ``float32 * float64`` is float64, as in NumPy, JAX (with x64) and PyTorch,
and a derivative has its primal's dtype (the cotangent of a float32 argument that
met a float64 is cast back, as JAX's VJP of the implicit convert does).

``numpy_dtype_promotion("strict")`` (or ``TLALOC_NUMPY_DTYPE_PROMOTION=strict`` in
the environment) refuses two *different* floating dtypes instead, with a
``DTypeError`` naming both operands, like ``jax.numpy_dtype_promotion("strict")``:
for code that must stay in one precision. The mode applies where a graph is built
(a transform's first call per argument signature) and to eager calls.
"""
from __future__ import annotations

import contextlib
import os

import ml_dtypes
import numpy as np

from .errors import DTypeError

float64 = np.dtype(np.float64)
float32 = np.dtype(np.float32)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
int8 = np.dtype(np.int8)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
bool_ = np.dtype(np.bool_)

FLOATS = (float64, float32, bfloat16, float16)
SUPPORTED = FLOATS + (int8, int32, int64, uint8, uint32, uint64, bool_)

_SHORT = {float64: "f64", float32: "f32", bfloat16: "bf16", float16: "f16",
          int8: "i8", int32: "i32", int64: "i64", uint8: "u8", uint32: "u32",
          uint64: "u64", bool_: "bool"}


def short_name(dtype) -> str:
    """``float32`` -> ``"f32"``; used by the DXIR printer and error messages."""
    if dtype is None:
        return "?"
    return _SHORT.get(np.dtype(dtype), str(dtype))


def is_float(dtype) -> bool:
    """True for the floating dtypes (the ones that carry gradients)."""
    return dtype is not None and np.dtype(dtype) in FLOATS


def is_inexact(dtype) -> bool:
    return dtype is not None and (np.dtype(dtype) in FLOATS
                                  or np.issubdtype(np.dtype(dtype), np.complexfloating))


_MODES = ("standard", "strict")


def _initial_mode() -> str:
    mode = os.environ.get("TLALOC_NUMPY_DTYPE_PROMOTION", "standard")
    if mode not in _MODES:
        raise ValueError(f"TLALOC_NUMPY_DTYPE_PROMOTION={mode!r}: expected one of {_MODES}")
    return mode


_mode = _initial_mode()


def promotion_mode() -> str:
    """``"standard"`` (NumPy's promotion) or ``"strict"`` (float mixes refused)."""
    return _mode


@contextlib.contextmanager
def numpy_dtype_promotion(mode: str):
    """Within the block, promote as ``mode`` says (``jax.numpy_dtype_promotion``'s names).

    Args:
      mode: ``"standard"``: NumPy's rules, ``float32 + float64 -> float64``;
        ``"strict"``: two different floating dtypes raise ``DTypeError``.

    Raises:
      ValueError: ``mode`` is neither.

    Graphs (and so compiled programs) built inside the block keep its rule; a
    transform first called outside it and then inside reuses what it built.
    """
    global _mode
    if mode not in _MODES:
        raise ValueError(f"numpy_dtype_promotion: mode must be one of {_MODES}, got {mode!r}")
    before = _mode
    _mode = mode          # part of the key under which _core/primitive.py memoizes abstract evaluation
    try:
        yield
    finally:
        _mode = before


def check_float_mix(op: str, operands: dict) -> None:
    """In strict mode, refuse two different floating dtypes among ``operands``; in
    standard mode NumPy promotes them, and only bfloat16 with float16 (which NumPy
    cannot promote) is refused.

    Args:
      op: the operation's name, for the message.
      operands: ``{argument name: dtype or None}``; ``None`` (unknown, or a weak
        Python scalar) never conflicts.

    Raises:
      DTypeError: naming both operands and their dtypes, with the fix.
    """
    seen = None
    for name, dt in operands.items():
        if dt is None or not is_float(dt):
            continue
        if seen is None:
            seen = (name, np.dtype(dt))
        elif _mode == "standard":
            if {seen[1], np.dtype(dt)} == {bfloat16, float16}:
                raise DTypeError(
                    f"{op}: {seen[0]} is {seen[1].name} but {name} is {np.dtype(dt).name}; NumPy has no "
                    f"common dtype for bfloat16 and float16. Convert one explicitly, "
                    f"e.g. `{name}.astype(np.float32)`.")
        elif np.dtype(dt) != seen[1]:
            raise DTypeError(
                f"{op}: {seen[0]} is {seen[1].name} but {name} is {np.dtype(dt).name}; "
                f"float dtypes never mix implicitly under numpy_dtype_promotion('strict'). "
                f"Convert one explicitly, e.g. `{name}.astype(np.{seen[1].name})`.")


def result_dtype(*dtypes):
    """NumPy's result dtype for non-weak operand dtypes; ``None`` (an operand whose dtype is not
    known yet) makes the result unknown too: ``unknown @ int64`` may be int64 or float64.
    (Regression: the unknown entry was skipped, so ``x @ n`` with an int ``n`` was typed int64
    before x's dtype was known, and ``grad`` refused an "int64 output".)"""
    if not dtypes or any(d is None for d in dtypes):
        return None
    return np.result_type(*(np.dtype(d) for d in dtypes))


__all__ = ["float64", "float32", "float16", "bfloat16", "int8", "int32", "int64",
           "uint8", "uint32", "uint64", "bool_", "is_float", "check_float_mix", "short_name",
           "numpy_dtype_promotion", "promotion_mode"]
