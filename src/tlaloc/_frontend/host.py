"""Calls that run when the transformed function is called, never when it is built.

A NumPy random draw (``np.random.randn``, ``RandomState``/``Generator``
methods), the clock, I/O, or ``print`` returns something that is not a
function of the arguments. Folding such a call while lowering would freeze
its result into the derivative: every call would reuse the same noise. So
the front end records the call instead, as a *host action*: a graph input
whose getter makes the call. Transformed functions call their getters at
every call, in order, before running the generated code, so the draws
happen at call time, in program order, exactly as plain NumPy makes them
(the same seed gives the same values).

An action inside an ``if``/loop on an array value is refused (NumPy would
make it only on the paths taken); inside a static loop, the loop unrolls.
Under ``tl.jit`` an action is refused by name (``getter.__tlaloc_host_call__``).

* ``HostObject``: the non-array result of an action (``np.random.RandomState(0)``
  made inside the function); its methods are actions too.
* ``Frame``: per call, the result of each action, read by later actions.
* ``Guard``: a global or closure Python value folded as a constant; the
  derivative is rebuilt when it changes (see ``Transformed.__call__``).
"""
from __future__ import annotations

import datetime
import random as _pyrandom
import types

import numpy as np

_STATEFUL_TYPES = (np.random.RandomState, np.random.Generator, np.random.BitGenerator,
                   np.random.SeedSequence, _pyrandom.Random)
_CALL_TIME_MODULES = ("numpy.random", "random", "time", "os", "uuid", "secrets", "io")
_CALL_TIME_BUILTINS = ("print", "open", "input")
# results that are objects (their methods are actions), and actions that return nothing
_OBJECT_RESULTS = ("RandomState", "Generator", "default_rng", "SeedSequence", "Random", "PCG64",
                   "MT19937", "Philox", "SFC64", "PCG64DXSM", "get_state", "spawn", "open")
_EFFECTS = ("seed", "shuffle", "set_state", "print", "bit_generator")


class HostObject:
    """The result of action ``k`` of this call (an object, e.g. a RandomState made in ``f``)."""

    def __init__(self, frame, k, what):
        self.frame, self.k, self.what = frame, k, what

    def __repr__(self):
        return f"<{self.what} made at call time>"


class HostMethod:
    def __init__(self, obj: HostObject, name: str):
        self.obj, self.name = obj, name
        self.__name__ = name


class Frame(dict):
    """Action index -> its result in the current call (overwritten by the next call)."""


def call_time_name(fn):
    """A readable name when ``fn``'s result is not a function of its arguments, else None."""
    if isinstance(fn, HostMethod):
        return f"{fn.obj.what}.{fn.name}"
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", None) or type(fn).__name__
    if isinstance(owner, _STATEFUL_TYPES):
        return f"{type(owner).__name__}.{name}"
    if any(owner is t for t in (datetime.datetime, datetime.date)):
        return f"datetime.{name}"
    mod = getattr(fn, "__module__", None) or ""
    if isinstance(fn, type) and issubclass(fn, _STATEFUL_TYPES):
        return f"{mod}.{name}"
    if any(mod == m or mod.startswith(m + ".") for m in _CALL_TIME_MODULES):
        return f"{mod}.{name}"
    if mod == "builtins" and name in _CALL_TIME_BUILTINS:
        return name
    return None


def result_kind(fn) -> str:
    """'object', 'effect' or 'array': what the action's result becomes in the lowering."""
    name = fn.name if isinstance(fn, HostMethod) else getattr(fn, "__name__", "")
    if isinstance(fn, type) or name in _OBJECT_RESULTS:
        return "object"
    if name in _EFFECTS:
        return "effect"
    return "array"


def probe_aval(fn, args, kwargs, default):
    """The aval of a draw's result, from the same call on a copy of its generator (the real
    state is not advanced); ``default`` when that cannot be done (an object made inside ``f``)."""
    import copy
    from .._core import aval as _aval
    owner = getattr(fn, "__self__", None)
    if isinstance(fn, HostMethod) or not isinstance(owner, _STATEFUL_TYPES):
        return default
    if any(isinstance(a, HostObject) for a in list(args) + list(kwargs.values())):
        return default
    try:
        value = getattr(copy.deepcopy(owner), fn.__name__)(*args, **kwargs)
    except Exception:
        return default
    return _aval.of(np.asarray(value))


def _resolve(x, frame):
    if isinstance(x, HostObject):
        return frame[x.k]
    if isinstance(x, tuple):
        return tuple(_resolve(i, frame) for i in x)
    if isinstance(x, list):
        return [_resolve(i, frame) for i in x]
    if isinstance(x, dict):
        return {k: _resolve(v, frame) for k, v in x.items()}
    return x


_NOTHING = np.zeros((), np.float64)


def make_getter(frame, k, fn, args, kwargs, kind, where):
    """The getter of action ``k``: makes the call, keeps its result for later actions,
    and returns what the graph input receives."""
    def host_call():
        f = fn
        if isinstance(fn, HostMethod):
            f = getattr(frame[fn.obj.k], fn.name)
        value = f(*_resolve(args, frame), **_resolve(kwargs, frame))
        frame[k] = value
        if kind == "array":
            return np.asarray(value)
        return _NOTHING
    host_call.__tlaloc_host_call__ = where
    host_call.__tlaloc_call_time__ = True
    return host_call


def raiser(exc):
    """A getter that raises ``exc`` (a fresh copy each call) when the function is called."""
    def raise_at_call_time():
        if isinstance(exc, type):
            raise exc()
        fresh = type(exc)(*exc.args)
        raise fresh
    raise_at_call_time.__tlaloc_call_time__ = True
    return raise_at_call_time


def attribute_setter(obj, attr, value, op=None):
    """A getter that makes ``obj.attr = value`` (or ``obj.attr op= value``) when the function is called."""
    import operator
    ops = {"Add": operator.add, "Sub": operator.sub, "Mult": operator.mul, "Div": operator.truediv}

    def set_at_call_time():
        new = value if op is None else ops[op.__name__](getattr(obj, attr), value)
        setattr(obj, attr, new)
        return _NOTHING
    set_at_call_time.__tlaloc_call_time__ = True
    return set_at_call_time


def mutation(method, args, kwargs):
    """A getter that calls ``method(*args, **kwargs)`` (``log.append(3)``) when the function is called."""
    def mutate_at_call_time():
        method(*args, **kwargs)
        return _NOTHING
    mutate_at_call_time.__tlaloc_call_time__ = True
    return mutate_at_call_time


class Guard:
    """True while the global/closure value read when the function was lowered is unchanged."""

    __slots__ = ("getter", "value", "snapshot", "name")

    def __init__(self, getter, value, name):
        self.getter, self.value, self.name = getter, value, name
        self.snapshot = _snapshot(value)

    def __call__(self) -> bool:
        try:
            now = self.getter()
        except Exception:
            return False
        return _snapshot(now) == self.snapshot


class IdentityGuard:
    """True while a global, closure variable or object attribute read when the function was
    lowered is still the same object: a helper function, a class or an object whose own
    attributes are read in turn (regression: rebinding a helper ``def`` or an object that the
    function reads, after the first call, left every later call on the first one)."""

    __slots__ = ("getter", "value", "name")

    def __init__(self, getter, value, name):
        self.getter, self.value, self.name = getter, value, name

    def __call__(self) -> bool:
        try:
            now = self.getter()
        except Exception:
            return False
        if now is self.value:
            return True
        if isinstance(now, types.MethodType) and isinstance(self.value, types.MethodType):
            return now.__func__ is self.value.__func__ and now.__self__ is self.value.__self__
        return False


class TypeGuard:
    """True while an object's attribute (``self.config``) holds an object of the same class as when the
    function was lowered: its own attributes are read through the path at each call, and its methods
    were inlined for that class."""

    __slots__ = ("getter", "value", "name", "cls")

    def __init__(self, getter, value, name):
        self.getter, self.value, self.name, self.cls = getter, value, name, type(value)

    def __call__(self) -> bool:
        try:
            return type(self.getter()) is self.cls
        except Exception:
            return False


def identity_guarded(value) -> bool:
    """Values whose identity is guarded (``IdentityGuard``) where a global, a closure variable or an
    object's attribute holds them: anything but a module or an array (a data value has a ``Guard``).
    A name rebound to another function (``act = np.sin`` after ``np.tanh``) is then seen."""
    return not isinstance(value, (types.ModuleType, np.ndarray))


class ContainerGuard:
    """True while a list/tuple/dict that holds arrays (read at each call, leaf by leaf) keeps its
    structure and its other items: the numbers and strings beside the arrays are folded as
    constants (regression: `CFG = {"k": 2.0, "w": np.ones(2)}` then `CFG["k"] = 3.0` was not
    seen, while a dict of numbers only was)."""

    __slots__ = ("getter", "value", "name", "tree", "others")

    def __init__(self, getter, value, name):
        from .. import _pytree
        leaves, self.tree = _pytree.flatten(value)
        self.getter, self.value, self.name = getter, value, name
        self.others = [(_snapshot(x), x) for x in leaves if not isinstance(x, np.ndarray)]

    def __call__(self) -> bool:
        from .. import _pytree
        try:
            leaves, tree = _pytree.flatten(self.getter())
        except Exception:
            return False
        if tree != self.tree:
            return False
        others = [x for x in leaves if not isinstance(x, np.ndarray)]
        if len(others) != len(self.others):
            return False
        return all((snap is _UNCHECKED and x is old) or (snap is not _UNCHECKED and _snapshot(x) == snap)
                   for (snap, old), x in zip(self.others, others))


class ShapeGuard:
    """True while a closure array has the shape and dtype it had when the function was lowered."""

    __slots__ = ("getter", "shape", "dtype", "name", "value")

    def __init__(self, getter, array, name):
        self.getter, self.shape, self.dtype, self.name = getter, array.shape, array.dtype, name
        self.value = None

    def __call__(self) -> bool:
        try:
            now = self.getter()
        except Exception:
            return False
        return getattr(now, "shape", None) == self.shape and getattr(now, "dtype", None) == self.dtype


_UNCHECKED = object()
_SCALARS = (int, float, complex, bool, str, bytes, type(None), np.generic)


def _snapshot(v, depth=0):
    """A comparable copy of a plain Python data value; ``_UNCHECKED`` for anything else."""
    if isinstance(v, _SCALARS):
        return (type(v), v)
    if depth < 3 and isinstance(v, (tuple, list)):
        items = [_snapshot(i, depth + 1) for i in v]
        return _UNCHECKED if any(i is _UNCHECKED for i in items) else (type(v), tuple(items))
    if depth < 3 and isinstance(v, dict):
        items = [(k, _snapshot(i, depth + 1)) for k, i in v.items()]
        return _UNCHECKED if any(i is _UNCHECKED for _, i in items) else (dict, tuple(items))
    return _UNCHECKED


def wants_guard(value) -> bool:
    """Data values folded as constants are guarded (numbers, strings, lists/dicts of them)."""
    return _snapshot(value) is not _UNCHECKED
