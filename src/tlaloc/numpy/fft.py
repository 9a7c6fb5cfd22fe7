"""``tlaloc.numpy.fft``: NumPy's FFTs, eagerly only.

Their results are complex, which tlaloc's primitives do not carry: each name
runs ``numpy.fft`` on concrete arrays and is refused by name (``NoRuleError``)
inside grad/jvp/vmap/jit.
"""
from __future__ import annotations

import numpy as _np

from ._array_api import _eager

_WHY = "complex results, which tlaloc's primitives do not carry"
_NAMES = ("fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
          "fftfreq", "rfftfreq", "fftshift", "ifftshift")

for _name in _NAMES:
    globals()[_name] = _eager(f"fft.{_name}", getattr(_np.fft, _name), _WHY)
    globals()[_name].__wrapped__ = getattr(_np.fft, _name)          # NumPy's signature, for inspect



def fftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """Sample frequencies of an ``n``-point FFT with spacing ``d`` (``numpy.fft.fftfreq``)."""
    out = _np.fft.fftfreq(n, d)
    return out if dtype is None else out.astype(dtype)


def rfftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """Sample frequencies of ``rfft`` (``numpy.fft.rfftfreq``)."""
    out = _np.fft.rfftfreq(n, d)
    return out if dtype is None else out.astype(dtype)


__all__ = list(_NAMES)
