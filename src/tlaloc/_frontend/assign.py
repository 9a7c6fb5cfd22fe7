"""Assignment statements: ``=`` (with tuple unpacking), annotated and augmented assignment,
subscript stores with NumPy's semantics (functional updates that aliases and views of the
written array see, ``views.py``; a write into a view of another array, or into an array from
outside the function, is refused), and ``del`` of a name in straight-line code."""
from __future__ import annotations

import ast

import numpy as np

from ..errors import TypeAnnotationError
from .expr import binop
from .values import Undefined, is_symbolic
from .views import RANK_REASON, ZERO_D_REASON

_OP_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.FloorDiv: "//",
            ast.Mod: "%", ast.MatMult: "@"}


class AssignLowerer:
    """Mixin of ``Lowerer``."""

    def stmt_Delete(self, node):
        """``del name`` in the straight-line part of the body unbinds the name (rendered
        derivatives free their temporaries this way, and stay differentiable source).
        Inside a branch or loop, or on an element or attribute, it is refused."""
        if self.b is not self.ctx.root or self.in_loop or not all(isinstance(t, ast.Name) for t in node.targets):
            from .lowerer import _refusal
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
                       self.scope.globals, _values(self.scope.closure))
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
            if t.id not in self.env:
                self._refuse_outside_write(t, t.id)
            cur = self.lookup(t.id, t)
            new = binop(type(node.op), cur, self.expr(node.value))
            self._refuse_inplace_result(t, t.id, cur, new)
            new = _inplace_dtype(cur, new)
            if is_symbolic(cur):
                self._augassign_aliases(t, cur, new)
            elif isinstance(cur, np.ndarray):
                self._concrete_write(t, cur, new)
            self.env[t.id] = new
        elif isinstance(t, ast.Subscript):
            base = self.expr(t.value)
            idx = self.index(t.slice, base)
            v = self.expr(node.value)
            if isinstance(base, (list, dict)) and not is_symbolic(idx):      # counts[k] += 1
                if not self.is_outside(base):
                    cur = base[idx]
                    new = binop(type(node.op), cur, v)
                    if is_symbolic(cur):            # an array item: NumPy's `+=` writes into it in place
                        self._refuse_inplace_result(t, ast.unparse(t), cur, new)
                        self._item_augassign_aliases(t, cur, new)
                    base[idx] = new
                else:
                    op = type(node.op)
                    def update(v, base=base, idx=idx, op=op):
                        base[idx] = binop(op, base[idx], v)
                    update.__self__ = base
                    update.__name__ = f"{ast.unparse(t)} {_OP_TEXT.get(op, 'op')}="
                    # v goes in as an argument, so that an array computed here is refused by name
                    # (regression: `LOG["s"] += np.sum(w)` on a global dict failed with no location)
                    self.external_mutation(update, [v], {}, node)
                return
            unknown_value = is_symbolic(v) and v.aval.shape is None    # `y[m] *= c` with an argument c
            mask_like = _is_mask(idx) or _mask_expression(t.slice)
            if (is_symbolic(idx) and ((idx.aval.dtype is None and _scalar_value(v)) or (mask_like and unknown_value))
                    and self.ctx.specialisable and not self.ctx.specialised and not isinstance(base, (list, dict))):
                from .structure import ShapeNeeded         # a mask or an index array: known at the first call
                raise self.src.error(t, "the dtype of this index is read here", ShapeNeeded)
            if _is_mask(idx) and _scalar_value(v):
                # y[y < 0] *= 0.1: every selected element changes alike, so it is a where, which
                # compiled and batched code can express (regression: refused there, as the masked
                # read has a size known only at run time)
                from .. import numpy as tnp
                new = tnp.where(idx, binop(type(node.op), base, v), base)
                self._store_subscript_base(t.value, new)
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

    def inplace_method(self, call) -> bool:
        """``b.sort()`` / ``b.sort(axis=0)`` as a statement, on an array computed here: NumPy sorts
        ``b`` in place, so ``b`` (and the names bound to it) is rebound to the sorted array, as for
        ``b[...] = v``. The other in-place methods (``fill``, ``put``, ``partition``, ``resize``,
        ``itemset``) are refused by name. False where ``call`` is not such a call. (Regression:
        ``b.sort()`` returned a sorted copy that was dropped: the code went on with ``b`` unsorted.)"""
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in _INPLACE_METHODS):
            return False
        obj = self.expr(call.func.value)
        if not is_symbolic(obj):
            return False                # a constant array sorts itself, as NumPy does
        if call.func.attr != "sort":
            raise self.src.error(call, f"`{ast.unparse(call.func)}` changes the array in place; write the new "
                                       f"value instead (e.g. `b = np.full_like(b, v)` for fill, "
                                       f"`b = np.partition(b, k)`)")
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            raise self.src.error(call, "b.sort(...) with unpacked arguments is not supported; pass axis= directly")
        args = [self.expr(a) for a in call.args]
        kwargs = {k.arg: self.expr(k.value) for k in call.keywords}
        axis = args[0] if args else kwargs.pop("axis", -1)
        if len(args) > 1 or set(kwargs) - {"kind", "stable", "order"} or kwargs.get("order") is not None:
            raise self.src.error(call, "b.sort(axis, kind=..., stable=...) is supported (not order=)")
        from .. import numpy as tnp
        new = tnp.sort(obj, axis=axis)
        if isinstance(call.func.value, ast.Name):
            self._augassign_aliases(call.func.value, obj, new)
        self._store_subscript_base(call.func.value, new)
        return True

    def fill_diagonal(self, call) -> bool:
        """``np.fill_diagonal(a, v)`` as a statement on an array computed here: NumPy writes ``v`` on
        ``a``'s main diagonal in place, so ``a`` (and its aliases) is rebound to
        ``where(eye, v, a)`` (2-D, its shape known; ``wrap`` refused). False where ``call`` is not
        such a call. (Regression: refused by name.)"""
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "fill_diagonal"
                and len(call.args) == 2 and not call.keywords):
            return False
        if self.expr(call.func) is not np.fill_diagonal:
            return False
        a, v = self.expr(call.args[0]), self.expr(call.args[1])
        if not is_symbolic(a) and not is_symbolic(v):
            return False                # constants: NumPy writes them itself
        if not isinstance(call.args[0], ast.Name):
            raise self.src.error(call, "np.fill_diagonal(a, v) needs a name for `a` here")
        from .. import numpy as tnp
        shape = tnp.shape(a)
        if not isinstance(shape, tuple) or len(shape) != 2 or any(type(d) is not int for d in shape):
            from .structure import ShapeNeeded
            if self.ctx.specialisable and not self.ctx.specialised:
                raise self.src.error(call, "np.fill_diagonal needs the shape of its array; it is known at the "
                                           "first call", ShapeNeeded)
            raise self.src.error(call, "np.fill_diagonal is supported on 2-D arrays of known shape here")
        new = tnp.where(tnp.eye(shape[0], shape[1], dtype=bool), v, a)
        self._augassign_aliases(call.args[0], a, new)
        self._store_subscript_base(call.args[0], new)
        return True

    def ufunc_at(self, call) -> bool:
        """``np.add.at(a, indices, b)`` / ``np.subtract.at``: NumPy's unbuffered in-place update
        (a repeated index accumulates), lowered as ``a = index_add(a, indices, ±b)`` with ``a``'s
        aliases rebound as for ``a[i] += b``. False when ``call`` is not one of them, or has no
        symbolic operand (then it runs as NumPy). The derivative is JAX's ``a.at[i].add(b)``."""
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "at"
                and isinstance(call.func.value, (ast.Name, ast.Attribute))):
            return False
        owner = self.expr(call.func.value)          # a name or module attribute: no effects to repeat
        if not isinstance(owner, np.ufunc):
            return False
        if owner not in (np.add, np.subtract):
            if any(is_symbolic(self.expr(a)) for a in call.args if not isinstance(a, ast.Starred)):
                raise self.src.error(call, f"np.{owner.__name__}.at is not supported on arrays computed here "
                                           f"(np.add.at and np.subtract.at are); write the update with "
                                           f"index arithmetic, e.g. x * tnp.prod of factors per index")
            return False
        if call.keywords or len(call.args) != 3 or any(isinstance(a, ast.Starred) for a in call.args):
            raise self.src.error(call, f"np.{owner.__name__}.at takes (a, indices, b) here, positionally")
        a, idx, v = self.expr(call.args[0]), self.index(call.args[1]), self.expr(call.args[2])
        if not any(is_symbolic(x) for x in (a, v, *(idx if isinstance(idx, tuple) else (idx,)))):
            return False
        from .._prims.indexing import index_add
        from .. import numpy as tnp
        new = index_add(a, idx, tnp.negative(v) if owner is np.subtract else v)
        self._store_subscript_base(call.args[0], new)
        return True

    def assign(self, target, value):
        if isinstance(target, ast.Name):
            if is_symbolic(value) and value.var.hint is None:
                value.var.hint = target.id
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            stars = [i for i, t in enumerate(target.elts) if isinstance(t, ast.Starred)]   # one at most: Python's parser
            if stars:      # `*rest, last = ps`, `coef, *_ = np.linalg.lstsq(...)`: the starred name gets a list
                k, after = stars[0], len(target.elts) - stars[0] - 1
                items = self._unpack(value, k + after, target, at_least=True)
                rest = items[k:len(items) - after]
                items = items[:k] + [list(rest)] + items[len(items) - after:]
                targets = target.elts[:k] + [target.elts[k].value] + target.elts[k + 1:]
            else:
                items, targets = self._unpack(value, len(target.elts), target), target.elts
            for t, v in zip(targets, items):
                self.assign(t, v)
        elif isinstance(target, ast.Subscript):
            from .._prims.indexing import index_set
            base = self.expr(target.value)
            idx = self.index(target.slice, base)
            if isinstance(base, (list, dict)) and not is_symbolic(idx):      # d[k] = v, lst[0] = v
                self._store_item(base, idx, value, target)
                return
            new = index_set(base, idx, value)
            self._store_subscript_base(target.value, new)
        elif isinstance(target, ast.Attribute):
            self._attribute_effect(target, value, target)
        elif isinstance(target, ast.Starred):
            raise self.src.error(target, "starred assignment targets are not supported; unpack explicitly")
        else:
            raise self.src.error(target, f"assignment to {type(target).__name__} is not supported inside a "
                                         f"differentiated function (objects are immutable here); build a "
                                         f"new value instead, e.g. dataclasses.replace")

    def _store_item(self, base, idx, value, node):
        """``d[k] = v`` / ``lst[i] = v`` on a Python container: a local one (or an argument's
        pytree) changes here; one that outlives the call (a global's) changes at call time, and an
        array computed here is refused by name. (Regression: this reached index_set and failed with
        `TypeError: cannot use dict {} as an array operand`, with no location.)"""
        if not self.is_outside(base):
            base[idx] = value
            return
        def store(v, base=base, idx=idx):
            base[idx] = v
        store.__self__ = base
        store.__name__ = f"{ast.unparse(node)} ="
        self.external_mutation(store, [value], {}, node)

    def _store_subscript_base(self, base_node, new):
        """``a[i] = v`` rebinds ``a`` (functional update); ``a[i][j] = v`` nests.

        NumPy semantics are kept for aliases: every other name bound to the same
        array is rebound too. Writing into a *view* of another live array
        (``row = A[0]; row[1] = v``) is refused rather than silently diverging."""
        if isinstance(base_node, ast.Name):
            if base_node.id not in self.env:
                self._refuse_outside_write(base_node, base_node.id)
            old = self.env.get(base_node.id)
            if is_symbolic(old):
                self._refuse_view_write(base_node, old)
                self._refuse_outside_alias(base_node, old)
                # aliases see the write; views of `old` become the same views of `new` (views.py)
                self.rebind_after_write(base_node, base_node.id, old, new)
            elif isinstance(old, np.ndarray):
                self._concrete_write(base_node, old, new)
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
        self._refuse_outside_alias(target, cur)
        rank = cur.aval.rank
        if aliases and rank is None and self.ctx.specialisable:     # the rank is known at the first call
            from .structure import ShapeNeeded
            raise self.src.error(target, f"`{target.id}` and `{aliases[0]}` name the same value: whether "
                                         f"`{target.id} += ...` changes `{aliases[0]}` depends on its rank, "
                                         f"known at the first call", ShapeNeeded)
        if aliases and rank == 0:
            raise self.src.error(target, f"`{target.id}` and `{aliases[0]}` name the same 0-d value; `{target.id} "
                                         f"+= ...` changes `{aliases[0]}` in NumPy if it is a 0-d array, and not if "
                                         f"it is a NumPy scalar (what operations on 0-d arrays return). Write "
                                         f"`{target.id} = {target.id} + ...` for a new value")
        if aliases and rank is None:
            raise self.src.error(target, f"`{target.id}` and `{aliases[0]}` name the same value; whether "
                                         f"`{target.id} {'+='} ...` changes `{aliases[0]}` depends on its rank in "
                                         f"NumPy. Write `{target.id} = {target.id} + ...` for a new array, or "
                                         f"annotate the rank")
        # a 0-d array's views see `+=`, a NumPy scalar has none: with the rank unknown, views go stale
        self.rebind_after_write(target, target.id, cur, new,
                                maybe_reason=RANK_REASON if rank is None else ZERO_D_REASON if rank == 0 else None)

    def _refuse_inplace_result(self, node, label, cur, new):
        """``z += v`` on an array (rank >= 1) writes into ``z``: NumPy refuses a result of another
        shape ("non-broadcastable output operand") or a float result into an integer or bool array
        (casting rule 'same_kind'). Regression: both were accepted, ``z`` silently growing to the
        broadcast shape or becoming float. Checked where the shapes (or the ranks) and dtypes are
        known when the function is built (annotated or specialised arguments); not yet otherwise."""
        if not (is_symbolic(cur) and is_symbolic(new)):
            return
        a, b = cur.aval, new.aval
        if a.rank is None or a.rank == 0 or a.shape is None or b.shape is None:
            return
        known = all(isinstance(d, int) for d in a.shape + b.shape)
        if (known and tuple(a.shape) != tuple(b.shape)) or (b.rank is not None and b.rank > a.rank):
            raise self.src.error(node, f"`{label}` is {a}, and the in-place result is {b}: NumPy refuses it "
                                       f"(non-broadcastable output operand). "
                                       f"Write `{label} = {label} + ...` for a new array")
        if (a.dtype is not None and b.dtype is not None and a.dtype.kind in "iub" and b.dtype.kind in "fc"
                and not a.weak):
            raise self.src.error(node, f"`{label}` is {a.dtype} and the in-place result is {b.dtype}: NumPy refuses "
                                       f"to cast it back (casting rule 'same_kind'). Write `{label} = {label} + ...` "
                                       f"for a new array")

    def _item_augassign_aliases(self, target, cur, new):
        """``L[0] += v`` where the item is an array value: as ``z = L[0]; z += v`` (NumPy's ``+=``
        writes into that array, so every name and container bound to it sees the write, and a view
        of another array is refused). Regression: the list's item alone changed (``y = x * 2;
        L = [y]; L[0] += 1`` left ``y`` as it was, a silently wrong value and gradient; and
        ``a, *b = x; b[0] += 10`` did not write through to ``x``, where NumPy does)."""
        label = ast.unparse(target)
        self._refuse_view_write(target, cur, label)
        self._refuse_outside_alias(target, cur, label)
        aliases = [n for n, v in self.env.items() if v is cur and not n.startswith(".")]
        rank = cur.aval.rank
        if aliases and rank is None and self.ctx.specialisable:
            from .structure import ShapeNeeded
            raise self.src.error(target, f"`{label}` and `{aliases[0]}` name the same value: whether `{label} += "
                                         f"...` changes `{aliases[0]}` depends on its rank, known at the first call",
                                 ShapeNeeded)
        if aliases and (rank is None or rank == 0):
            raise self.src.error(target, f"`{label}` and `{aliases[0]}` name the same value; whether `{label} += "
                                         f"...` changes `{aliases[0]}` depends on whether it is an array or a NumPy "
                                         f"scalar. Write `{label} = {label} + ...` for a new value")
        if rank is not None and rank >= 1:
            self.rebind_after_write(target, label, cur, new)

    def _concrete_write(self, node, cur, new):
        """An in-place write (``b += v``, ``b[i] = v``) into an array built from constants
        (``a = np.zeros(3); b = a``): NumPy changes that one buffer, so every other name bound
        to it sees the write; a name that only shares part of it (a view, or the array a view
        was taken from) is refused, as for computed arrays. (Regression: such aliases kept the
        old constant, a silently wrong value and gradient.)"""
        if self.outside_array(cur) is not None:
            raise self.src.error(node, f"`{node.id}` is (or shares memory with) an array read from an object "
                                       f"outside the function; NumPy would change that array in place, for the "
                                       f"caller too, which a differentiated function does not do. Write into a "
                                       f"copy (`{node.id} = {node.id}.copy()` first), or return the new value and "
                                       f"update the object outside")
        for name, val in self.env.items():
            if name == node.id or not isinstance(val, np.ndarray):
                continue
            if val is not cur and np.shares_memory(val, cur):
                if val.base is not None and (val.base is cur or val.base is cur.base) and cur.base is None:
                    expr = self.assigned_text(name, node)
                    fix = f"`{name} = {expr}.copy()`" if expr else f"`{name} = ....copy()` where you take it"
                    raise self.src.error(node, f"`{node.id}` and `{name}` share memory (`{name}` is a view of "
                                               f"`{node.id}`), so NumPy's `{name}` would show this write, which "
                                               f"tlaloc cannot follow for an array built from constants. If "
                                               f"the old value is meant, copy it ({fix}); otherwise take "
                                               f"`{name}` after this write")
                raise self.src.error(node, f"`{node.id}` and `{name}` share memory (one is a view of the other), "
                                           f"so NumPy would write through to `{name}`; write into the array "
                                           f"itself, or copy first with `{node.id} = {node.id}.copy()`")
        # aliases are rebound; computed views of this constant array (`r = a[i]`) follow the write
        self.rebind_after_write(node, node.id, cur, new)

    def _refuse_outside_write(self, node, name):
        """An in-place write (``G[i] = v``, ``G += v``) into an array that is not a local name: a
        global's, a closure's or the enclosing function's. NumPy would change that array for the
        caller, which a differentiated function cannot do (the write would stay local): refused."""
        try:
            value = self.lookup(name, node)
        except Exception:
            return
        if not (is_symbolic(value) or isinstance(value, np.ndarray)):
            return
        raise self.src.error(node, f"`{name}` is an array from outside the function (a global, a closure "
                                   f"variable or the enclosing function's); NumPy would change it in place, "
                                   f"for the caller too, which a differentiated function does not do. Write "
                                   f"into a copy (`{name.lower() if name.lower() != name else name + '_'} = "
                                   f"{name}.copy()`), or return the new value and update `{name}` outside")

    def _refuse_outside_alias(self, node, value, name=None):
        """A write through a local name into a global's or closure's array (``w = W; w += v``)
        would change that array in NumPy, and later reads of ``W`` would see it: refused."""
        name = name or node.id
        for key, val in self.ctx.closure_keys.items():
            if val is value and key[0] == "attribute":        # obj.W, read at each call (expr.object_attribute)
                raise self.src.error(node, f"`{name}` is (or shares memory with) an array read from an object "
                                           f"outside the function; NumPy would change that array in place, for "
                                           f"the caller too, which a differentiated function does not do. Write "
                                           f"into a copy (`{name} = {name}.copy()` first), or return the new "
                                           f"value and update the object outside")
            if val is value and key[-1] != name:
                raise self.src.error(node, f"`{name}` is the array `{key[-1]}` from outside the function; "
                                           f"NumPy would change `{key[-1]}` in place. Copy it first "
                                           f"(`{name} = {key[-1]}.copy()`) or build a new array "
                                           f"(`{name} = {name} + ...`)")

    def refuse_inplace_view(self, node, name, value):
        """Before a loop that writes ``name`` in place: refused when it is a view of another
        live array (or, built from constants, shares memory with one), as a write would be."""
        if isinstance(value, np.ndarray):
            for other, val in self.env.items():
                if other != name and isinstance(val, np.ndarray) and val is not value and np.shares_memory(val, value):
                    raise self.src.error(node, f"`{name}` and `{other}` share memory (one is a view of the other), "
                                               f"so NumPy would write through to `{other}`; write into the array "
                                               f"itself, or copy first with `{name} = {name}.copy()`")
        else:
            self._refuse_view_write(node, value, name)
            self._refuse_outside_alias(node, value, name)

    def _refuse_view_write(self, node, value, name=None):
        """A write into a view of another live array (or of an array from outside): refused
        (``views.py``: the view may be several nodes deep, or taken in an enclosing region)."""
        self.refuse_write_into_view(node, value, name)

    def _unpack(self, value, n, node, at_least=False):
        """The items of ``value`` for ``n`` names (at least ``n`` with a starred name), as Python unpacks."""
        def fits(length):
            return length >= n if at_least else length == n

        def refusal(length, what):
            if at_least:
                return f"not enough values to unpack (expected at least {n}, got {length})"
            return f"cannot unpack {what} into {n} names"
        if is_symbolic(value):
            shape = value.aval.shape
            if shape is None or not shape or type(shape[0]) is not int:
                from .structure import ShapeNeeded
                raise self.src.error(node, f"unpacking a value of unknown length into {n} names (if this "
                                           f"argument is a tuple, its structure is read at the first call; "
                                           f"for an array, its shape)", ShapeNeeded)
            if not fits(shape[0]):
                raise self.src.error(node, refusal(shape[0], f"an array of length {shape[0]}"))
            from .. import numpy as tnp
            return [tnp._getitem(value, k) for k in range(shape[0])]
        try:
            items = list(value)
        except TypeError:
            raise self.src.error(node, f"cannot unpack {type(value).__name__}") from None
        if not fits(len(items)):
            raise self.src.error(node, refusal(len(items), f"{len(items)} values"))
        return items


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


def _values(closure) -> dict:
    """A scope's closure as a plain dict of values (``lowerer.ClosureCells`` reads its cells)."""
    snapshot = getattr(closure, "snapshot", None)
    return snapshot() if snapshot is not None else dict(closure)


def _is_mask(idx) -> bool:
    """A boolean array index (one, not in a tuple), symbolic or concrete."""
    if is_symbolic(idx):
        return idx.aval.dtype is not None and idx.aval.dtype.kind == "b"
    return isinstance(idx, np.ndarray) and idx.dtype.kind == "b"


def _scalar_value(v) -> bool:
    """A Python number or a 0-d array: the same value for every selected element."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return True
    if is_symbolic(v):
        return v.aval.shape == ()
    return isinstance(v, (np.ndarray, np.generic)) and np.ndim(v) == 0


#: ndarray methods that change the array in place (``assign.inplace_method``)
_INPLACE_METHODS = frozenset({"sort", "fill", "put", "partition", "resize", "itemset"})


def _mask_expression(node) -> bool:
    """An index written as a comparison or a combination of them (``y[y > 1]``, ``y[(a < 0) | m]``)."""
    if isinstance(node, (ast.Compare, ast.BoolOp)):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not)):
        return _mask_expression(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return _mask_expression(node.left) or _mask_expression(node.right)
    return False


def _inplace_dtype(cur, new):
    """``z += v`` where ``z`` is an array writes into it: a float result is cast back to ``z``'s
    float dtype (NumPy's casting rule 'same_kind'), ``x32 += y64`` stays float32; a NumPy scalar
    ``z`` (0-d) is rebound instead and promotes. Where the rank or the dtypes are not known yet
    the cast is a ``cast_like(..., arrays_only=True)`` node, which folds once they are.
    (Regression: ``z = x32.copy(); z += y64`` gave float64, where NumPy gives float32.)"""
    if not (is_symbolic(cur) and is_symbolic(new)) or cur.aval.weak:
        return new
    from .._prims.broadcasting import cast_like
    from ..dtypes import is_float
    a, b = cur.aval, new.aval
    if a.dtype is not None and not is_float(a.dtype):
        return new                        # an int or bool target: refused above where NumPy refuses
    if a.dtype is not None and b.dtype is not None:
        if a.dtype == b.dtype or not is_float(b.dtype):
            return new
        if a.shape is not None:
            return cast_like(new, cur) if len(a.shape) >= 1 else new
    return cast_like(new, cur, arrays_only=True)
