"""What every runtime does around a call: the run-time checks and argument checks."""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, TlalocError


def without_checks(outs: list, checks: list) -> list:
    """``outs`` without the trailing check flags (one bool per run-time check).

    Raises:
      TlalocError: with the message of the first check whose flag is set.
    """
    if not checks:
        return outs
    n = len(outs) - len(checks)
    for flag, message in zip(outs[n:], checks):
        if bool(np.asarray(flag)):
            raise TlalocError(message)
    return outs[:n]


def donated(name: str) -> ArgumentError:
    return ArgumentError(f"{name} was donated to an earlier call (donate_argnums) and its buffer is gone; "
                         f"pass the array that call returned instead")


def host_array(a, dtype, shape, name: str) -> np.ndarray:
    """``a`` as a NumPy array of the compiled ``dtype``; refuses another ``shape`` by name."""
    arr = np.asarray(a)
    if arr.dtype != dtype:
        arr = arr.astype(dtype)
    if arr.shape != shape:
        raise ArgumentError(f"{name} has shape {arr.shape}; this program was compiled for {shape}")
    return arr
