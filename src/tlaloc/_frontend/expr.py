"""Lowering Python expressions: evaluate statically where possible, record DXIR
nodes where a symbolic array is involved."""
from __future__ import annotations

import ast
import builtins
import functools
import operator
import types

import numpy as np

from .. import numpy as tnp
from .._core.builder import Value
from ..errors import FenceError, ShapeError, TlalocError
from . import call_time, calls, host, odeint
from .structure import ShapeNeeded
from .values import LocalFunction, SymbolicRange, Undefined, is_symbolic, maybe_int

_BINOPS = {
    ast.Add: (operator.add, tnp.add), ast.Sub: (operator.sub, tnp.subtract),
    ast.Mult: (operator.mul, tnp.multiply), ast.Div: (operator.truediv, tnp.divide),
    ast.Pow: (operator.pow, tnp.power), ast.MatMult: (operator.matmul, tnp.matmul),
    ast.FloorDiv: (operator.floordiv, tnp.floor_divide), ast.Mod: (operator.mod, tnp.remainder),
}
_CMPOPS = {
    ast.Lt: (operator.lt, tnp.less), ast.LtE: (operator.le, tnp.less_equal),
    ast.Gt: (operator.gt, tnp.greater), ast.GtE: (operator.ge, tnp.greater_equal),
    ast.Eq: (operator.eq, tnp.equal), ast.NotEq: (operator.ne, tnp.not_equal),
}
_REFUSED = {
    ast.Await: "await", ast.YieldFrom: "yield from",
    ast.SetComp: "a set comprehension",
    ast.Set: "a set literal", ast.NamedExpr: "an assignment expression (:=)",
}


def binop(op_type, a, b):
    static_op, sym_op = _BINOPS[op_type]
    if not is_symbolic(a) and not is_symbolic(b):
        return static_op(a, b)
    if op_type is ast.Pow and is_symbolic(a) and isinstance(b, int) and not isinstance(b, bool):
        from .._prims.elementwise import integer_pow
        return integer_pow(a, b)
    return sym_op(a, b)


class ExprLowerer:
    """Mixin: ``self.expr(node)`` evaluates an expression node."""

    def expr(self, node):
        method = getattr(self, f"expr_{type(node).__name__}", None)
        if method is None:
            what = _REFUSED.get(type(node), type(node).__name__)
            raise self.src.error(node, f"{what} is not supported in a differentiated function")
        with self.b.at(self.src.loc(node)):
            try:
                return method(node)
            except ShapeError as e:
                if not self.ctx.specialisable:
                    raise
                # the rank or a size is not known yet: built again at the first call for the shapes
                raise self.src.error(node, _unlocated(str(e)), ShapeNeeded) from None

    # -- atoms ----------------------------------------------------------------
    def expr_Constant(self, node):
        return node.value

    def expr_Name(self, node):
        return self.lookup(node.id, node)

    def expr_Tuple(self, node):
        return tuple(self._elts(node.elts))

    def expr_List(self, node):
        return list(self._elts(node.elts))

    def _elts(self, elts):
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                out.extend(self._iterate_static(self.expr(e.value), e))
            else:
                out.append(self.expr(e))
        return out

    def expr_Dict(self, node):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                out.update(self.expr(v))
            else:
                key = self.expr(k)
                if is_symbolic(key):
                    raise self.src.error(k, "a dict key must be a static Python value, not an array")
                out[key] = self.expr(v)
        return out

    def expr_JoinedStr(self, node):
        parts = [self.expr(v) for v in node.values]
        if any(is_symbolic(p) for p in parts):
            raise self.src.error(node, "an f-string cannot format an array inside a differentiated "
                                       "function; format the result outside it")
        return "".join(str(p) for p in parts)

    def expr_FormattedValue(self, node):
        v = self.expr(node.value)
        if is_symbolic(v):
            raise self.src.error(node, "an f-string cannot format an array inside a differentiated function")
        return format(v, self.expr(node.format_spec) if node.format_spec else "")

    # -- operators ----------------------------------------------------------------
    def expr_BinOp(self, node):
        a, b = self.expr(node.left), self.expr(node.right)
        try:
            return binop(type(node.op), a, b)
        except KeyError:
            raise self.src.error(node, f"the operator {type(node.op).__name__} is not supported on arrays; "
                                       f"use + - * / ** @ // %") from None

    def expr_UnaryOp(self, node):
        v = self.expr(node.operand)
        op = type(node.op)
        if not is_symbolic(v):
            return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                    ast.Invert: operator.invert}[op](v)
        if op is ast.USub:
            return tnp.negative(v)
        if op is ast.UAdd:
            return v
        return tnp.logical_not(v)

    def expr_Compare(self, node):
        left = self.expr(node.left)
        result = None
        for op, comp in zip(node.ops, node.comparators):
            right = self.expr(comp)
            if type(op) in (ast.Is, ast.IsNot) and (is_symbolic(left) or is_symbolic(right)):
                # identity is static: an array is never None, and a value is itself
                same = left is right
                val = same if isinstance(op, ast.Is) else not same
            elif type(op) in (ast.Is, ast.IsNot, ast.In, ast.NotIn):
                if is_symbolic(left) or is_symbolic(right):
                    raise self.src.error(node, f"`{type(op).__name__}` on an array is not supported; "
                                               f"compare values with == or !=")
                fn = {ast.Is: operator.is_, ast.IsNot: operator.is_not,
                      ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}[type(op)]
                val = fn(left, right)
            else:
                static_op, sym_op = _CMPOPS[type(op)]
                val = sym_op(left, right) if (is_symbolic(left) or is_symbolic(right)) else static_op(left, right)
            result = val if result is None else self._and(result, val)
            left = right
        return result

    def _and(self, a, b):
        if not is_symbolic(a) and not is_symbolic(b):
            return a and b
        return tnp.logical_and(a, b)

    def expr_BoolOp(self, node):
        is_and = isinstance(node.op, ast.And)
        result = self.expr(node.values[0])
        for v in node.values[1:]:
            if not is_symbolic(result):
                # Python short-circuit on a static value
                if (not result) if is_and else result:
                    return result
                result = self.expr(v)
                continue
            other = self.expr(v)
            result = tnp.logical_and(result, other) if is_and else tnp.logical_or(result, other)
        return result

    def expr_IfExp(self, node):
        test = self.expr(node.test)
        if not is_symbolic(test):
            return self.expr(node.body if test else node.orelse)
        # both sides are evaluated; the gradient of the side not taken is exactly 0
        return tnp.where(test, self.expr(node.body), self.expr(node.orelse))

    # -- access ------------------------------------------------------------------
    def expr_Attribute(self, node):
        obj = self.expr(node.value)
        if isinstance(obj, host.HostObject):
            return host.HostMethod(obj, node.attr)
        if isinstance(obj, Value):
            if node.attr == "var":          # x.var() (the slot `var` holds the DXIR Var)
                return lambda *a, **k: tnp.var(obj, *a, **k)
            if node.attr in ("shape", "ndim", "dtype", "T", "mT", "size", "aval"):
                if node.attr == "size":
                    return tnp.size(obj)
                return getattr(obj, node.attr)
            if node.attr in ("transpose", "reshape"):   # x.transpose(1, 0, 2), x.reshape(n, d) as NumPy takes them
                fn = getattr(tnp, node.attr)
                return lambda *a, **k: fn(obj, a[0] if len(a) == 1 else (a or None), **k)
            if hasattr(Value, node.attr):
                return getattr(obj, node.attr)
            if hasattr(tnp, node.attr) and hasattr(np.ndarray, node.attr):
                fn = getattr(tnp, node.attr)           # x.trace(), x.diagonal(), ... as tnp.f(x, ...)
                return lambda *a, **k: fn(obj, *a, **k)
            if obj.var in self.ctx.root.inputs:
                from .structure import StructureNeeded
                raise self.src.error(node, f"arrays have no attribute `{node.attr}` (if this argument is a "
                                           f"dataclass, its structure is read at the first call)", StructureNeeded)
            raise self.src.error(node, f"arrays have no attribute `{node.attr}` inside a differentiated "
                                       f"function; use the tlaloc.numpy function instead")
        try:
            return self.outside(getattr(obj, node.attr))     # self.history: a container outside f
        except AttributeError:
            raise self.src.error(node, f"{type(obj).__name__} has no attribute `{node.attr}`") from None

    def expr_Subscript(self, node):
        obj = self.expr(node.value)
        idx = self.index(node.slice)
        if is_symbolic(obj):
            if isinstance(idx, str):
                from .structure import StructureNeeded
                raise self.src.error(node, f"indexing an array with the string {idx!r} (if this argument is "
                                           f"a dict, its structure is read at the first call)", StructureNeeded)
            return tnp._getitem(obj, idx)
        if isinstance(obj, tnp._SymbolicShape) and not isinstance(idx, int) and self.ctx.specialisable:
            raise self.src.error(node, "slicing a shape of unknown rank", ShapeNeeded)
        if _has_symbolic(idx):
            if isinstance(obj, np.ndarray):
                return tnp._getitem(obj, idx)
            if isinstance(obj, (list, tuple)) and self.b is not self.ctx.root:
                from .structure import StaticMutation       # a static loop over the list's length unrolls
                raise self.src.error(node, "indexing a Python list with a loop index", StaticMutation)
            if isinstance(obj, (list, tuple)) and self.ctx.specialisable:
                raise self.src.error(node, "indexing a Python list with an integer argument", ShapeNeeded)
            if isinstance(obj, (list, tuple)):
                raise self.src.error(node, "indexing a Python list with an array index; "
                                           "stack the list into an array first (tnp.stack)")
        try:
            return obj[idx]
        except Exception as e:                   # static indexing of a static object
            raise self.src.error(node, f"indexing failed: {e}") from None

    def index(self, node):
        if isinstance(node, ast.Slice):
            return slice(*(None if p is None else self.expr(p) for p in (node.lower, node.upper, node.step)))
        if isinstance(node, ast.Tuple):
            return tuple(self.index(e) for e in node.elts)
        return self.expr(node)

    def expr_Starred(self, node):
        raise self.src.error(node, "a starred expression is only supported in a call or a list/tuple")

    # -- comprehensions (over static iterables: unrolled) ------------------------------
    def expr_ListComp(self, node):
        return list(self._comprehension(node))

    def expr_GeneratorExp(self, node):
        return list(self._comprehension(node))

    def expr_DictComp(self, node):
        out = {}
        for k, v in self._comprehension(node, lambda: (self.expr(node.key), self.expr(node.value))):
            if is_symbolic(k):
                raise self.src.error(node.key, "a dict key must be a static Python value, not an array")
            out[k] = v
        return out

    def _comprehension(self, node, element=None):
        saved = dict(self.env)
        out = []
        element = element or (lambda: self.expr(node.elt))

        def loop(gens):
            if not gens:
                out.append(element())
                return
            g = gens[0]
            for item in self._iterate_static(self.expr(g.iter), g.iter):
                self.assign(g.target, item)
                if all(self._static_truth(self.expr(c), c) for c in g.ifs):
                    loop(gens[1:])
        try:
            loop(node.generators)
        finally:
            self.env = saved
        return out

    def _static_truth(self, v, node):
        if is_symbolic(v):
            raise self.src.error(node, "a comprehension filter on an array value; use tnp.where")
        return bool(v)

    def _iterate_static(self, it, node):
        if is_symbolic(it):
            r = it.aval.rank
            n = it.aval.shape[0] if r else None
            if type(n) is int:
                return [tnp._getitem(it, k) for k in range(n)]
            if self.ctx.specialisable:
                raise self.src.error(node, "iterating over an array of unknown length", ShapeNeeded)
            raise self.src.error(node, "iterating over an array of unknown length here; "
                                       "use `for i in range(len(x))` in a for statement")
        if isinstance(it, SymbolicRange):
            if self.ctx.specialisable:
                raise self.src.error(node, "iterating over a range of unknown length", ShapeNeeded)
            raise self.src.error(node, "a range with an array bound can only drive a `for` statement")
        try:
            return list(it)
        except TypeError:
            raise self.src.error(node, f"cannot iterate over {type(it).__name__}") from None

    def expr_Lambda(self, node):
        return LocalFunction(node, self.src, self.env, self.scope, "<lambda>")

    # -- calls ------------------------------------------------------------------------
    def expr_Call(self, node):
        fn = self.expr(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self._iterate_static(self.expr(a.value), a))
            else:
                args.append(self.expr(a))
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                kwargs.update(self.expr(kw.value))
            else:
                kwargs[kw.arg] = self.expr(kw.value)
        return self.call(fn, args, kwargs, node)

    def call(self, fn, args, kwargs, node):
        symbolic = calls._any_symbolic(args, kwargs)
        if isinstance(fn, Undefined):
            raise self.src.error(node, f"`{fn.name}` may be undefined here")
        if is_symbolic(fn):
            from .structure import StructureNeeded
            raise self.src.error(node, "calling an array (if this argument is a module or another callable "
                                       "pytree, its structure is read at the first call)", StructureNeeded)
        if calls.is_user_function(fn):
            return self.inline_call(fn, args, kwargs, node)
        if isinstance(fn, functools.partial):          # functools.partial(f, a)(x) is f(a, x)
            return self.call(fn.func, list(fn.args) + list(args), {**fn.keywords, **kwargs}, node)
        if fn is functools.partial:
            return functools.partial(*args, **kwargs)
        if fn is builtins.map and args:                 # map(f, xs, ...): one lowered call per item
            columns = [self._iterate_static(a, node) for a in args[1:]]
            return iter([self.call(args[0], list(items), {}, node) for items in zip(*columns)])
        if host.call_time_name(fn) is not None:
            if getattr(fn, "__name__", "") == "print" and symbolic:      # prints at call time
                return call_time.lower_print(self, args, kwargs, node)
            return self.host_call(fn, args, kwargs, node)
        if isinstance(fn, types.MethodType) and calls.is_user_function(fn.__func__):
            return self.inline_call(fn.__func__, [fn.__self__] + list(args), kwargs, node)
        call_method = getattr(type(fn), "__call__", None)
        if (symbolic and not isinstance(fn, type) and isinstance(call_method, types.FunctionType)
                and calls.is_user_function(call_method)):
            return self.inline_call(call_method, [fn] + list(args), kwargs, node)
        transformed = getattr(fn, "__tlaloc_transformed__", None)
        if transformed is not None:
            return self.call_transformed(transformed, args, kwargs, node)
        custom = getattr(fn, "__tlaloc_custom__", None)
        if custom is not None:
            return custom.lower_call(self, args, kwargs, node)
        if getattr(fn, "__module__", "") == "builtins" or isinstance(fn, type) and fn.__module__ == "builtins":
            if fn in _STRUCTURAL_BUILTINS and not (fn is builtins.len and args and is_symbolic(args[0])):
                return self._static_call(fn, args, kwargs, node)       # isinstance(t, tuple), len(list)
            if fn in _ITERATING_BUILTINS and symbolic:     # zip(x, y), list(x), enumerate(x): one item per row
                args = [self._iterate_static(a, node) if is_symbolic(a) else a for a in args]
                return self._static_call(fn, args, kwargs, node)
            handled, out = calls.builtin_call(fn, args, kwargs)
            if handled:
                return out
            if (symbolic and fn in (builtins.slice, builtins.int) and self.ctx.specialisable
                    and any(maybe_int(a) for a in args)):
                self._value_needed(args, kwargs, node, None)       # slice(i * b, ...), range-like uses
            if symbolic:
                name = getattr(fn, "__name__", repr(fn))
                hint = {"float": "keep it an array (x.astype(np.float64))",
                        "int": "keep it an array (x.astype(np.int64))",
                        "print": "print outside the differentiated function",
                        "bool": "write the condition as an `if` on the array"}.get(name, "use tlaloc.numpy")
                raise self.src.error(node, f"the builtin `{name}` cannot take an array inside a "
                                           f"differentiated function; {hint}")
            return self._static_call(fn, args, kwargs, node)
        if symbolic and odeint.is_odeint(fn):          # SciPy's solver, with the adjoint method's gradient
            return odeint.lower_odeint(self, args, kwargs, node)
        if calls.is_numpy_callable(fn):
            if not symbolic and not getattr(fn, "__name__", "") in ("zeros_like", "ones_like"):
                return self._static_call(fn, args, kwargs, node)
            if (args and isinstance(args[0], (list, tuple)) and fn.__name__ not in _SEQUENCE_FUNCTIONS
                    and not calls.is_scipy_callable(fn)):     # cho_solve((c, lower), b) takes a real tuple
                args = [_stacked(args[0])] + list(args[1:])     # np.sum([a, b]), np.array([[a, b], [c, d]])
            eq = _OVERRIDES.get(fn.__name__) or calls.numpy_equivalent(fn)
            if eq is None:
                raise self.src.error(node, calls.no_equivalent_message(fn))
            return self._checked(eq, args, kwargs, node)
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, (list, dict)) and getattr(fn, "__name__", "") in _CONTAINER_METHODS:
            # list.append / dict.update on a Python container built in the function: fine in
            # straight-line code; inside an `if`/loop on an array both paths would mutate it
            if self.b is not self.ctx.root:
                from .structure import StaticMutation
                raise self.src.error(node, f"`{fn.__name__}` on a Python {type(owner).__name__} inside an `if` "
                                           f"or loop on an array value; build the list before the branch "
                                           f"or use tnp.stack / tl.scan", StaticMutation)
            if self.is_outside(owner):              # a log list or counter outside f: mutated per call
                return self.external_mutation(fn, args, kwargs, node)
            return self._static_call(fn, args, kwargs, node)
        if isinstance(fn, (type(print),)) and not symbolic:
            return self._static_call(fn, args, kwargs, node)
        mod = getattr(fn, "__module__", "") or ""
        if mod.startswith("tlaloc") or isinstance(getattr(fn, "__self__", None), Value):
            return self._checked(fn, args, kwargs, node)
        if not symbolic:
            return self._static_call(fn, args, kwargs, node)
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
        raise self.src.error(node, f"cannot differentiate through `{name}` (from {mod or 'unknown'}): "
                                   f"it is not Python source tlaloc can read; use tlaloc.numpy, or wrap it "
                                   f"with tl.custom_vjp")

    def _checked(self, fn, args, kwargs, node):
        # a nested def/lambda handed to a tlaloc function (tl.cond, tl.scan ...) is
        # called by it: lower its source inline at that point
        def callable_(a):
            if isinstance(a, LocalFunction):
                return lambda *xs, **kw: self.inline_call(a, list(xs), kw, node)
            return a
        args = [callable_(a) for a in args]
        kwargs = {k: callable_(v) for k, v in kwargs.items()}
        try:
            return fn(*args, **kwargs)
        except FenceError:
            raise
        except TlalocError as e:
            msg = str(e)
            loc = self.src.loc(node)
            if msg.startswith(str(loc)):
                raise
            raise type(e)(f"{loc}: {msg}") from None
        except TypeError as e:
            self._value_needed(args, kwargs, node, e)
            raise self.src.error(node, f"bad call: {e}") from None

    def _static_call(self, fn, args, kwargs, node):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            self._value_needed(args, kwargs, node, e)
            raise self.src.error(node, f"{type(e).__name__} while evaluating a static call: {e}") from None

    def _value_needed(self, args, kwargs, node, err):
        """A call failed on a size or Python value that is still symbolic: specialise (ShapeNeeded)."""
        from .. import _pytree
        leaves = _pytree.leaves((list(args), dict(kwargs)))
        if self.ctx.specialisable and any(is_symbolic(x) or isinstance(x, tnp._SymbolicShape) for x in leaves):
            name = getattr(getattr(node, "func", None), "attr", None) or getattr(getattr(node, "func", None), "id", "")
            raise self.src.error(node, f"`{name}` needs the Python value of a size or an integer argument",
                                 ShapeNeeded) from None


_STRUCTURAL_BUILTINS = (builtins.isinstance, builtins.issubclass, builtins.type, builtins.callable,
                        builtins.hasattr, builtins.id, builtins.len)
_ITERATING_BUILTINS = (builtins.zip, builtins.enumerate, builtins.list, builtins.tuple, builtins.reversed)
_SEQUENCE_FUNCTIONS = ("concatenate", "stack", "vstack", "hstack", "dstack", "column_stack", "row_stack",
                       "block", "broadcast_arrays", "meshgrid", "einsum", "select", "piecewise",
                       "multi_dot", "append")


def _full(shape, fill_value, dtype=None):
    """``np.full`` with a computed fill value: a fresh array (never a broadcast view)."""
    if not is_symbolic(fill_value):
        return tnp.full(shape, fill_value, dtype=dtype)
    dt = dtype or fill_value.aval.dtype or np.float64
    return tnp.add(tnp.zeros(shape, dtype=dt), tnp.asarray(fill_value).astype(dt))


_OVERRIDES = {"full": _full}


def _stacked(seq):
    """A (nested) list of arrays and numbers holding a symbolic value, as one stacked array."""
    if not any(is_symbolic(x) for x in _flat(seq)):
        return seq
    return tnp.stack([_stacked(x) if isinstance(x, (list, tuple)) else tnp.asarray(x) for x in seq])


def _flat(seq):
    for x in seq:
        if isinstance(x, (list, tuple)):
            yield from _flat(x)
        else:
            yield x


_CONTAINER_METHODS = ("append", "extend", "insert", "pop", "update", "setdefault", "__setitem__")


def _unlocated(msg: str) -> str:
    """``msg`` without a leading ``file:line:col: `` (it is located again at the user's node)."""
    import re
    return re.sub(r"^\S+:\d+:\d+: ", "", msg)


def _has_symbolic(idx) -> bool:
    if isinstance(idx, tuple):
        return any(_has_symbolic(i) for i in idx)
    if isinstance(idx, slice):
        return any(is_symbolic(p) for p in (idx.start, idx.stop, idx.step))
    return is_symbolic(idx)
