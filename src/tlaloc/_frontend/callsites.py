"""Lowering calls in user code (``ExprLowerer``'s calls): what a call means is decided
here, in order: user functions (inlined), ``functools.partial`` and ``map``, call-time
actions (random draws, ``print``; ``host.py``, ``call_time.py``), methods, transformed
functions (their graph inlined), custom rules, builtins (static, or symbolic-aware in
``calls.builtin_call``), ``scipy.integrate.odeint`` (``odeint.py``), NumPy and SciPy
functions (mapped onto ``tlaloc.numpy``/``tlaloc.scipy``), container methods, and
``tlaloc`` functions themselves; anything else given an array is refused by name."""
from __future__ import annotations

import ast
import builtins
import functools
import types

import numpy as np

from .. import numpy as tnp
from .._core.builder import NoneOperand, Value, user_operands
from ..errors import FenceError, RankUnknownError, TlalocError
from . import call_time, calls, host, math_calls, odeint
from .structure import ShapeNeeded
from .values import LocalFunction, SymbolicRange, Undefined, is_symbolic, maybe_int


class CallLowerer:
    """Mixin of ``Lowerer``: ``expr_Call`` and the calls it resolves."""

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
        if fn is builtins.super and not args and not kwargs:
            return self._zero_argument_super(node)
        if fn is np.vectorize:
            raise self.src.error(node, "np.vectorize runs a Python function once per element, which tlaloc does "
                                       "not differentiate; write the function with array operations (np.where "
                                       "for an `if`), or map it over an axis with tl.vmap")
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
        lower_symbolic = getattr(fn, "__tlaloc_lower_symbolic__", None)
        if symbolic and lower_symbolic is not None:     # tl.jvp(f, primals, tangents) inside a lowering
            return lower_symbolic(self, args, kwargs, node)
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
                if fn is builtins.len and is_symbolic(out):
                    self.ctx.read_sizes = True          # a size not known yet (lowerer.inline_call)
                return out
            if (fn is builtins.int and len(args) == 1 and not kwargs and is_symbolic(args[0])
                    and not self._size_or_argument(args[0])):
                return math_calls.lower_int(self, args[0], node)     # int(np.argmax(d)): a computed index
            if (symbolic and fn in (builtins.slice, builtins.int) and self.ctx.specialisable
                    and any(maybe_int(a) for a in args)):
                self._value_needed(args, kwargs, node, None)       # slice(i * b, ...), range-like uses
            if symbolic and fn is builtins.float and len(args) == 1 and not kwargs:   # float(loss): the number
                return math_calls.lower_float(self, args[0], node)
            if symbolic and fn is builtins.int and len(args) == 1 and not kwargs and is_symbolic(args[0]):
                return math_calls.lower_int(self, args[0], node)     # int(np.argmax(d)): an index
            if fn is builtins.reversed and len(args) == 1 and isinstance(args[0], SymbolicRange):
                return _reversed_range(args[0], self, node)
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
            # a SciPy distribution object (`norm(mu, s)` with an array `mu`) has no __name__
            name = getattr(fn, "__name__", None)
            if (args and isinstance(args[0], (list, tuple)) and name not in _SEQUENCE_FUNCTIONS
                    and not calls.is_scipy_callable(fn)):     # cho_solve((c, lower), b) takes a real tuple
                args = [_stacked(args[0])] + list(args[1:])     # np.sum([a, b]), np.array([[a, b], [c, d]])
            eq = _OVERRIDES.get(name) or calls.numpy_equivalent(fn)
            if eq is None:
                if name in _SIZE_FUNCTIONS or _sizes_only(args, kwargs):   # np.triu_indices(x.shape[0], 1): run it
                    # once the sizes are known (an argument `n` of unknown type is taken for a size here)
                    self._value_needed(args, kwargs, node, None)
                raise self.src.error(node, calls.no_equivalent_message(fn))
            if isinstance(eq, np.dtype):        # np.float64(x) on an array computed here: x.astype
                eq = functools.partial(_convert, dtype=eq)
            if kwargs.get("out") is not None:
                return self._with_out(eq, args, kwargs, node)
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
        if math_calls.is_math_function(fn):          # math.exp(theta): the tlaloc.numpy function, in float64
            return math_calls.lower_math_call(self, fn, args, kwargs, node)
        if isinstance(getattr(fn, "__self__", None), np.ufunc):   # np.add.reduce(x), np.multiply.accumulate(x)
            return self._ufunc_method(fn.__self__, fn.__name__, args, kwargs, node)
        if isinstance(fn, type) and calls.is_user_class(fn):       # Lin(W), Params(W, b), NT(a, b)
            return self.construct_object(fn, args, kwargs, node)
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
        raise self.src.error(node, f"cannot differentiate through `{name}` (from {mod or 'unknown'}): "
                                   f"it is not Python source tlaloc can read; use tlaloc.numpy, or wrap it "
                                   f"with tl.custom_vjp")

    def _size_or_argument(self, v) -> bool:
        """Whether ``v`` is an argument leaf or a size (``len(x)``, ``x.shape[0]``): an int whose value
        a more specialised build can know (``_value_needed``), unlike one computed from data."""
        if v.builder is self.ctx.root and v.var in self.ctx.root.inputs:
            return True
        node = v.builder.producer(v)
        return node is not None and node.prim.name in ("dim_size", "reduced_count")

    def _with_out(self, fn, args, kwargs, node):
        """``np.multiply(b, 2, out=b)``: the result written into ``out`` in place, so the name given
        as ``out`` (and its aliases) is rebound to it, as for ``b[...] = v``; the call's value is that
        array, as NumPy returns ``out``. (Regression: refused, "unexpected keyword argument 'out'".)"""
        target = next((k.value for k in node.keywords if k.arg == "out"), None)
        if isinstance(target, ast.Tuple) and len(target.elts) == 1:
            target = target.elts[0]
        if not isinstance(target, ast.Name):
            raise self.src.error(node, "out= is supported with a name (out=b) here; assign the result instead")
        rest = {k: v for k, v in kwargs.items() if k != "out"}
        new = self._checked(fn, args, rest, node)
        old = self.lookup(target.id, target)
        if is_symbolic(old) or is_symbolic(new):
            if is_symbolic(old):
                self._augassign_aliases(target, old, new)
            self._store_subscript_base(target, new)
        else:
            old[...] = new              # a constant array: NumPy's own write
            new = old
        return new

    def _zero_argument_super(self, node):
        """``super()`` in a method lowered inline: Python's implicit form, ``super(__class__, self)``
        (the method's ``__class__`` cell and its first argument). (Regression: refused with
        "super(): __class__ cell not found".)"""
        fnode = self.src.node
        params = [a.arg for a in fnode.args.posonlyargs + fnode.args.args] if hasattr(fnode, "args") else []
        scope = self.scope
        cls = None
        while scope is not None and cls is None:
            if "__class__" in scope.closure:
                cls = scope.closure["__class__"]
            scope = scope.outer_scope
        if cls is None or not params or params[0] not in self.env:
            raise self.src.error(node, "super() without arguments is supported in a method of a class (with "
                                       "its first argument); write super(Class, self)")
        return super(cls, self.env[params[0]])

    def construct_object(self, cls, args, kwargs, node):
        """An instance of a class of the user's, made inside the function from its values: a
        dataclass or namedtuple by its own constructor (which only stores the fields); another
        class by ``object.__new__`` and its ``__init__`` lowered inline, whose ``self.attr = v``
        then sets the new object's attribute (``effects.py``). Its methods and ``__call__`` are
        inlined where called, as for any object. (Regression: refused as "not Python source
        tlaloc can read".)"""
        import dataclasses
        if dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields")):
            try:
                return cls(*args, **kwargs)
            except TlalocError:
                raise
            except Exception as e:
                raise self.src.error(node, f"making a `{cls.__name__}` from arrays computed here failed "
                                           f"({type(e).__name__}: {e})") from None
        init = cls.__init__
        if cls.__new__ is not object.__new__ or not calls.is_user_function(init):
            raise self.src.error(node, f"making a `{cls.__qualname__}` inside a differentiated function: its "
                                       f"{'__new__' if cls.__new__ is not object.__new__ else '__init__'} is "
                                       f"not Python source tlaloc can read; make it a @dataclasses.dataclass, "
                                       f"or build it outside and pass its arrays in")
        obj = object.__new__(cls)
        self.ctx.local_objects[id(obj)] = obj
        self.inline_call(init, [obj] + list(args), kwargs, node)
        return obj

    def _ufunc_method(self, ufunc, method, args, kwargs, node):
        """``np.<ufunc>.reduce`` / ``.accumulate`` with an array: the tlaloc.numpy reduction or
        cumulative function of that ufunc, along ``axis`` (default 0, as the ufunc methods take it,
        where np.sum and np.cumsum default to every axis); others are refused by name."""
        table = {("add", "reduce"): tnp.sum, ("multiply", "reduce"): tnp.prod, ("maximum", "reduce"): tnp.max,
                 ("minimum", "reduce"): tnp.min, ("logical_and", "reduce"): tnp.all,
                 ("logical_or", "reduce"): tnp.any, ("add", "accumulate"): tnp.cumsum,
                 ("multiply", "accumulate"): tnp.cumprod, ("maximum", "accumulate"): tnp.maximum_accumulate,
                 ("minimum", "accumulate"): tnp.minimum_accumulate}
        eq = table.get((ufunc.__name__, method))
        qual = f"numpy.{ufunc.__name__}.{method}"
        if eq is None:
            hint = (f"write the running {ufunc.__name__} as a `for` loop or with tl.scan"
                    if method == "accumulate" else "use a tlaloc.numpy function or tl.custom_vjp")
            raise self.src.error(node, f"`{qual}` has no tlaloc equivalent yet; {hint}")
        extra = set(kwargs) - {"axis", "keepdims"}
        if len(args) > 2 or extra or (method == "accumulate" and "keepdims" in kwargs):
            raise self.src.error(node, f"`{qual}` is supported with an array and `axis` (and `keepdims` for "
                                       f"reduce) only; got {sorted(extra) or f'{len(args)} positional arguments'}")
        axis = args[1] if len(args) == 2 else kwargs.get("axis", 0)
        if method == "accumulate" and not isinstance(axis, int):
            raise self.src.error(node, f"`{qual}` takes one axis (an int), got {axis!r}: accumulate does not "
                                       f"allow multiple axes")
        x = _stacked(args[0]) if isinstance(args[0], (list, tuple)) else args[0]   # np.add.reduce([a, b])
        rest = {k: v for k, v in kwargs.items() if k == "keepdims"}
        return self._checked(eq, [x], {"axis": axis, **rest}, node)

    def _checked(self, fn, args, kwargs, node):
        # a nested def/lambda handed to a tlaloc function (tl.cond, tl.scan ...) is
        # called by it: lower its source inline at that point
        takes_local = getattr(fn, "__tlaloc_takes_local__", False)     # tl.grad, tl.vmap ... (local_transform.py)

        def callable_(a):
            if isinstance(a, LocalFunction):
                if takes_local:
                    from .local_transform import LocalCallable
                    return LocalCallable(a, self._defaults(a.node.args, a))
                return lambda *xs, **kw: self.inline_call(a, list(xs), kw, node)
            return a
        args = [callable_(a) for a in args]
        kwargs = {k: callable_(v) for k, v in kwargs.items()}
        try:
            with user_operands():
                return fn(*args, **kwargs)
        except FenceError:
            raise
        except NoneOperand:
            pairs = [(None if isinstance(a, ast.Starred) else a, v) for a, v in zip(node.args, args)]
            pairs += [(kw.value, kwargs.get(kw.arg)) for kw in node.keywords if kw.arg is not None]
            raise self.none_operand(node, pairs) from None
        except TlalocError as e:
            msg = str(e)
            loc = self.src.loc(node)
            if isinstance(e, RankUnknownError) and self.ctx.specialisable:   # built again for the shapes
                raise self.src.error(node, msg, ShapeNeeded) from None
            if msg.startswith(str(loc)):
                raise
            raise type(e)(f"{loc}: {msg}") from None
        except TypeError as e:
            self._value_needed(args, kwargs, node, e)
            raise self.src.error(node, f"bad call: {e}") from None

    def _static_call(self, fn, args, kwargs, node):
        # a nested def/lambda handed to a Python function (`pairs.sort(key=lambda p: p[1])`): called
        # through its inlined body (regression: "'LocalFunction' object is not callable")
        def callable_(a):
            if isinstance(a, LocalFunction):
                return lambda *xs, **kw: self.inline_call(a, list(xs), kw, node)
            return a
        args = [callable_(a) for a in args]
        kwargs = {k: callable_(v) for k, v in kwargs.items()}
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


#: NumPy functions of sizes only (no array operand): run at the first call, once their sizes are known
_SIZE_FUNCTIONS = frozenset({"triu_indices", "tril_indices", "diag_indices", "indices", "tri", "unravel_index",
                             "ravel_multi_index"})


def _sizes_only(args, kwargs) -> bool:
    """Whether every symbolic leaf of a call is a size or an integer scalar (known at the first call)."""
    from .. import _pytree
    leaves = [x for x in _pytree.leaves((list(args), dict(kwargs))) if is_symbolic(x) or isinstance(x, tnp._SymbolicShape)]
    def size_like(x):        # a shape, or an integer scalar (not an argument of unknown dtype and rank)
        if isinstance(x, tnp._SymbolicShape):
            return True
        av = x.aval
        return av.dtype is not None and av.dtype.kind in "iu" and (av.shape is None or av.shape == ())
    return bool(leaves) and all(size_like(x) for x in leaves)


_STRUCTURAL_BUILTINS = (builtins.isinstance, builtins.issubclass, builtins.type, builtins.callable,
                        builtins.hasattr, builtins.id, builtins.len)
_ITERATING_BUILTINS = (builtins.zip, builtins.enumerate, builtins.list, builtins.tuple, builtins.reversed)
_SEQUENCE_FUNCTIONS = ("concatenate", "stack", "vstack", "hstack", "dstack", "column_stack", "row_stack",
                       "block", "broadcast_arrays", "meshgrid", "einsum", "select", "piecewise",
                       "multi_dot", "append",
                       "zeros", "ones", "empty", "full")     # a shape: (n + 1, n + 1) stays a tuple


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


def _convert(x, /, dtype):
    """``np.float64(x)`` / ``np.float32(x)`` with ``x`` computed in the function: NumPy's
    conversion, ``x`` as an array of that dtype (a derivative passes through, as for astype).
    (Regression: refused as "bad call: 'numpy.dtypes.Float64DType' object is not callable".)"""
    from .. import numpy as tnp
    return tnp.astype(tnp.asarray(x), dtype)


def _reversed_range(r, lowerer, node):
    """``reversed(range(a, b, s))`` with a bound known only at run time (``reversed(range(len(r)))``,
    the discounted-returns loop): ``range(last, a - 1, -s)`` for a static step ``s > 0``, where
    ``last = a + (b - a - 1) // s * s``. (Regression: "'SymbolicRange' object is not reversible".)"""
    from .expr import binop
    if type(r.step) is not int or r.step <= 0:
        raise lowerer.src.error(node, "reversed(range(...)) needs a static positive step; write range(b - 1, a - 1, -1)")
    span = binop(ast.Sub, binop(ast.Sub, r.stop, r.start), 1)
    last = binop(ast.Add, r.start, binop(ast.Mult, binop(ast.FloorDiv, span, r.step), r.step))
    return SymbolicRange(last, binop(ast.Sub, r.start, 1), -r.step)
