"""NumPy calls with floating-point errors ignored, without ``np.errstate``'s cost.

Derivative rules and several impls compute values such as ``0 * inf`` or
``sqrt(-1)`` on purpose and must not warn (or raise under ``np.seterr``). A
fresh ``np.errstate(all="ignore")`` per call costs about three times a small
ufunc call; ``quiet(fn)`` sets the same error state (NumPy's context variable)
with an object cached per surrounding error state, and resets it afterwards.
Results are the same bits: only the error reporting differs.
"""
from __future__ import annotations

import numpy as np

try:      # NumPy >= 2.0 keeps the error state in a context variable
    from numpy._core.umath import _extobj_contextvar as _STATE
    from numpy._core.umath import _make_extobj
except ImportError:       # pragma: no cover - other NumPy versions: the public, slower way
    _STATE = None

_cache = (None, None)     # (surrounding state, the same state with every error ignored)


def _ignoring_state():
    global _cache
    current = _STATE.get()
    last, ignoring = _cache
    if current is last:
        return ignoring
    ignoring = _make_extobj(all="ignore")     # built from the current state: keeps bufsize and errcall
    _cache = (current, ignoring)
    return ignoring


def quiet(fn):
    """``fn`` run as under ``np.errstate(all="ignore")``."""
    if _STATE is None:    # pragma: no cover
        return np.errstate(all="ignore")(fn)

    def run(*args, **params):
        token = _STATE.set(_ignoring_state())
        try:
            return fn(*args, **params)
        finally:
            _STATE.reset(token)
    run.__name__ = getattr(fn, "__name__", "quiet")
    run.__wrapped__ = fn
    return run
