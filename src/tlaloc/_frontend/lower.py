"""The AST front end: a Python function's source → a DXIR graph, at definition time.

The function body is walked statement by statement with an environment that
maps names to symbolic arrays (``Value``) or static Python objects. Static
computation is folded; array computation records DXIR nodes. ``if``/``for``/
``while`` on array values become ``cond``/``for_range``/``while_loop`` nodes;
``return``/``break``/``continue`` become flags that guard the statements after
them (see ``control.py``). Calls to other user functions are lowered inline.

Anything outside the supported language raises ``FenceError`` with
``file:line:col``, the construct, and what to write instead.
"""
from __future__ import annotations

import ast
import inspect
import builtins
import dataclasses
from typing import Any, Callable, Optional

import numpy as np

from .. import _pytree
from .._core.builder import Builder, Value
from .._core.graph import Graph, Var
from ..errors import FenceError, ShapeError, TypeAnnotationError
from .control import ControlLowerer
from .effects import EffectsLowerer
from .expr import ExprLowerer, binop
from .analysis import assigned_names
from .source import FunctionSource, installed_package, read_source
from . import host
from .specialise import FinalAvals, StaticValue
from .._core.aval import UNKNOWN as _UNKNOWN
from .values import (BROKE, CONT, RET, RETURNED, LocalFunction, Undefined, is_symbolic)

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


class Lowerer(ExprLowerer, ControlLowerer, EffectsLowerer):
    def __init__(self, src: FunctionSource, scope: Scope, ctx: Context, builder: Builder, env: dict,
                 in_loop: bool = False):
        self.src, self.scope, self.ctx, self.b, self.env = src, scope, ctx, builder, env
        self.in_loop = in_loop

    # -- names ------------------------------------------------------------------
    def lookup(self, name, node):
        if name in self.env:
            v = self.env[name]
            if isinstance(v, Undefined):
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
            return self.outside(value)
        if key in self.ctx.closure_keys:
            return self.ctx.closure_keys[key]
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
        self.expr(node.value)

    def stmt_Pass(self, node):
        pass

    def stmt_Delete(self, node):
        """``del name`` in the straight-line part of the body unbinds the name (rendered
        derivatives free their temporaries this way, and stay differentiable source).
        Inside a branch or loop, or on an element or attribute, it is refused."""
        if self.b is not self.ctx.root or self.in_loop or not all(isinstance(t, ast.Name) for t in node.targets):
            raise self.src.error(node, _refusal(node))
        for t in node.targets:
            if isinstance(self.env.get(t.id, Undefined(t.id, "")), Undefined):
                raise self.src.error(t, f"`del {t.id}`: `{t.id}` is not a local name assigned before this line")
            self.env[t.id] = Undefined(t.id, f"del {t.id}` at line {node.lineno}")

    def stmt_Assign(self, node):
        value = self.expr(node.value)
        for t in node.targets:
            self.assign(t, value)

    def stmt_AnnAssign(self, node):
        if node.value is None:
            return
        value = self.expr(node.value)
        self.check_annotation(node.annotation, value, node)
        self.assign(node.target, value)

    def check_annotation(self, annotation, value, node):
        """Typed-tensor annotations on assignments (checked by the typing layer): a
        constant size over a bounded axis's bound (``x: F32["seq<=512"] = ...``) is refused here."""
        from . import typing_hooks
        if typing_hooks.bound_violation is None:
            return
        try:
            ann = eval(compile(ast.Expression(annotation), self.src.filename, "eval"),
                       self.scope.globals, dict(self.scope.closure))
        except Exception:
            return                      # not a value we can read statically: nothing to check
        msg = typing_hooks.bound_violation(ann, value, f"`{ast.unparse(node.target)}`")
        if msg is not None:
            raise self.src.error(node.value, msg, TypeAnnotationError)

    def annotate_arguments(self, fnode, env):
        """Typed-tensor annotations on parameters (checked by the typing layer)."""

    def stmt_AugAssign(self, node):
        t = node.target
        if isinstance(t, ast.Name):
            cur = self.lookup(t.id, t)
            new = binop(type(node.op), cur, self.expr(node.value))
            if is_symbolic(cur):
                self._augassign_aliases(t, cur, new)
            self.env[t.id] = new
        elif isinstance(t, ast.Subscript):
            base = self.expr(t.value)
            idx = self.index(t.slice)
            v = self.expr(node.value)
            if isinstance(base, (list, dict)) and not is_symbolic(idx):      # counts[k] += 1
                new = binop(type(node.op), base[idx], v)
                if not self.is_outside(base):
                    base[idx] = new
                else:
                    op = type(node.op)
                    def update(base=base, idx=idx, op=op, v=v):
                        base[idx] = binop(op, base[idx], v)
                    update.__self__ = base
                    self.external_mutation(update, [], {}, node)
                return
            if isinstance(node.op, ast.Add) and _scalar_index(idx):
                # one element or a slice: NumPy's read-add-write is an add in place
                from .._prims.indexing import index_add
                new = index_add(base, idx, v)
            else:
                # an index array: NumPy reads all, adds, then writes (with a repeated
                # index the last write wins); np.add.at accumulates instead
                from .._prims.indexing import index_set
                from .. import numpy as tnp
                new = index_set(base, idx, binop(type(node.op), tnp._getitem(base, idx), v))
            self._store_subscript_base(t.value, new)
        elif isinstance(t, ast.Attribute):
            self._attribute_effect(t, self.expr(node.value), node, type(node.op))
        else:
            raise self.src.error(node, f"augmented assignment to {type(t).__name__} is not supported; "
                                       f"assign to a name or a subscript")

    def assign(self, target, value):
        if isinstance(target, ast.Name):
            if is_symbolic(value) and value.var.hint is None:
                value.var.hint = target.id
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = self._unpack(value, len(target.elts), target)
            for t, v in zip(target.elts, items):
                self.assign(t, v)
        elif isinstance(target, ast.Subscript):
            from .._prims.indexing import index_set
            base = self.expr(target.value)
            new = index_set(base, self.index(target.slice), value)
            self._store_subscript_base(target.value, new)
        elif isinstance(target, ast.Attribute):
            self._attribute_effect(target, value, target)
        elif isinstance(target, ast.Starred):
            raise self.src.error(target, "starred assignment targets are not supported; unpack explicitly")
        else:
            raise self.src.error(target, f"assignment to {type(target).__name__} is not supported inside a "
                                         f"differentiated function (objects are immutable here); build a "
                                         f"new value instead, e.g. dataclasses.replace")

    def _store_subscript_base(self, base_node, new):
        """``a[i] = v`` rebinds ``a`` (functional update); ``a[i][j] = v`` nests.

        NumPy semantics are kept for aliases: every other name bound to the same
        array is rebound too. Writing into a *view* of another live array
        (``row = A[0]; row[1] = v``) is refused rather than silently diverging."""
        if isinstance(base_node, ast.Name):
            old = self.env.get(base_node.id)
            if is_symbolic(old):
                self._refuse_view_write(base_node, old)
                for name, val in list(self.env.items()):
                    if val is old and name != base_node.id:
                        self.env[name] = new
            self.env[base_node.id] = new
            if is_symbolic(new) and new.var.hint is None:
                new.var.hint = base_node.id
        elif isinstance(base_node, ast.Subscript):
            from .._prims.indexing import index_set
            outer = self.expr(base_node.value)
            self._store_subscript_base(base_node.value, index_set(outer, self.index(base_node.slice), new))
        else:
            raise self.src.error(base_node, "subscript assignment needs a name on the left, e.g. `a[i] = v`")

    def _augassign_aliases(self, target, cur, new):
        """``b += v`` on a NumPy array writes in place: names bound to the same array see
        it, and a view writes through to its base. We rebind aliases of an array of
        known rank >= 1; where NumPy's answer depends on what we cannot see (the rank,
        or a view's base), we refuse rather than guess."""
        aliases = [n for n, v in self.env.items() if v is cur and n != target.id]
        self._refuse_view_write(target, cur)
        if not aliases:
            return
        rank = cur.aval.rank
        if rank is None or rank == 0:
            raise self.src.error(target, f"`{target.id}` and `{aliases[0]}` name the same value; whether "
                                         f"`{target.id} {'+='} ...` changes `{aliases[0]}` depends on its rank in "
                                         f"NumPy. Write `{target.id} = {target.id} + ...` for a new array, or "
                                         f"annotate the rank")
        for n in aliases:
            self.env[n] = new

    _VIEW_PRIMS = ("getitem", "reshape", "transpose", "swapaxes", "expand_dims", "squeeze", "broadcast_to")

    def _refuse_view_write(self, node, value):
        producer = self.b.producer(value)
        if producer is None or producer.prim.name not in self._VIEW_PRIMS:
            return
        if producer.prim.name == "getitem" and any(
                e[0] == "d" and not (isinstance(producer.inputs[1 + e[1]], Var)
                                     and producer.inputs[1 + e[1]].aval.shape == ())
                for e in producer.params["spec"]):
            return                       # advanced indexing copies in NumPy
        src = producer.inputs[0]
        for name, val in self.env.items():
            if is_symbolic(val) and val.var is src:
                raise self.src.error(node, f"`{node.id}` is a view of `{name}` (NumPy would write through to "
                                           f"`{name}`); write into `{name}` directly, or copy first with "
                                           f"`{node.id} = {node.id}.copy()`")

    def _unpack(self, value, n, node):
        if is_symbolic(value):
            shape = value.aval.shape
            if shape is None or not shape or type(shape[0]) is not int:
                from .structure import ShapeNeeded
                raise self.src.error(node, f"unpacking a value of unknown length into {n} names (if this "
                                           f"argument is a tuple, its structure is read at the first call; "
                                           f"for an array, its shape)", ShapeNeeded)
            if shape[0] != n:
                raise self.src.error(node, f"cannot unpack an array of length {shape[0]} into {n} names")
            from .. import numpy as tnp
            return [tnp._getitem(value, k) for k in range(n)]
        try:
            items = list(value)
        except TypeError:
            raise self.src.error(node, f"cannot unpack {type(value).__name__}") from None
        if len(items) != n:
            raise self.src.error(node, f"cannot unpack {len(items)} values into {n} names")
        return items

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
            # recursion on Python structure (a list, then its items) unrolls; on array values it never ends
            raise self.src.error(node, f"recursive call to `{getattr(fnode, 'name', 'lambda')}` cannot be "
                                       f"lowered (deeper than {_MAX_RECURSION} calls); rewrite it as a loop")
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


def _scalar_index(idx) -> bool:
    """True when no part of a subscript can be an index array (ints, slices, None,
    ..., and symbolic values known to be 0-d)."""
    parts = idx if isinstance(idx, tuple) else (idx,)
    for p in parts:
        if p is None or p is Ellipsis or isinstance(p, (int, np.integer, slice)):
            continue
        if is_symbolic(p) and p.aval.shape == ():
            continue
        return False
    return True


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


def _closure_dict(fn) -> dict:
    if not fn.__closure__:
        return {}
    out = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            pass
    return out


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
