"""Lowering Python expressions: evaluate statically where possible, record DXIR
nodes where a symbolic array is involved."""
from __future__ import annotations

import ast
import operator
import os
import sys
import sysconfig
import types

import numpy as np

from .. import numpy as tnp
from .._core.builder import Value, user_operands
from ..errors import ShapeError, TlalocError
from . import host
from .structure import ShapeNeeded
from .values import LocalFunction, SymbolicRange, is_symbolic

_BINOPS = {
    ast.Add: (operator.add, tnp.add), ast.Sub: (operator.sub, tnp.subtract),
    ast.Mult: (operator.mul, tnp.multiply), ast.Div: (operator.truediv, tnp.divide),
    ast.Pow: (operator.pow, tnp.power), ast.MatMult: (operator.matmul, tnp.matmul),
    ast.FloorDiv: (operator.floordiv, tnp.floor_divide), ast.Mod: (operator.mod, tnp.remainder),
}


def _bitwise(logical, bitwise):
    """``a & b`` (``|``, ``^``): the logical operation on booleans (masks: ``(x < 0) | (x > 1)``), the
    bitwise one on integers, as NumPy. (Regression: refused, "use + - * / ** @ // %".)"""
    def op(a, b):
        kinds = {getattr(getattr(v, "aval", None), "dtype", None) if is_symbolic(v) else np.result_type(v)
                 for v in (a, b)}
        if all(k is None or np.dtype(k).kind == "b" for k in kinds):   # None: a comparison not typed yet
            return logical(a, b)
        return bitwise(a, b)
    return op


_BINOPS.update({
    ast.BitAnd: (operator.and_, _bitwise(tnp.logical_and, tnp.bitwise_and)),
    ast.BitOr: (operator.or_, _bitwise(tnp.logical_or, tnp.bitwise_or)),
    ast.BitXor: (operator.xor, _bitwise(tnp.logical_xor, tnp.bitwise_xor)),
    ast.LShift: (operator.lshift, tnp.bitwise_left_shift), ast.RShift: (operator.rshift, tnp.bitwise_right_shift),
})
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
    with user_operands():
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
        if (isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)) and self.ctx.specialisable
                and not self.ctx.specialised and any(is_symbolic(v) and v.aval.dtype is not None and v.aval.dtype.kind in "iu" for v in (a, b))):
            # `n & 1` with n = x.shape[0]: a size known at the first call, where it is a Python int
            raise self.src.error(node, "a bit operation on an integer read here; its value is known at the first "
                                       "call", ShapeNeeded)
        if self.ctx.python_floats:
            from .math_calls import result_is_python_float, weak_operands
            ca, cb = weak_operands(self, a, b, node)
            return result_is_python_float(self, a, b, self._binop(node, ca, cb))
        return self._binop(node, a, b)

    def _binop(self, node, a, b):
        try:
            return binop(type(node.op), a, b)
        except KeyError:
            raise self.src.error(node, f"the operator {type(node.op).__name__} is not supported on arrays; "
                                       f"use + - * / ** @ // %") from None
        except TlalocError:
            raise                     # DTypeError is a TypeError too: it is located and worded already
        except TypeError:
            if a is None or b is None:
                raise self.none_operand(node, [(node.left, a), (node.right, b)]) from None
            # an operand that is not an array: a list or tuple argument (a pytree of its items, where
            # NumPy would convert it), a string, None. Regression: `TypeError: cannot use list [...]
            # as an array operand`, raised with no location.
            kinds = " and ".join(_operand_kind(v) for v in (a, b))
            raise self.src.error(node, f"`{ast.unparse(node)}` combines {kinds}; pass arrays, "
                                       f"e.g. np.asarray(...) of a list before calling, or convert it "
                                       f"here with np.asarray") from None

    def none_operand(self, node, operands):
        """The FenceError for ``node`` given None where it needs an array; ``operands`` are its
        ``(ast node, value)`` pairs. Regression: ``grad(f)(None, x)`` with ``a * x`` in ``f``
        folded the None into the graph, which failed at run time with no location."""
        names = [ast.unparse(n) for n, v in operands if v is None and n is not None]
        what = f"`{names[0]}`" if names else "an operand"
        fix = (f"pass an array for `{names[0]}`, or test `if {names[0]} is not None:` before using it"
               if names else "pass an array")
        return self.src.error(node, f"{what} is None here, but `{ast.unparse(node)}` needs an array; "
                                    f"{fix}")

    def expr_UnaryOp(self, node):
        v = self.expr(node.operand)
        op = type(node.op)
        if not is_symbolic(v):
            return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                    ast.Invert: operator.invert}[op](v)
        if op is ast.USub:
            return tnp.negative(v)
        if op is ast.UAdd:
            return tnp.positive(v)          # a copy, as NumPy's `+a`
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
                if (is_symbolic(left) or is_symbolic(right)) and isinstance(right if is_symbolic(left) else left, str):
                    # `mode == 'a'` on a parameter whose value is not known yet (a string default, or an
                    # argument): its value is read at the first call (regression: a bare TypeError
                    # "cannot use str 'a' as an array operand" with no location at tl.grad(f))
                    if self.ctx.specialisable:
                        raise self.src.error(node, "a comparison with a string needs the value of this argument; "
                                                   "it is read at the first call", ShapeNeeded)
                    raise self.src.error(node, "an array compared with a string; pass the string as a static "
                                               "argument (not an array)")
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
            rank = result.aval.rank
            if rank not in (None, 0):
                # NumPy raises on the truth of a non-scalar array; masks combined elementwise, as before
                result = tnp.logical_and(result, other) if is_and else tnp.logical_or(result, other)
                continue
            # Python's value, not a bool: `a and b` is b where a is true, else a; `a or b` is a where a
            # is true, else b (regression: both gave True/False, and the gradient was lost)
            truth = tnp.not_equal(result, 0)
            result = tnp.where(truth, other, result) if is_and else tnp.where(truth, result, other)
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
                if obj.aval.shape is None or any(type(d) is not int for d in obj.aval.shape):
                    self.ctx.read_sizes = True          # a size not known yet (lowerer.inline_call)
                if node.attr == "size":
                    return tnp.size(obj)
                if node.attr == "dtype" and obj.aval.dtype is None:
                    # known at the first call: build then (a None here became NumPy's float64 default,
                    # e.g. np.zeros(3, dtype=x.dtype) for a float32 x)
                    raise self.src.error(node, "the dtype of this array is read here; it is known at the "
                                               "first call", ShapeNeeded)
                return getattr(obj, node.attr)
            if node.attr in ("sort", "fill", "put", "partition", "resize", "itemset"):
                def in_place(*a, **k):          # b.sort() as a statement is assign.inplace_method
                    raise self.src.error(node, f"`{ast.unparse(node)}(...)` changes the array in place and "
                                               f"returns None; call it as a statement (`b.sort()`), or use "
                                               f"`np.{'sort' if node.attr == 'sort' else node.attr}` for a new array")
                return in_place
            if node.attr in ("real", "imag"):          # attributes, not methods (regression: `x.real` was a function)
                return getattr(tnp, node.attr)(obj)
            if node.attr == "conjugate":
                return lambda: tnp.conj(obj)
            if node.attr == "item":                    # x.item(): its one number, as float(x)
                from . import math_calls
                return math_calls.lower_item(self, obj, node)
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
            value = getattr(obj, node.attr)
        except AttributeError:
            raise self.src.error(node, f"{type(obj).__name__} has no attribute `{node.attr}`") from None
        return self.object_attribute(obj, node.attr, value, node)

    def object_attribute(self, obj, attr, value, node):
        """``obj.attr`` of an object from outside the function (``self.w`` in a bound method, ``cfg.k``
        of a global namespace), read as a global is: arrays become graph inputs read at each call,
        numbers and strings are guarded, helper objects are guarded by identity, so that a later
        ``obj.attr = ...`` or ``obj.attr[:] = ...`` is seen (regression: an attribute's value at the
        first build was folded into every later call)."""
        if (not _plain_object(obj) or any(is_symbolic(v) for v in _attribute_leaves(value))
                or getattr(value, "__self__", None) is obj):          # obj.method: obj itself is what changes
            return self.outside(value)
        # read through the path from the global or closure it hangs off (self.config.k: the `config`
        # of the object that is `self` at the call), so a property that makes a fresh object at each
        # access is read anew, not guarded by identity (regression: it rebuilt at every call)
        parent = self.ctx.object_paths.get(id(obj))
        if parent is not None and parent[0] is obj:
            getter = (lambda g=parent[1]: getattr(g(), attr))
        else:
            getter = (lambda: getattr(obj, attr))
        key = ("attribute", id(obj), attr)
        if _plain_object(value) and not isinstance(value, type) and not isinstance(value, types.ModuleType):
            if key not in self.ctx.closure_keys:
                self.ctx.closure_keys[key] = value
                self.ctx.guards.append(host.TypeGuard(getter, value, ast.unparse(node)))
                self.ctx.object_paths[id(value)] = (value, getter)
            return self.outside(value)
        result = self._external(value, key, getter, ast.unparse(node))
        if isinstance(value, np.ndarray):
            self.outside(value)            # an in-place write into it is still refused (effects.py)
        return result

    def _index_concatenate(self, obj, idx, node):
        """``np.r_[x, 1.0, y]`` (the items joined along their first axis, each at least 1-d) and
        ``np.c_[a, b]`` (1-d items as columns, then joined along the last axis) with arrays and
        numbers as items; slices (``np.r_[0:3]``) and string directives are refused by name.
        (Regression: NumPy's own code ran on the symbolic items and failed on their rank.)"""
        items = list(idx) if isinstance(idx, tuple) else [idx]
        name = "np.r_" if obj is np.r_ else "np.c_"
        if any(isinstance(i, (slice, str)) for i in items):
            raise self.src.error(node, f"{name}[...] with a slice or a string directive is not supported; "
                                       f"use np.concatenate / np.arange")
        if obj is np.r_:
            return tnp.concatenate([tnp.atleast_1d(i) for i in items], axis=0)
        cols = []
        for i in items:
            rank = tnp.ndim(i) if is_symbolic(i) else np.ndim(i)
            if not isinstance(rank, int):
                raise self.src.error(node, f"{name}[...] needs the rank of its items", ShapeNeeded)
            cols.append(tnp.reshape(i, (-1, 1)) if rank <= 1 else i)
        return tnp.concatenate(cols, axis=-1)

    def expr_Subscript(self, node):
        obj = self.expr(node.value)
        idx = self.index(node.slice, obj)
        if is_symbolic(obj):
            if isinstance(idx, str):
                from .structure import StructureNeeded
                raise self.src.error(node, f"indexing an array with the string {idx!r} (if this argument is "
                                           f"a dict, its structure is read at the first call)", StructureNeeded)
            return tnp._getitem(obj, idx)
        if isinstance(obj, tnp._SymbolicShape) and not isinstance(idx, int) and self.ctx.specialisable:
            raise self.src.error(node, "slicing a shape of unknown rank", ShapeNeeded)
        if (obj is np.r_ or obj is np.c_) and _has_symbolic(idx):
            return self._index_concatenate(obj, idx, node)
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

    def index(self, node, base=None, axis=0):
        if isinstance(node, ast.Slice):
            window = self._window(node, base, axis)
            if window is not None:
                return window
            return slice(*(None if p is None else self.expr(p) for p in (node.lower, node.upper, node.step)))
        if isinstance(node, ast.Tuple):
            out, ax = [], axis
            for e in node.elts:
                item = self.index(e, base if ax is not None else None, ax)
                out.append(item)
                if ax is not None:
                    ax = None if item is Ellipsis else ax + (item is not None)
            return tuple(out)
        return self.expr(node)

    def _window(self, node, base=None, axis=0):
        """``x[i:i + c]`` (or ``i:c + i``) with a loop index ``i`` and a static int ``c``, where every
        value ``i`` takes keeps the window inside ``x``'s axis (``i`` in ``range(a, b, s)``, all
        static): a slice of size ``c`` (``_prims/indexing.py``), which compiled and batched code can
        take. A window that may run past the end (a last minibatch ``x[i:i + bs]`` that is shorter)
        stays NumPy's slice of run-time size. (Regression: a sliding window in a loop was refused
        under tl.jit / tl.vmap, "its size depends on the value of the integer argument `i`".)"""
        if node.lower is None or node.upper is None:
            return None
        lo, up = _index_and_offset(node.lower), _index_and_offset(node.upper)
        if ast.dump(lo[0]) != ast.dump(up[0]):
            return None                   # x[i:j]: not a window
        index = self.expr(lo[0])
        if not is_symbolic(index):
            return None
        offsets = [self._static_offset(p, node) for p in (lo, up)]
        step = 1 if node.step is None else self.expr(node.step)
        if None in offsets or type(step) is not int or step < 1 or offsets[1] < offsets[0]:
            return None
        first, size = offsets[0], offsets[1] - offsets[0]
        proved = self._window_in_range(index, first, size, base, axis)
        if proved is None and self.ctx.specialisable and not self.ctx.specialised:
            raise self.src.error(node, "whether the window x[i:i + c] stays inside the array depends on sizes "
                                       "known at the first call", ShapeNeeded)
        if not proved:
            return None
        from .._prims.indexing import Offset
        start = index if first == 0 else tnp.add(index, first)
        return slice(start, Offset(start, size), None if step == 1 else step)

    def _static_offset(self, part, node):
        """The int ``±c`` of a bound ``i ± c`` (0 for ``i``); None where it is not a static int."""
        _, offset_node, sign = part
        if offset_node is None:
            return 0
        offset = self.expr(offset_node)
        if is_symbolic(offset) and self.ctx.specialisable and not self.ctx.specialised:   # x[i:i + x.shape[1]]
            raise self.src.error(node, "the size of a window x[i:i + n] is read here; it is known at the first "
                                       "call", ShapeNeeded)
        return sign * offset if type(offset) is int else None

    def _window_in_range(self, index, first, size, base, axis):
        """Whether every value the loop index takes keeps ``x[index + first:index + first + size]``
        inside axis ``axis`` of ``base``: True, False, or None where the loop's range or the axis's
        size is not known yet (``index`` is not a loop index: False)."""
        hit = self.ctx.loop_ranges.get(id(index))
        if hit is None or hit[0] is not index or axis is None or base is None:
            return False
        shape = getattr(getattr(base, "aval", None), "shape", None) if is_symbolic(base) else np.shape(base)
        if shape is None or axis >= len(shape) or type(shape[axis]) is not int or hit[1] is None:
            return None
        values = hit[1]
        return len(values) == 0 or (min(values) + first >= 0 and max(values) + first + size <= shape[axis])

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


def _operand_kind(v) -> str:
    if is_symbolic(v):
        return "an array"
    if isinstance(v, (list, tuple)):
        return f"a Python {type(v).__name__} of {len(v)} items"
    return "None" if v is None else f"a {type(v).__name__}"


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


def _plain_object(obj) -> bool:
    """An object whose attributes the user's code may change between calls: an instance of a
    Python class, a SimpleNamespace, a class of the user's, a module of the user's (a config
    module); not NumPy's, SciPy's, tlaloc's or the standard library's modules and classes,
    whose attributes are read once (``np.pi``, ``np.float32``)."""
    import types
    if isinstance(obj, types.ModuleType):
        return _user_module(obj)
    if isinstance(obj, type):
        module = sys.modules.get(obj.__module__)
        return module is not None and _user_module(module)
    if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, np.ndarray, np.generic, np.dtype, np.ufunc)):
        return False
    if type(obj).__module__.split(".")[0] in ("tlaloc", "numpy", "scipy"):     # e.g. a frozen distribution
        return False
    state = getattr(obj, "__dict__", None)
    if isinstance(state, dict) and any(is_symbolic(v) for item in state.values() for v in _attribute_leaves(item)):
        return False                    # made inside the function, from its values
    return state is not None or hasattr(type(obj), "__slots__")


def _user_module(module) -> bool:
    """A module loaded from a file outside the standard library and installed packages."""
    from .source import installed_package
    filename = getattr(module, "__file__", None)
    if not filename or module.__name__.split(".")[0] in ("tlaloc", "numpy", "scipy"):
        return False
    if installed_package(filename) is not None:
        return False
    return not os.path.abspath(filename).startswith(_STDLIB)


_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep


def _attribute_leaves(value) -> list:
    """The leaves of an attribute's value when it is a list, tuple or dict (else the value)."""
    from .. import _pytree
    if isinstance(value, (list, tuple, dict)):
        try:
            return _pytree.leaves(value)
        except Exception:
            return [value]
    return [value]


def _index_and_offset(bound):
    """``(index expression, offset expression or None, sign)`` of a slice bound ``i``, ``i + c``,
    ``c + i`` or ``i - c`` (``expr._window``)."""
    if isinstance(bound, ast.BinOp) and isinstance(bound.op, ast.Add):
        if isinstance(bound.left, ast.Constant):
            return bound.right, bound.left, 1
        return bound.left, bound.right, 1
    if isinstance(bound, ast.BinOp) and isinstance(bound.op, ast.Sub):
        return bound.left, bound.right, -1
    return bound, None, 1
