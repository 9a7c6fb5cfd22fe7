"""``Lowerer``: walks a function body and records DXIR, statement by statement.

The environment maps names to symbolic arrays (``Value``) or static Python
objects. Static computation is folded; array computation records DXIR nodes.
This module holds name resolution, the statement loop, jumps (``return``/
``break``/``continue`` become flags that guard the statements after them, see
``control.py``) and inline calls of user functions (``bind_arguments``); the
other statements and expressions are mixins: ``assign.py`` (assignments),
``control.py`` and ``loops.py`` (``if``/``for``/``while``), ``expr.py`` and
``callsites.py`` (expressions, calls), ``effects.py`` (call-time effects).
``lower.py`` is the entry point (``lower_function``).
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
from typing import Any, Optional

import numpy as np

from .. import _pytree
from .._core.builder import Builder
from ..errors import FenceError, ShapeError, TypeAnnotationError
from . import host
from .analysis import assigned_names
from .assign import AssignLowerer
from .callsites import CallLowerer
from .control import ControlLowerer
from .effects import EffectsLowerer
from .expr import ExprLowerer
from .loops import LoopLowerer
from .source import FunctionSource, installed_package, read_source
from .values import BROKE, CONT, RET, RETURNED, LocalFunction, StaleView, Undefined, is_symbolic
from .views import ViewLowerer

_MAX_INLINE_DEPTH = 64
_MAX_RECURSION = 8


@dataclasses.dataclass
class Scope:
    """Name resolution for one function: its globals, closure cells, enclosing env."""
    globals: dict
    closure: dict
    outer_env: Optional[dict] = None
    outer_scope: Optional["Scope"] = None


@dataclasses.dataclass
class Context:
    """State shared by every function lowered into one graph."""
    root: Builder
    closure_inputs: list            # [(getter, Value, description)]
    closure_keys: dict
    stack: list                     # functions being inlined (recursion guard)
    frame: Any = None               # host.Frame: results of call-time actions (host.py)
    guards: list = dataclasses.field(default_factory=list)   # host.Guard per folded global
    specialisable: bool = False     # a ShapeNeeded can still be met by a more specialised build
    outside_containers: list = dataclasses.field(default_factory=list)  # globals' lists/dicts (effects.py)
    specialised: bool = False       # built for concrete argument avals (closure arrays get theirs)
    may_share: dict = dataclasses.field(default_factory=dict)  # var id -> values it may share memory with (views.py)
    outside_arrays: list = dataclasses.field(default_factory=list)  # objects' arrays read by attribute (effects.py)
    local_objects: dict = dataclasses.field(default_factory=dict)   # id -> object made in the function (callsites.py)
    loop_ranges: dict = dataclasses.field(default_factory=dict)     # id(loop index) -> (index, its static range)
    read_sizes: bool = False        # the code read a size not known yet (len(x), x.shape): see inline_call
    object_paths: dict = dataclasses.field(default_factory=dict)    # id(object) -> (object, getter at call time)
    python_floats: set = dataclasses.field(default_factory=set)     # var ids of math.f(x) / float(x) results


class Lowerer(ExprLowerer, CallLowerer, AssignLowerer, ControlLowerer, LoopLowerer, EffectsLowerer, ViewLowerer):
    def __init__(self, src: FunctionSource, scope: Scope, ctx: Context, builder: Builder, env: dict,
                 in_loop: bool = False):
        self.src, self.scope, self.ctx, self.b, self.env = src, scope, ctx, builder, env
        self.in_loop = in_loop
        self.caller = None      # the Lowerer whose call this one inlines: it sees in-place writes into its arrays

    # -- names ------------------------------------------------------------------
    def lookup(self, name, node):
        if name in self.env:
            v = self.env[name]
            if isinstance(v, Undefined):
                if isinstance(v, StaleView):
                    self.refuse_stale(v, node)
                if v.where.startswith("del "):
                    raise self.src.error(node, f"`{name}` is read after `{v.where}`; remove the `del` "
                                               f"or assign `{name}` again first")
                raise self.src.error(node, f"`{name}` may be undefined here: it is assigned on only some "
                                           f"paths ({v.where}); assign it before the branch or loop")
            return v
        scope = self.scope
        while scope is not None:
            if scope.outer_env is not None and name in scope.outer_env:
                v = scope.outer_env[name]
                if isinstance(v, StaleView):
                    self.refuse_stale(v, node)
                if isinstance(v, Undefined):
                    raise self.src.error(node, f"`{name}` may be undefined here")
                return v
            if name in scope.closure:
                return self._external(scope.closure[name], ("closure", id(scope), name),
                                      _cell_getter(scope, name), name)
            if scope.outer_scope is None:
                break
            scope = scope.outer_scope
        if name in self.scope_root().globals:
            g = self.scope_root().globals
            return self._external(g[name], ("global", id(g), name), lambda: g[name], name)
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise self.src.error(node, f"name `{name}` is not defined")

    def refuse_stale(self, v, node):
        """Reading a name marked stale by an in-place write (``views.py``)."""
        if v.shape_dependent and self.ctx.specialisable:
            from .structure import ShapeNeeded
            raise self.src.error(node, v.message, ShapeNeeded)
        raise self.src.error(node, v.message)

    def scope_root(self) -> Scope:
        s = self.scope
        while s.outer_scope is not None:
            s = s.outer_scope
        return s

    def _external(self, value, key, getter, name):
        """A global or closure value: arrays become graph inputs read at call time;
        everything else is a static constant."""
        if getattr(getter, "__tlaloc_call_time__", False):
            return self._host_input(getter, getattr(getter, "__tlaloc_host_call__", None))
        leaves, tree = _pytree.flatten(value) if isinstance(value, (list, tuple, dict)) else ([value], None)
        if not any(isinstance(l, np.ndarray) for l in leaves):
            if key not in self.ctx.closure_keys and host.wants_guard(value):
                self.ctx.closure_keys[key] = value
                self.ctx.guards.append(host.Guard(getter, value, name))
            elif key not in self.ctx.closure_keys and host.identity_guarded(value):
                self.ctx.closure_keys[key] = value
                self.ctx.guards.append(host.IdentityGuard(getter, value, name))
            return self.outside(value)
        if key in self.ctx.closure_keys:
            return self.ctx.closure_keys[key]
        if tree is not None:              # its structure and its numbers are folded: guarded
            self.ctx.guards.append(host.ContainerGuard(getter, value, name))
        outs = []
        for k, leaf in enumerate(leaves):
            if isinstance(leaf, np.ndarray):
                from .._core import aval as _aval
                hint = name if tree is None else f"{name}_{k}"
                leaf_getter = getter if tree is None else (lambda g=getter, k=k: _pytree.leaves(g())[k])
                if self.ctx.specialised:
                    # a build for known argument shapes knows the closure's shapes too (rebuilt if they change)
                    v = self.ctx.root.new_input(_aval.of(leaf), hint)
                    self.ctx.guards.append(host.ShapeGuard(leaf_getter, leaf, name))
                else:
                    v = self.ctx.root.new_input(_aval.AbstractValue(leaf.dtype, None), hint)
                self.ctx.closure_inputs.append((leaf_getter, v, name))
                outs.append(v)
            else:
                outs.append(leaf)
        result = outs[0] if tree is None else _pytree.unflatten(tree, outs)
        self.ctx.closure_keys[key] = result
        return result

    # -- statements -------------------------------------------------------------------
    def block(self, stmts):
        """Lower ``stmts``; after a jump whose flag is symbolic, the rest is guarded."""
        for i, st in enumerate(stmts):
            if self.terminated():
                return
            guard = self.pending_guard()
            if guard is not None:
                rest = stmts[i:]
                self.lower_guard(guard, lambda: self.block(rest), assigned_names(rest), st)
                return
            self.stmt(st)

    def terminated(self) -> bool:
        return any(self.env.get(f) is True for f in (RETURNED, BROKE, CONT))

    def pending_guard(self):
        """``not (returned or broke or continued)`` when any flag is symbolic, else None."""
        from .. import numpy as tnp
        flags = [self.env.get(f, False) for f in (RETURNED, BROKE, CONT)]
        if not any(is_symbolic(f) for f in flags):
            return None
        acc = None
        for f in flags:
            if is_symbolic(f):
                acc = f if acc is None else tnp.logical_or(acc, f)
        return tnp.logical_not(acc)

    def stmt(self, node):
        method = getattr(self, f"stmt_{type(node).__name__}", None)
        if method is None:
            raise self.src.error(node, _refusal(node))
        with self.b.at(self.src.loc(node)):
            try:
                method(node)
            except ShapeError as e:
                if not self.ctx.specialisable:
                    raise
                from .expr import _unlocated
                from .structure import ShapeNeeded
                raise self.src.error(node, _unlocated(str(e)), ShapeNeeded) from None

    def stmt_Expr(self, node):
        if isinstance(node.value, ast.Constant):
            return                      # docstring or bare constant
        if self.ufunc_at(node.value):
            return                      # np.add.at(a, i, v): rebinds a
        if self.inplace_method(node.value) or self.fill_diagonal(node.value):
            return                      # b.sort(), np.fill_diagonal(a, v): rebind b, a
        self.expr(node.value)

    def stmt_Pass(self, node):
        pass

    def stmt_Return(self, node):
        value = None if node.value is None else self.expr(node.value)
        self.env[RET] = value
        self.env[RETURNED] = True
        if self.in_loop:
            self.env[BROKE] = True

    def stmt_Break(self, node):
        if not self.in_loop:
            raise self.src.error(node, "`break` outside a loop")
        self.env[BROKE] = True

    def stmt_Continue(self, node):
        if not self.in_loop:
            raise self.src.error(node, "`continue` outside a loop")
        self.env[CONT] = True

    def stmt_FunctionDef(self, node):
        if node.decorator_list:
            raise self.src.error(node, "decorators on a nested function are not supported; "
                                       "apply the transform to the outer function")
        self.env[node.name] = LocalFunction(node, self.src, self.env, self.scope, node.name)

    # -- calls to user functions: lowered inline ------------------------------------------------
    def inline_call(self, fn, args, kwargs, node):
        if isinstance(fn, LocalFunction):
            fnode, src, scope = fn.node, fn.src, Scope(fn.scope.globals, {}, fn.env, fn.scope)
            key = id(fn.node)
            defaults = self._defaults(fnode.args, fn)
        else:
            key = fn.__code__
            src = read_source(fn)
            fnode = src.node
            scope = Scope(fn.__globals__, _closure_dict(fn))
            defaults = _python_defaults(fn)
        if self.ctx.stack.count(key) >= _MAX_RECURSION:
            # recursion on Python structure (a list, then its items) unrolls; on array values it never ends.
            # Where the code read a size not known yet, its base case may test it (`if len(c) == 1`):
            # built again once the sizes are known
            from .structure import ShapeNeeded
            deferred = self.ctx.specialisable and self.ctx.read_sizes and not self.ctx.specialised
            raise self.src.error(node, f"recursive call to `{getattr(fnode, 'name', 'lambda')}` cannot be "
                                       f"lowered (deeper than {_MAX_RECURSION} calls); rewrite it as a loop",
                                 ShapeNeeded if deferred else FenceError)
        if len(self.ctx.stack) > _MAX_INLINE_DEPTH:
            raise self.src.error(node, "calls nested too deeply")
        env = bind_arguments(src, fnode, args, kwargs, defaults, node_for_errors=node, caller=self.src)
        from . import typing_hooks
        if typing_hooks.call_bound_violation is not None and not isinstance(fn, LocalFunction):
            msg = typing_hooks.call_bound_violation(fn, env)
            if msg is not None:
                raise self.src.error(node, msg, TypeAnnotationError)
        self.ctx.stack.append(key)
        try:
            callee = Lowerer(src, scope, self.ctx, self.b, env)
            callee.caller = self
            return callee.run_body(fnode)
        except Exception as e:
            raise self._library_refusal(e, fn, src, node) from e
        finally:
            self.ctx.stack.pop()

    def _library_refusal(self, e, fn, src, node):
        """A failure while reading an installed package's code (autograd's own utilities, say)
        is refused at the user's call into that package, naming the package and the reason."""
        from .structure import StaticMutation, StructureNeeded
        from ..errors import TlalocError
        package = installed_package(src.filename)
        if (package is None or installed_package(self.src.filename) is not None
                or isinstance(e, (StructureNeeded, StaticMutation))
                or (isinstance(e, TlalocError) and type(e) is not FenceError)):
            return e
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))
        return self.src.error(node, f"`{name}` from the installed package `{package}` cannot be "
                                    f"differentiated by reading its source ({type(e).__name__}: {e}); "
                                    f"compute it with numpy/scipy in your own code, or wrap the call "
                                    f"with tl.custom_vjp")

    def _defaults(self, args_node, fn):
        return {a.arg: self.expr(d) for a, d in zip(args_node.args[len(args_node.args) - len(args_node.defaults):],
                                                    args_node.defaults)}

    def run_body(self, fnode):
        """Lower a function body; returns its return value."""
        if isinstance(fnode, ast.Lambda):
            return self.expr(fnode.body)
        self.env.setdefault(RETURNED, False)
        generator = _is_generator(fnode)
        if generator:                   # a generator: run to the end, its items in a list (in order)
            self.yields = []
        self.block(fnode.body)
        if generator:
            return iter(self.yields)
        if self.env.get(RETURNED) is False:
            return None
        return self.env.get(RET)

    def expr_Yield(self, node):
        if getattr(self, "yields", None) is None:
            raise self.src.error(node, "`yield` outside a generator")
        if self.b is not self.ctx.root:
            from .structure import StaticMutation
            raise self.src.error(node, "`yield` inside an `if` or loop on an array value; build a list "
                                       "before the branch", StaticMutation)
        self.yields.append(None if node.value is None else self.expr(node.value))
        return None

    def call_transformed(self, transformed, args, kwargs, node):
        return transformed.lower_call(self, args, kwargs, node)


def _is_generator(fnode) -> bool:
    """``fnode``'s own body (not a nested def or lambda) contains ``yield``."""
    todo = list(fnode.body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(n))
    return False


class ClosureCells(dict):
    """A function's closure, name -> cell, read through the cell each time: a getter made from it
    sees a later ``nonlocal`` rebinding (regression: a snapshot of the values kept the value of
    the first build, and a rebound closure variable was silently ignored). An empty cell (a
    name assigned later in the enclosing function) is not in it."""

    def __getitem__(self, name):
        return dict.__getitem__(self, name).cell_contents

    def __contains__(self, name):
        try:
            self[name]
        except (KeyError, ValueError):
            return False
        return True

    def snapshot(self) -> dict:
        """The names' values now."""
        return {name: self[name] for name in dict.keys(self) if name in self}


def _closure_dict(fn) -> dict:
    if not fn.__closure__:
        return {}
    return ClosureCells(zip(fn.__code__.co_freevars, fn.__closure__))


def _cell_getter(scope, name):
    return lambda: scope.closure[name]


def _python_defaults(fn) -> dict:
    code = fn.__code__
    names = code.co_varnames[:code.co_argcount]
    defaults = fn.__defaults__ or ()
    out = dict(zip(names[len(names) - len(defaults):], defaults))
    out.update(fn.__kwdefaults__ or {})
    return out


def bind_arguments(src, fnode, args, kwargs, defaults, node_for_errors=None, caller=None):
    a = fnode.args
    names = [p.arg for p in a.posonlyargs + a.args]
    env = {}
    if a.vararg:
        env[a.vararg.arg] = tuple(args[len(names):])
        args = args[:len(names)]
    if a.kwarg:
        known = set(names) | {p.arg for p in a.kwonlyargs}
        env[a.kwarg.arg] = {k: v for k, v in kwargs.items() if k not in known}
        kwargs = {k: v for k, v in kwargs.items() if k in known}
    if len(args) > len(names):
        raise (caller or src).error(node_for_errors or fnode,
                                    f"too many arguments: {len(args)} given, {len(names)} expected")
    for n, v in zip(names, args):
        env[n] = v
    for k, v in kwargs.items():
        if k in env or k not in names and k not in {p.arg for p in a.kwonlyargs}:
            if k not in env:
                raise (caller or src).error(node_for_errors or fnode, f"unexpected keyword argument `{k}`")
            raise (caller or src).error(node_for_errors or fnode, f"argument `{k}` given twice")
        env[k] = v
    for n in names + [p.arg for p in a.kwonlyargs]:
        if n not in env:
            if n in defaults:
                env[n] = defaults[n]
            else:
                raise (caller or src).error(node_for_errors or fnode, f"missing argument `{n}`")
    return env


def _refusal(node) -> str:
    hints = {
        "With": "`with` blocks are not supported; move the context manager outside the function",
        "Try": "`try`/`except` is not supported; validate inputs outside the differentiated function",
        "Global": "`global` is not supported; pass the value as an argument",
        "Nonlocal": "`nonlocal` is not supported; return the value instead",
        "Delete": "`del` is supported only on a plain name outside branches and loops; "
                  "just stop using the name",
        "ClassDef": "defining a class inside a differentiated function is not supported; define it outside",
        "Import": "`import` inside a differentiated function is not supported; import at module level",
        "ImportFrom": "`import` inside a differentiated function is not supported; import at module level",
        "AsyncFor": "`async for` is not supported",
        "AsyncWith": "`async with` is not supported",
        "Match": "`match` is not supported; use if/elif",
        "TryStar": "`try`/`except*` is not supported",
    }
    name = type(node).__name__
    return hints.get(name, f"the statement `{name}` is not supported in a differentiated function")
