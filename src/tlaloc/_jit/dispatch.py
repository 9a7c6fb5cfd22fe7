"""The hit path of ``tl.jit``: a call whose argument signature has been compiled before.

A call's *signature* is what selects its executable: the pytree structure of
the arguments, each leaf's (type, dtype, shape) (a Python number: its type),
and the values of the static arguments. ``signature(args, static)`` computes
it in one walk over the arguments, as a flat tuple of tokens (cheap to hash
and compare), together with the leaves. It builds no ``TreeDef`` and no
``AbstractValue``: ``Jitted._prepare`` still builds those, once per
signature, on the slow path, and ``Hit`` keeps what it found (the source, the
trees, the executable, how to move each leaf to the device, how to rebuild
the result). A new structure, shape, dtype, leaf type or static value is a
new signature, so it misses and takes the slow path, which retraces or
recompiles as before.

The tokens form a prefix code: a node's first token is its type, and the
type fixes how many tokens follow (a dtype and a shape for an array, the
length for a tuple, the static field values for a dataclass, ...). So two
token tuples are equal only when the structures, leaf types, dtypes, shapes
and static values all are. ``signature`` returns ``None`` (the slow path
decides) for anything it does not know: other leaf types, a Python int beyond
int64, an unhashable static value.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import _pytree

# node kinds (the first item of a ``_KINDS`` entry)
_ARRAY, _SCALAR, _TUPLE, _LIST, _NONE, _DATACLASS, _NODE, _OTHER = range(8)
_KINDS: dict = {}             # type -> (kind, ...): see ``_classify``
_REGISTRY = [-1]              # len(_pytree._CUSTOM) when _KINDS was filled
_INT64 = (-2 ** 63, 2 ** 63)


def _device_array_type():
    try:
        from jaxlib import _jax
        return _jax.ArrayImpl
    except Exception:                                      # pragma: no cover
        return None


_ARRAY_TYPES = {np.ndarray} | ({_device_array_type()} - {None})


def _classify(t) -> tuple:
    """How ``_walk`` treats an object of type ``t``; mirrors ``_pytree._node``."""
    if t in _pytree._CUSTOM:
        return (_NODE,)
    if t is tuple:
        return (_TUPLE,)
    if t is list:
        return (_LIST,)
    if t is type(None):
        return (_NONE,)
    if t in _ARRAY_TYPES or issubclass(t, np.generic):
        return (_ARRAY,)
    if t in (bool, int, float):
        return (_SCALAR,)
    if (issubclass(t, tuple) and hasattr(t, "_fields")) or issubclass(t, dict):
        return (_NODE,)
    if dataclasses.is_dataclass(t):
        fields = dataclasses.fields(t)
        names = tuple(f.name for f in fields if f.metadata.get("static") is not True)
        static = tuple(f.name for f in fields if f.metadata.get("static") is True)
        return (_DATACLASS, names, static)
    return (_OTHER,)


def _kind(t) -> tuple:
    k = _KINDS[t] = _classify(t)
    return k


def know_array_types(types) -> None:
    """Treat objects of ``types`` as array leaves (they have ``dtype`` and ``shape``)."""
    new = set(types) - _ARRAY_TYPES
    if new:
        _ARRAY_TYPES.update(new)
        _KINDS.clear()


class _Unknown(Exception):
    """A value ``signature`` does not handle; the slow path decides."""


def _walk(x, leaves: list, sig: list) -> None:
    t = type(x)
    k = _KINDS.get(t) or _kind(t)
    kind = k[0]
    if kind == _ARRAY:
        leaves.append(x)
        sig.append((t, x.dtype, x.shape))
    elif kind == _DATACLASS:
        sig.append(t)
        for name in k[2]:
            sig.append(getattr(x, name))
        for name in k[1]:
            c = getattr(x, name)
            if type(c) in _ARRAY_TYPES:                   # the common leaf, without a call
                leaves.append(c)
                sig.append((type(c), c.dtype, c.shape))
            else:
                _walk(c, leaves, sig)
    elif kind == _TUPLE or kind == _LIST:
        sig.append((t, len(x)))
        for c in x:
            if type(c) in _ARRAY_TYPES:
                leaves.append(c)
                sig.append((type(c), c.dtype, c.shape))
            else:
                _walk(c, leaves, sig)
    elif kind == _SCALAR:
        if t is int and not _INT64[0] <= x < _INT64[1]:
            raise _Unknown
        leaves.append(x)
        sig.append(t)
    elif kind == _NONE:
        sig.append(t)
    elif kind == _NODE:
        node_kind, aux, children = _pytree._node(x)
        sig.append((t, node_kind, aux, len(children)))
        for c in children:
            _walk(c, leaves, sig)
    else:
        raise _Unknown


def signature(args: tuple, static: frozenset):
    """``(key, leaves)`` for a call with positional ``args``, or ``None`` (see the module docstring).

    ``static``: the static argument positions, as given (negative ones count from the end).
    """
    n = len(args)
    registered = len(_pytree._CUSTOM)
    if _REGISTRY[0] != registered:                        # a type registered since: classify again
        _KINDS.clear()
        _REGISTRY[0] = registered
    sig: list = [registered, n]
    leaves: list = []
    try:
        if static:
            if any(not -n <= a < n for a in static):
                return None
            pos = {a % n for a in static}
            for k, a in enumerate(args):
                if k in pos:
                    sig.append(a)
                else:
                    _walk(a, leaves, sig)
        else:
            for a in args:
                if type(a) in _ARRAY_TYPES:               # the common argument, without a call
                    leaves.append(a)
                    sig.append((type(a), a.dtype, a.shape))
                else:
                    _walk(a, leaves, sig)
        key = tuple(sig)
        hash(key)
    except (_Unknown, TypeError, AttributeError):
        return None
    return key, leaves


def leaf_token(x):
    """The signature token of one leaf (a closure value), or ``None`` if it is not an array or a number."""
    sig: list = []
    try:
        _walk(x, [], sig)
    except (_Unknown, TypeError, AttributeError):
        return None
    if len(sig) != 1 or _KINDS[type(x)][0] not in (_ARRAY, _SCALAR):
        return None
    return sig[0]


class Hit:
    """What a call with a known signature runs: read the closure values, run, rebuild the result.

    ``run(leaves)`` takes the argument leaves then the closure values and
    returns the flat outputs (``Executable.runner``, specialised to the leaf
    types). ``getters`` read the closure values; ``tokens`` are the tokens
    those values had when this signature was compiled: a closure array whose
    shape or dtype changed since is a miss (``__call__`` returns ``MISS``, and
    the slow path compiles for the new one). ``finish`` rebuilds the result.
    The slow path's argument checks are not repeated: their outcome depends
    only on the signature, and they passed for it.
    """

    __slots__ = ("run", "finish", "trees", "getters", "tokens")
    MISS = object()

    def __init__(self, run, finish, trees, getters, tokens):
        self.run, self.finish, self.trees = run, finish, trees
        self.getters, self.tokens = getters, tokens

    def __call__(self, args, leaves):
        if self.getters:
            closure = [g() for g in self.getters]
            if [leaf_token(v) for v in closure] != self.tokens:
                return Hit.MISS
            leaves = leaves + closure
        return self.finish(args, self.trees, self.run(leaves))


def make_hit(src, trees, compiled, leaves, n_args):
    """The ``Hit`` for the call just made (``leaves``: argument leaves then closure values), or ``None``
    when one of its closure values is not a plain array or number."""
    closure = leaves[n_args:]
    tokens = [leaf_token(v) for v in closure]
    if any(t is None for t in tokens):
        return None
    fast = getattr(compiled.executable, "runner", None)
    run = fast(leaves, compiled.lowered.name) if fast is not None else compiled.call_flat
    return Hit(run, src.finish, trees, list(src.closure_getters), tokens)


__all__ = ["signature", "leaf_token", "know_array_types", "Hit", "make_hit"]
