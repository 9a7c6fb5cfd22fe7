"""JAX float64 oracles for tl.jit: a program's own source run over ``jax.numpy``.

``twin(fn)`` is ``fn`` with the global ``np`` rebound to ``jax.numpy`` (a new
function object from the same code), so JAX computes the program and its
derivatives with its own rules: an oracle that shares no derivative rule,
lowering or runtime with tlaloc. Python control flow on values works because JAX's
eager ``grad``/``jvp`` see concrete values. Programs that write into arrays
(``a[i] = v``) or call tlaloc's own control flow have hand-written twins in ``TWINS``.
"""
from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

#: program name -> its JAX twin, where rebinding ``np`` is not enough
TWINS: dict = {}
_TWINS: dict = {}
_CALLS: dict = {}
#: what tracing raises at a Python branch, ``int()`` or ``np.asarray`` of a traced value, or a boolean mask
_NEEDS_EAGER = (jax.errors.JAXTypeError, jax.errors.JAXIndexError)


def call(key, make, *args):
    """``make()(*args)``: through ``jax.jit`` where the JAX function traces (one compile
    per ``key`` and shapes), eagerly where it has Python control flow on values."""
    f = _CALLS.get(key)
    if f is None:
        eager = make()
        try:
            out = jax.jit(eager)(*args)
            _CALLS[key] = jax.jit(eager)
            return out
        except _NEEDS_EAGER:
            _CALLS[key] = f = eager
    return f(*args)


def twin(fn):
    """``fn`` over ``jax.numpy`` (or its entry in ``TWINS``)."""
    if fn.__name__ in TWINS:
        return TWINS[fn.__name__]
    if fn not in _TWINS:
        g = dict(fn.__globals__)
        g["np"] = jnp
        _TWINS[fn] = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    return _TWINS[fn]


def as_jax(tree):
    """float arrays of ``tree`` as float64 JAX arrays (other leaves as they are)."""
    def conv(v):
        if isinstance(v, (np.ndarray, np.generic)) and np.asarray(v).dtype.kind == "f":
            return jnp.asarray(np.asarray(v, np.float64))
        return jnp.asarray(v) if isinstance(v, np.ndarray) else v
    return jax.tree_util.tree_map(conv, tree)


def to_numpy(tree):
    return jax.tree_util.tree_map(np.asarray, tree)


def _setitem_loop(x, w):
    a = jnp.zeros_like(x)
    for i in range(len(x)):
        a = a.at[i].set(x[i] * w[i] + a[i - 1] * 0.5)
    return (a * a).sum()


def _while_bounded(x):
    y, n = x, 0.0
    while n < 5.0:
        y, n = y * 1.5 + jnp.sin(y), n + 1.0
    return (y * y).sum()


TWINS.update({"setitem_loop": _setitem_loop, "while_bounded": _while_bounded})
