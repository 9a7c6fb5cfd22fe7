"""A transform applied to a nested ``def`` or ``lambda`` inside a function being lowered.

``tl.grad(lambda p: loss(p, batch))(params)`` inside a function that is itself transformed
(MAML's inner step, a Hessian-vector product written by hand, implicit differentiation):
the nested function reads values of the enclosing function (``batch``), which are symbolic
values of the enclosing graph. The transform needs a graph of its own, so the nested function
is closure-converted: lowered standalone (``lower.lower_function`` on a ``LocalCallable``),
each enclosing symbolic value it reads becomes an input of its graph, after its arguments,
with a ``Captured`` getter; where the transform's graph is inlined back into the enclosing
one, the captured value itself is the operand (``Transformed.lower_call``). So the enclosing
transform differentiates through the captured values as through any other operand, and the
inner transform treats them as constants, as JAX's closures are treated.

(Regression: such a call recursed into the lowering of tlaloc's own wrapper and was refused
as "recursive call to `lambda` ... deeper than 8 calls", at a line of tlaloc's.)
"""
from __future__ import annotations

import dataclasses

from .. import _pytree
from .._core.builder import Value
from .values import LocalFunction, is_symbolic


class Captured:
    """A closure getter standing for a symbolic value of the enclosing lowering: the value is the
    operand where the graph is inlined (``value``); it has no concrete value of its own."""
    __slots__ = ("value",)
    __tlaloc_captured__ = True

    def __init__(self, value):
        self.value = value

    def __call__(self):
        return self.value


def captured_operand(getter):
    """The enclosing graph's value for a ``Captured`` getter, else None."""
    return getter.value if getattr(getter, "__tlaloc_captured__", False) else None


class _CaptureEnv:
    """An enclosing function's environment seen from the standalone lowering: symbolic values
    come back as inputs of the new graph (one per value, made at the first read), nested
    functions as functions that read through this environment too."""

    def __init__(self, outer, capture):
        self.outer, self.capture = outer, capture

    def __contains__(self, name):
        return name in self.outer

    def __getitem__(self, name):
        return self.capture(self.outer[name], name)

    def get(self, name, default=None):
        return self[name] if name in self else default


def capture_symbolic(ctx, value, name, memo):
    """``value`` with each symbolic value of an enclosing lowering in it (a leaf of a list, tuple,
    dict or dataclass, or an attribute of an object made in that function) replaced by an input of
    ``ctx``'s graph, recorded with a ``Captured`` getter (one input per value: ``memo``)."""
    if isinstance(value, Value):
        if id(value) not in memo:
            inner = ctx.root.new_input(value.aval, name)
            ctx.closure_inputs.append((Captured(value), inner, name))
            memo[id(value)] = (value, inner)
        return memo[id(value)][1]
    if isinstance(value, (list, tuple, dict)) or dataclasses.is_dataclass(value) and not isinstance(value, type):
        leaves, tree = _pytree.flatten(value)
        if tree.kind != "leaf":
            if not any(is_symbolic(x) for x in leaves):
                return value
            return _pytree.unflatten(tree, [capture_symbolic(ctx, x, f"{name}_{k}", memo)
                                            for k, x in enumerate(leaves)])
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict) and not isinstance(value, type) and any(
            is_symbolic(x) for v in state.values() for x in (_pytree.leaves(v) if isinstance(v, (list, tuple, dict))
                                                             else [v])):
        # an object made in the enclosing function (Model(W)): a shallow copy holding the captures
        import copy
        twin = copy.copy(value)
        for k, v in state.items():
            object.__setattr__(twin, k, capture_symbolic(ctx, v, f"{name}_{k}", memo))
        return twin
    return value


class LocalCallable:
    """A ``LocalFunction`` handed to a transform (``tl.grad(inner)``): lowered standalone, as
    ``lower.lower_function`` does for a Python function (see the module docstring)."""

    def __init__(self, fn: LocalFunction, defaults: dict):
        self.fn = fn
        self.outer_defaults = defaults      # evaluated in the enclosing lowering
        self.defaults = defaults            # as the build under way reads them (scope_for)
        self.__name__ = self.__qualname__ = fn.name if fn.name != "<lambda>" else "lambda"
        self.__doc__ = None
        self.__annotations__ = {}
        self.key = ("local", id(fn.node))

    def __repr__(self):
        return f"<nested function {self.__name__}>"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self!r} is only lowered (it exists while its enclosing function is lowered)")

    def source(self, src_type):
        """The enclosing function's source with this function's node."""
        return dataclasses.replace(self.fn.src, node=self.fn.node)

    def scope_for(self, ctx, scope_type):
        """The enclosing scopes, each environment read through a capture into ``ctx.root``."""
        memo = {}

        def capture(value, name):
            if isinstance(value, LocalFunction):
                return LocalFunction(value.node, value.src, _CaptureEnv(value.env, capture),
                                     wrap(value.scope), value.name)
            return capture_symbolic(ctx, value, name, memo)

        wrapped = {}

        def wrap(scope):
            if scope is None:
                return None
            if id(scope) not in wrapped:
                outer_env = None if scope.outer_env is None else _CaptureEnv(scope.outer_env, capture)
                wrapped[id(scope)] = scope_type(scope.globals, scope.closure, outer_env, wrap(scope.outer_scope))
            return wrapped[id(scope)]

        self.defaults = {k: capture(v, k) for k, v in self.outer_defaults.items()}   # per build
        return scope_type(self.fn.scope.globals, {}, _CaptureEnv(self.fn.env, capture), wrap(self.fn.scope))
