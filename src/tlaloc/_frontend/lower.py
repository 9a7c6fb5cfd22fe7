"""The AST front end's entry point: a Python function's source → a DXIR graph.

``lower_function(fn, arg_trees, arg_avals)`` reads ``fn``'s source, makes one
graph input per argument leaf (and, while lowering, one per global or closure
array it reads), walks the body with a ``Lowerer`` (``lowerer.py``) and returns
a ``LoweredFunction``. Anything outside the supported language raises
``FenceError`` with ``file:line:col``, the construct, and what to write instead.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
from typing import Any, Callable

import numpy as np

from .. import _pytree
from .._core.aval import UNKNOWN as _UNKNOWN
from .._core.builder import Builder
from .._core.graph import Graph
from ..errors import FenceError
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
    if not hasattr(fn, "__code__") and not inspect.ismethod(fn):
        from .calls import is_numpy_callable
        if is_numpy_callable(fn):         # tl.grad(np.sqrt): lowered as a call to it
            fn = _numpy_function(fn)
    if inspect.ismethod(fn):              # obj.method: `self` is a static object
        bound_self, fn = fn.__self__, fn.__func__
    src = read_source(fn)
    fnode = src.node
    a = fnode.args
    params = [p.arg for p in a.posonlyargs + a.args]
    if bound_self is not None:
        self_name, params = params[0], params[1:]
    root = Builder(name=name or fn.__name__)
    ctx = Context(root, [], {}, [fn.__code__])
    ctx.specialisable = arg_avals is None or not isinstance(arg_avals, FinalAvals)
    ctx.specialised = arg_avals is not None and all(
        isinstance(a, StaticValue) or getattr(a, "is_concrete", False) for a in arg_avals)
    scope = Scope(fn.__globals__, _closure_dict(fn))
    defaults = _python_defaults(fn)
    count_unknown = arg_trees is None and a.vararg is not None    # f(x, *args) before its first call
    if arg_trees is None:
        arg_trees = [_pytree.TreeDef("leaf") for _ in params]
    if arg_avals is None and all(t is not None and t.kind == "leaf" for t in arg_trees):
        from . import typing_hooks
        if typing_hooks.avals_from_annotations is not None:
            arg_avals = typing_hooks.avals_from_annotations(fn, params[:len(arg_trees)])
    env = {} if bound_self is None else {self_name: bound_self}
    leaf_index = 0
    extra = len(arg_trees) - len(params)
    star = [f"*{a.vararg.arg}{k}" for k in range(max(extra, 0))] if a.vararg else []    # env keys
    star_names = [f"{a.vararg.arg}_{k}" for k in range(len(star))]
    with root.active():
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
        for pname in params[len(arg_trees):]:
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
        for p in a.kwonlyargs:
            if p.arg not in (fn.__kwdefaults__ or {}):
                raise src.error(fnode, f"keyword-only parameter `{p.arg}` needs a default")
            env[p.arg] = fn.__kwdefaults__[p.arg]
        if not isinstance(fnode, ast.Lambda) and _is_generator(fnode):
            first = next(n for n in ast.walk(fnode) if isinstance(n, (ast.Yield, ast.YieldFrom)))
            raise src.error(first, f"`{fn.__name__}` is a generator (`yield`); a transformed function must "
                                   f"return arrays: collect the items in a list and return it")
        low = Lowerer(src, scope, ctx, root, env)
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
