"""What ``jit`` compiles: the DXIR graph of a function (or of a transformed
function), with how to read its closure arrays and rebuild its outputs.

Static arguments are bound while the function is lowered: the front end
skips a parameter whose tree is ``None`` (``lower_function``'s convention
for ``static_argnums``), and name resolution finds the value in an overlay on
the function's globals, so ``range(n)``, ``x.reshape(shape)`` or ``if mode ==
"sum"`` see plain Python values.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from typing import Callable

import numpy as np

from .. import _pytree
from .._core.graph import Graph
from ..errors import ArgumentError, FenceError

_LEAF = _pytree.TreeDef("leaf")


@dataclasses.dataclass
class Source:
    """A graph to compile. Inputs: argument leaves, then ``closure_getters()`` values."""
    graph: Graph
    closure_getters: list
    finish: Callable          # (args, trees, flat outputs) -> the function's result
    check: Callable           # (args, trees, leaves) -> None or raise
    out_tree: object = None   # the result's structure where known (for out_shardings)
    guards: tuple = ()        # folded globals/closure values: true while unchanged (frontend/host.py)


def _guards(lowered) -> tuple:
    return tuple(getattr(lowered, "guards", ()))


class _Globals(dict):
    """A function's globals with the static arguments laid over them (read-only view)."""

    def __init__(self, base: dict, statics: dict):
        super().__init__()
        self._base, self._statics = base, statics

    def __contains__(self, name):
        return name in self._statics or name in self._base

    def __getitem__(self, name):
        return self._statics[name] if name in self._statics else self._base[name]

    def get(self, name, default=None):
        return self[name] if name in self else default


def _with_statics(fn, statics: dict):
    if isinstance(fn, functools.partial):          # positions count after the partial's own arguments
        shift = len(fn.args)
        return functools.partial(_with_statics(fn.func, {k + shift: v for k, v in statics.items()}),
                                 *fn.args, **fn.keywords)
    code = fn.__code__
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]     # then keyword-only ones
    by_name = {names[k]: v for k, v in statics.items()}
    g = types.FunctionType(fn.__code__, _Globals(fn.__globals__, by_name), fn.__name__,
                           fn.__defaults__, fn.__closure__)
    g.__kwdefaults__ = fn.__kwdefaults__
    g.__qualname__ = fn.__qualname__
    g.__module__ = fn.__module__
    return g


def source_for(fun, trees, statics: dict, arg_avals=None) -> Source:
    """The graph of ``fun`` for arguments with pytree structures ``trees``
    (``None`` for a static argument, whose value is in ``statics``) and, for
    transforms whose graph depends on shapes (vmap, Jacobians), leaf avals
    ``arg_avals``."""
    own = getattr(fun, "__tlaloc_jit_source__", None)        # e.g. tl.vjp's vjp_fn
    if own is not None:
        if statics:
            raise ArgumentError(f"jit: static arguments of {getattr(fun, '__name__', fun)!r} are not supported")
        return own(list(trees), Source)
    t = getattr(fun, "__tlaloc_transformed__", None)
    if t is not None:
        if statics:
            return _static_transformed_source(t, trees, statics, arg_avals)
        from .transformed import transformed_source
        src = transformed_source(t, trees, arg_avals, Source)
        return src if src is not None else _transformed_source(t, trees, statics, arg_avals)
    from .._frontend.lower import lower_function
    if not hasattr(fun, "__code__") and not isinstance(fun, functools.partial):
        raise ArgumentError(f"jit: expected a Python function, got {type(fun).__name__}")
    target = _with_statics(fun, statics) if statics else fun
    lowered = lower_function(target, arg_trees=list(trees), arg_avals=arg_avals)
    # positional parameters, then keyword-only ones (_frontend/call_binding.py); any number with *args
    code = getattr(fun, "__code__", None)
    n_params = (None if code is None or code.co_flags & inspect.CO_VARARGS
                else code.co_argcount + code.co_kwonlyargcount)
    out_tree = lowered.out_tree

    if out_tree == _LEAF:
        def finish(args, trees, outs):
            return outs[0]
    else:
        rebuild = _pytree.unflattener(out_tree)

        def finish(args, trees, outs):
            return rebuild(outs)

    def check(args, trees, leaves):
        if n_params is not None and len(args) > n_params:
            raise ArgumentError(f"{fun.__name__}: takes {n_params} positional arguments, got {len(args)}")

    return Source(lowered.graph, list(lowered.closure_getters), finish, check, out_tree, _guards(lowered))


def _static_transformed_source(t, trees, statics, arg_avals=None) -> Source:
    """``tl.jit(tl.grad(f), static_argnums=...)``: the transform built with the static arguments'
    Python values (an int minibatch index in ``x[i*b:(i+1)*b]``), as its own eager build does
    once it needs them (``_frontend/specialise.py``); one program per static value, as in JAX.
    The graph keeps an unused input per static leaf, dropped here."""
    if getattr(t, "kind", None) not in ("grad", "value_and_grad"):
        raise ArgumentError(f"jit: static arguments (static_argnums/static_argnames, and every str argument: "
                            f"positions {sorted(statics)}) of `{t.name}` ({t.kind}) are not supported; close over "
                            f"the value instead, e.g. functools.partial (static arguments work with tl.grad and "
                            f"tl.value_and_grad)")
    from .._core import aval as _aval
    from .._frontend.specialise import StaticValue
    if any(a in statics for a in t.argnums):
        raise ArgumentError(f"jit: argument {sorted(set(t.argnums) & set(statics))} is differentiated "
                            f"(argnums) and cannot also be static")
    full = [_LEAF if tr is None else tr for tr in trees]
    dyn = iter(arg_avals) if arg_avals is not None else None
    avals, static_pos, k = [], [], 0
    for pos, tr in enumerate(trees):
        if tr is None:
            value = statics[pos]
            avals.append(StaticValue(value, _aval.of(np.asarray(value))))
            static_pos.append(k)
            k += 1
            continue
        for _ in range(tr.num_leaves):
            avals.append(next(dyn) if dyn is not None else _aval.UNKNOWN)
            k += 1
    entry = t._entry(full, avals)          # a ShapeNeeded here: jit retries with the leaves' shapes
    g = entry["graphs"][0][0]
    dropped = {g.inputs[i].id for i in static_pos}
    graph = Graph(tuple(v for v in g.inputs if v.id not in dropped), g.nodes, g.outputs, g.name)
    lowered = entry["lowered"]

    def finish(args, trees_, outs):
        return t.finish(args, full, list(outs), entry)

    def check(args, trees_, leaves):
        if len(args) != len(lowered.arg_trees):
            raise ArgumentError(f"{t.name}: takes {len(lowered.arg_trees)} positional arguments, got {len(args)}")

    as_lowered = entry.get("as_lowered")
    return Source(graph, list(lowered.closure_getters), finish, check, getattr(as_lowered, "out_tree", None),
                  _guards(lowered))


def _transformed_source(t, trees, statics, arg_avals=None) -> Source:
    if arg_avals is not None:
        from .._frontend.specialise import FinalAvals
        from .._frontend.structure import ShapeNeeded
        try:                       # the shapes are final here: code that needs an int's value is refused
            entry = t._entry(list(trees), FinalAvals(arg_avals))
        except ShapeNeeded as e:
            raise FenceError(f"{e}; under tl.jit, pass that integer argument in static_argnums "
                             f"(tl.jit(tl.grad(f), static_argnums=...)), which compiles one program per "
                             f"value") from None
    else:
        base = t._entries.get((None, None))
        # parameters with defaults left out, or keyword-only ones given (call_binding.py): built for them
        # (no base: f(*xs) is built once the count is known)
        other = base is None or len(trees) != base["n_args"]
        entry = t._entry(list(trees) if other or not all(tr == _LEAF for tr in trees) else None)
    graph = entry["graphs"][0][0]
    lowered = entry["lowered"]
    takes_entry = len(inspect.signature(t.check_args).parameters) >= 5

    def finish(args, trees, outs):
        return t.finish(args, trees, list(outs), entry)

    def check(args, trees, leaves):
        if len(args) != len(lowered.arg_trees):
            raise ArgumentError(f"{t.name}: takes {len(lowered.arg_trees)} positional arguments, got {len(args)}")
        n = sum(tr.num_leaves for tr in trees if tr is not None)
        flat = [x if hasattr(x, "dtype") else np.asarray(x) for x in leaves[:n]]
        if takes_entry:
            t.check_args(args, trees, flat, lowered, entry)
        else:
            t.check_args(args, trees, flat, lowered)

    as_lowered = entry.get("as_lowered")
    return Source(graph, list(lowered.closure_getters), finish, check, getattr(as_lowered, "out_tree", None),
                  _guards(lowered))
