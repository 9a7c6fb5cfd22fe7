"""Lowering what runs at call time: host actions (random draws, clocks, I/O), ``raise`` and
``assert`` on paths known while lowering, attribute side effects, and the context managers
that only change how NumPy reports floating-point events (see ``host.py``)."""
from __future__ import annotations

import ast

import warnings

import numpy as np

from .. import _pytree
from .._core.aval import UNKNOWN as _UNKNOWN
from . import host
from .values import BROKE, RET, RETURNED, is_symbolic, maybe_int


class EffectsLowerer:
    """Mixin of ``Lowerer``."""

    def _host_input(self, getter, where, hint=None):
        """A graph input read by ``getter`` at every call (a call-time action, host.py)."""
        v = self.ctx.root.new_input(_UNKNOWN, hint)
        self.ctx.closure_inputs.append((getter, v, where))
        return v

    def host_call(self, fn, args, kwargs, node):
        """Record a call whose result is not a function of the arguments (host.py)."""
        name = host.call_time_name(fn)
        from .structure import ShapeNeeded, StaticMutation
        from .. import numpy as tnp
        for a in _pytree.leaves((list(args), dict(kwargs))):
            if (isinstance(a, tnp._SymbolicShape) or maybe_int(a)) and self.ctx.specialisable:
                raise self.src.error(node, f"`{name}` takes a size computed from the arguments; "
                                           f"built at the first call for its value", ShapeNeeded)
            if is_symbolic(a):
                if a.aval.shape == () and a.aval.dtype is not None and np.dtype(a.aval.dtype).kind in "iu":
                    raise self.src.error(node, f"`{name}` takes a size computed from the arguments; "
                                               f"built at the first call for its value", ShapeNeeded)
                raise self.src.error(node, f"`{name}` runs when the function is called, before any array "
                                           f"is computed, so it cannot take an array computed inside the "
                                           f"function; draw standard noise and transform it instead "
                                           f"(`mu + sigma * rs.standard_normal(shape)`)")
        if self.b is not self.ctx.root:
            raise self.src.error(node, f"`{name}` runs at call time, but here it is inside an `if` or loop "
                                       f"on an array value (NumPy would call it only on the paths taken); "
                                       f"call it before the branch or loop", StaticMutation)
        if self.ctx.frame is None:
            self.ctx.frame = host.Frame()
        k = len(self.ctx.closure_inputs)
        kind = host.result_kind(fn)
        loc = self.src.loc(node)
        where = f"{loc.filename}:{loc.lineno}:{loc.col}: `{name}`"
        getter = host.make_getter(self.ctx.frame, k, fn, args, kwargs, kind, where)
        hint = (fn.name if isinstance(fn, host.HostMethod) else getattr(fn, "__name__", "host")).strip("_")
        v = self._host_input(getter, where, hint if hint.isidentifier() else "host")
        if kind == "array" and self.ctx.specialised:
            v.var.aval = host.probe_aval(fn, args, kwargs, v.var.aval)
        if kind == "object":
            return host.HostObject(self.ctx.frame, k, name.rsplit(".", 1)[-1])
        if kind == "effect":
            return None
        return v

    def _attribute_effect(self, target, value, node, op=None):
        """``self.n_calls += 1`` / ``obj.attr = v``: made at call time, in order (host.py); on an
        object made in the function (``callsites.construct_object``), set now."""
        obj = self.expr(target.value)
        if id(obj) in self.ctx.local_objects and self.ctx.local_objects[id(obj)] is obj:
            if self.b is not self.ctx.root:
                from .structure import StaticMutation
                raise self.src.error(node, f"setting `{ast.unparse(target)}` inside an `if` or loop on an array "
                                           f"value; compute the value with np.where and set it after",
                                     StaticMutation)
            if op is not None:
                from .expr import binop
                value = binop(op, getattr(obj, target.attr), value)
            setattr(obj, target.attr, value)
            return
        if is_symbolic(obj) or is_symbolic(value):
            raise self.src.error(node, "assignment to an Attribute of an array, or of an array computed "
                                       "inside a differentiated function, is not supported (objects are "
                                       "immutable here; only plain Python values may be stored, at call "
                                       "time); return the value instead (has_aux=True)")
        if self.b is not self.ctx.root:
            raise self.src.error(node, "setting an attribute inside an `if` or loop on an array value; "
                                       "do it outside the branch")
        self._host_input(host.attribute_setter(obj, target.attr, value, op), None, "effect")

    def stmt_With(self, node):
        """``with np.errstate(...)`` / ``warnings.catch_warnings()`` around numeric code: the body is
        lowered as is (these managers change how NumPy reports floating-point events, not values)."""
        for item in node.items:
            mgr = self.expr(item.context_expr)
            if not isinstance(mgr, (np.errstate, warnings.catch_warnings)):
                raise self.src.error(node, f"`with` {type(mgr).__name__}(...) is not supported in a "
                                           f"differentiated function (only np.errstate and "
                                           f"warnings.catch_warnings are); move it outside")
            if item.optional_vars is not None:
                self.assign(item.optional_vars, None)
        with warnings.catch_warnings():     # filters set in the body while lowering are undone here
            self.block(node.body)

    def stmt_Assert(self, node):
        test = self.expr(node.test)
        if is_symbolic(test):                   # checked when the function is called (call_time.py)
            from .call_time import lower_assert
            lower_assert(self, test, None if node.msg is None else self.expr(node.msg), node)
            return
        if not test:                # fails for this signature: raised when the function is called
            msg = None if node.msg is None else self.expr(node.msg)
            if is_symbolic(msg) or self.b is not self.ctx.root:
                raise self.src.error(node, "assertion failed while lowering")
            self._host_input(host.raiser(AssertionError() if msg is None else AssertionError(msg)), None,
                             "raised")
            self.env[RET] = 0.0
            self.env[RETURNED] = True

    def stmt_Raise(self, node):
        """``raise`` on a path known when lowering: the exception is raised at call time (a
        call-time action, host.py), after the actions before it. Under a condition on array
        values it is refused (or built again once shapes are known)."""
        if self.b is not self.ctx.root or self.in_loop and self.pending_guard() is not None:
            from .structure import ShapeNeeded
            if self.ctx.specialisable:
                raise self.src.error(node, "`raise` under a condition that is not known yet", ShapeNeeded)
            raise self.src.error(node, "`raise` under a condition on array values cannot be checked in a "
                                       "differentiated function; validate the values before calling it")
        if node.exc is None:
            raise self.src.error(node, "a bare `raise` needs an active exception; raise an exception instead")
        exc = self.expr(node.exc)
        if is_symbolic(exc) or not (isinstance(exc, BaseException)
                                    or isinstance(exc, type) and issubclass(exc, BaseException)):
            raise self.src.error(node, "`raise` needs an exception made from Python values")
        self._host_input(host.raiser(exc), None, "raised")
        self.env[RET] = 0.0                     # never returned: the call raises first
        self.env[RETURNED] = True
        if self.in_loop:
            self.env[BROKE] = True

    # -- Python containers: made in the function (mutated while lowering) or outside it -----------
    def outside(self, value):
        """Mark a list/dict read from a global, a closure or an object's attribute: it outlives the
        call, so mutating it is a call-time effect (``external_mutation``)."""
        if isinstance(value, (list, dict)):
            self.ctx.outside_containers.append(value)
        elif isinstance(value, np.ndarray):         # an object's array: an in-place write is refused
            self.ctx.outside_arrays.append(value)
        return value

    def outside_array(self, array):
        """The array from outside the function (an object's attribute) that ``array`` is or shares
        memory with, or None."""
        for a in self.ctx.outside_arrays:
            if a is array or np.shares_memory(a, array):
                return a
        return None

    def is_outside(self, container) -> bool:
        return any(c is container for c in self.ctx.outside_containers)

    def external_mutation(self, fn, args, kwargs, node):
        """``log.append(v)`` / ``counts.update(...)`` on a container that outlives the call: made at
        call time, once per call, in order (host.py). A value computed in the function is refused."""
        name = getattr(fn, "__name__", "mutation")
        if any(is_symbolic(a) for a in _pytree.leaves((list(args), dict(kwargs)))):
            raise self.src.error(node, f"`{name}` stores an array computed inside a differentiated function "
                                       f"in a container that outlives the call; return the value instead "
                                       f"(has_aux=True) and store it outside")
        owner = getattr(fn, "__self__", None)
        # the function changes this container itself at each call: its contents are not a guard
        self.ctx.guards[:] = [g for g in self.ctx.guards if g.value is not owner]
        self._host_input(host.mutation(fn, args, kwargs), None, "effect")
        return None
