"""The AST front end's entry point: a Python function's source → a DXIR graph.

``lower_function(fn, arg_trees, arg_avals)`` reads ``fn``'s source, makes one
graph input per argument leaf (and, while lowering, one per global or closure
array it reads), walks the body with a ``Lowerer`` (``lowerer.py``) and returns
a ``LoweredFunction``. Anything outside the supported language raises
``FenceError`` with ``file:line:col``, the construct, and what to write instead.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import inspect
from typing import Any, Callable

import numpy as np

from .. import _pytree
from .. import dtypes as _dt
from .._core.aval import UNKNOWN as _UNKNOWN
from .._core.builder import Builder
from .._core.graph import Graph
from ..errors import FenceError
from .local_transform import LocalCallable
from .lowerer import Context, Lowerer, Scope, _closure_dict, _is_generator, _python_defaults
from .source import FunctionSource, installed_package, read_source
from .specialise import FinalAvals, StaticValue
from .values import is_symbolic


def _numpy_function(F):
    """A Python function calling the NumPy function ``F`` (one argument per ufunc input)."""
    if getattr(F, "nin", 1) == 2:
        def numpy_function(x1, x2):
            return F(x1, x2)
    else:
        def numpy_function(x):
            return F(x)
    numpy_function.__name__ = numpy_function.__qualname__ = getattr(F, "__name__", "f")
    return numpy_function


# -- entry point -------------------------------------------------------------------------

@dataclasses.dataclass
class LoweredFunction:
    """A function lowered to DXIR.

    ``graph`` inputs are the leaves of the arguments (in ``arg_trees`` order),
    then one input per captured global/closure array (``closure_getters``).
    ``out_tree`` rebuilds the return value from ``graph.outputs``.
    """
    graph: Graph
    fn: Callable
    arg_names: list
    arg_trees: list                 # TreeDef per positional argument
    closure_getters: list
    out_tree: Any
    src: FunctionSource
    guards: tuple = ()              # host.Guard per global/closure value folded as a constant


def lower_function(fn, arg_trees=None, arg_avals=None, name=None) -> LoweredFunction:
    """Lower ``fn``'s source to DXIR.

    Args:
      fn: a Python function.
      arg_trees: per positional parameter, the pytree structure of the argument
        (``None``: every parameter is one array).
      arg_avals: optional list of AbstractValue per leaf (from annotations or examples).
    """
    from .. import typing as _typing  # noqa: F401  (installs the typed-tensor hooks)
    bound_self = None
    fn, partial_args, partial_keywords = _unwrap_partial(fn)
    local = isinstance(fn, LocalCallable)      # a nested def/lambda given to a transform (local_transform.py)
    if not local and not hasattr(fn, "__code__") and not inspect.ismethod(fn):
        from .calls import is_numpy_callable
        if is_numpy_callable(fn):         # tl.grad(np.sqrt): lowered as a call to it
            fn = _numpy_function(fn)
    if inspect.ismethod(fn):              # obj.method: `self` is a static object
        bound_self, fn = fn.__self__, fn.__func__
    src = fn.source(FunctionSource) if local else read_source(fn)
    fnode = src.node
    a = fnode.args
    params = [p.arg for p in a.posonlyargs + a.args]
    if bound_self is not None:
        self_name, params = params[0], params[1:]
    if len(partial_args) > len(params):
        raise src.error(fnode, f"functools.partial gives `{fn.__name__}` {len(partial_args)} positional arguments; "
                               f"it takes {len(params)}")
    bound_by_partial = dict(zip(params, partial_args))        # functools.partial(f, a, ...): f's first ones
    params = params[len(partial_args):]
    keyword_names = [p.arg for p in a.kwonlyargs]
    if a.vararg is None:
        # keyword-only parameters are passed after the positional ones (call_binding.py). As in
        # inspect.signature(functools.partial(f, b=3.0)), a parameter a partial gives by keyword,
        # and every one after it, can then only be given by keyword: it is keyword-only too
        first = next((i for i, p in enumerate(params) if p in partial_keywords), len(params))
        keyword_names = params[first:] + keyword_names
        params = params[:first]
    positional = len(params)
    if a.vararg is None:
        params += keyword_names
    root = Builder(name=name or fn.__name__)
    ctx = Context(root, [], {}, [fn.key if local else fn.__code__])
    ctx.specialisable = arg_avals is None or not isinstance(arg_avals, FinalAvals)
    ctx.specialised = arg_avals is not None and all(
        isinstance(a, StaticValue) or getattr(a, "is_concrete", False) for a in arg_avals)
    scope = fn.scope_for(ctx, Scope) if local else Scope(fn.__globals__, _closure_dict(fn))
    # partial(f, b=3.0): b's default is 3.0
    defaults = {**(fn.defaults if local else _python_defaults(fn)), **partial_keywords}
    count_unknown = arg_trees is None and a.vararg is not None    # f(x, *args) before its first call
    typed = contextlib.nullcontext()
    if arg_trees is None:               # built before any call: keyword-only parameters take their defaults,
        # and so do trailing parameters whose default is not a number or an array (a function, a
        # string, None, a bool flag): regression, `def loss(p, rhs=lotka_volterra)` made `rhs` an array
        # input and tl.grad(loss) failed where it was applied; a call that passes one builds again
        built = positional
        while built > 0 and params[built - 1] in defaults and _static_default(defaults[params[built - 1]]):
            built -= 1
        arg_trees = [_pytree.TreeDef("leaf") for _ in params[:built]]
    if not local and arg_avals is None and all(t is not None and t.kind == "leaf" for t in arg_trees):
        from . import typing_hooks
        if typing_hooks.avals_from_annotations is not None:
            arg_avals = typing_hooks.avals_from_annotations(fn, params[:len(arg_trees)])
            # typed code: float dtypes the annotations declare never mix (DESIGN: typed tensors
            # refuse a dtype mix at definition time); unannotated code promotes as NumPy does
            if arg_avals is not None and any(getattr(v, "dtype", None) is not None for v in arg_avals):
                typed = _dt.numpy_dtype_promotion("strict")
    env = {} if bound_self is None else {self_name: bound_self}
    env.update(bound_by_partial)
    leaf_index = 0
    extra = len(arg_trees) - len(params)
    star = [f"*{a.vararg.arg}{k}" for k in range(max(extra, 0))] if a.vararg else []    # env keys
    star_names = [f"{a.vararg.arg}_{k}" for k in range(len(star))]
    with root.active(), typed:
        for pname, tree in zip(params + star, arg_trees):
            if tree is None:          # a static argument (static_argnums): filled by the caller
                continue
            leaves = []
            for k in range(tree.num_leaves):
                aval = arg_avals[leaf_index] if arg_avals is not None else None
                base = star_names[star.index(pname)] if pname in star else pname
                hint = base if tree.kind == "leaf" else f"{base}_{k}"
                if isinstance(aval, StaticValue):      # its value is part of the signature
                    root.new_input(aval.aval, hint)
                    leaves.append(aval.value)
                else:
                    leaves.append(root.new_input(aval or _UNKNOWN, hint))
                leaf_index += 1
            env[pname] = _pytree.unflatten(tree, leaves)
        for pname in params[len(arg_trees):positional]:
            if pname not in defaults:
                raise src.error(fnode, f"parameter `{pname}` has no argument")
            env[pname] = defaults[pname]
        if a.vararg and not params and count_unknown:     # def f(*xs): built once the count is known
            from .structure import StructureNeeded
            raise src.error(fnode, f"`{fn.__name__}` takes only *{a.vararg.arg}: built at the first call",
                            StructureNeeded)
        if a.vararg:                      # f(x, *args): the arguments after the named ones
            env[a.vararg.arg] = tuple(env.pop(name) for name in star if name in env)
        if a.kwarg:
            env[a.kwarg.arg] = {}
        covered = set(params[:len(arg_trees)])        # given (static ones are read from the globals)
        for pname in keyword_names:
            if pname in env or pname in covered:
                continue
            if pname not in defaults:
                raise src.error(fnode, f"keyword-only parameter `{pname}` has no argument: pass it by keyword "
                                       f"(or give it a default)")
            env[pname] = defaults[pname]
        if not isinstance(fnode, ast.Lambda) and _is_generator(fnode):
            first = next(n for n in ast.walk(fnode) if isinstance(n, (ast.Yield, ast.YieldFrom)))
            raise src.error(first, f"`{fn.__name__}` is a generator (`yield`); a transformed function must "
                                   f"return arrays: collect the items in a list and return it")
        low = Lowerer(src, scope, ctx, root, env)
        if not local:
            _read_bound_values_at_call(low, fn, env, defaults, partial_keywords, bound_by_partial,
                                       params[len(arg_trees):])
        low.annotate_arguments(fnode, env)
        try:
            result = low.run_body(fnode)
        except FenceError as e:
            from .structure import StructureNeeded
            if count_unknown and not isinstance(e, StructureNeeded):     # built again with the real *args
                raise StructureNeeded(f"`{fn.__name__}` reads *{a.vararg.arg}: built at the first call") from e
            raise _library_function_refusal(e, fn, src) from e
        except Exception as e:
            raise _library_function_refusal(e, fn, src) from e
        out_leaves, out_tree = _pytree.flatten(result)
        for leaf in out_leaves:
            if not (is_symbolic(leaf) or isinstance(leaf, (int, float, bool, np.ndarray, np.generic))):
                raise src.error(fnode, f"`{fn.__name__}` returns a {type(leaf).__name__}; a transformed "
                                       f"function must return arrays (in tuples/lists/dicts)")
    graph = root.finish(out_leaves, name or fn.__name__)
    return LoweredFunction(graph, fn, params + star_names, list(arg_trees), [g for g, _, _ in ctx.closure_inputs],
                           out_tree, src, tuple(ctx.guards))


def _static_default(value) -> bool:
    """A default that is not data to differentiate: a callable, a string, None, a bool, a type."""
    return value is None or isinstance(value, (str, bool, type)) or callable(value) and not isinstance(value, np.ndarray)


def _read_bound_values_at_call(low, fn, env, defaults, partial_keywords, bound_by_partial, names):
    """Defaults (``def f(x, A=TABLE, k=2.0)``) and the values a ``functools.partial`` binds are read
    as globals are: arrays at each call, numbers and functions folded and guarded. NumPy code sees
    ``TABLE[:] = ...``, ``f.__defaults__ = ...`` or a change to an array a partial holds, made after
    the first call (regression: the first values were folded into every later call). A partial
    made inside an enclosing lowering binds that lowering's values: captured, as a nested
    function's are (``local_transform.capture_symbolic``)."""
    from .local_transform import capture_symbolic
    memo = {}
    for pname in list(bound_by_partial) + [n for n in names if n not in bound_by_partial]:
        if pname not in env:
            continue
        value = env[pname]
        by_partial = pname in bound_by_partial or pname in partial_keywords
        if not by_partial and (pname not in defaults or value is not defaults[pname]):
            continue
        if any(is_symbolic(x) for x in (_pytree.leaves(value) if isinstance(value, (list, tuple, dict)) else [value])):
            env[pname] = capture_symbolic(low.ctx, value, pname, memo)
            continue
        getter = (lambda v=value: v) if by_partial else (lambda name=pname: _python_defaults(fn)[name])
        env[pname] = low._external(value, ("bound", id(fn), pname), getter, pname)


def _unwrap_partial(fn):
    """``(function, positional arguments, keywords)`` of ``functools.partial(function, ...)``
    (nested partials merged, as calling them would); a plain function comes back with none."""
    args, keywords = (), {}
    while isinstance(fn, functools.partial):
        args, keywords = fn.args + args, {**fn.keywords, **keywords}
        fn = fn.func
    return fn, args, keywords


def _library_function_refusal(e, fn, src):
    """A transform applied to an installed package's own function (autograd's flatten_func
    wrapper, say) that fails while its source is read: refused where the user applied it."""
    from .structure import StaticMutation, StructureNeeded
    from ..errors import TlalocError
    package = installed_package(src.filename)
    if (package is None or isinstance(e, (StructureNeeded, StaticMutation))
            or (isinstance(e, TlalocError) and type(e) is not FenceError)):
        return e
    from .source import user_call_site
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))
    return FenceError(f"`{name}` comes from the installed package `{package}` and cannot be differentiated "
                      f"by reading its source ({type(e).__name__}: {e}); differentiate a function of your "
                      f"own that computes it with numpy/scipy, or wrap it with tl.custom_vjp",
                      *user_call_site())


def make_graph(fun) -> Graph:
    """The DXIR graph of ``fun``'s source (every parameter an array of unknown shape)."""
    return lower_function(fun).graph
