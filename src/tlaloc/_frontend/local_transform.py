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


class LocalCallable:
    """A ``LocalFunction`` handed to a transform (``tl.grad(inner)``): lowered standalone, as
    ``lower.lower_function`` does for a Python function (see the module docstring)."""

    def __init__(self, fn: LocalFunction, defaults: dict):
        self.fn = fn
        self.defaults = defaults
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
            leaves, tree = _pytree.flatten(value) if isinstance(value, (list, tuple, dict)) else ([value], None)
            if not any(is_symbolic(x) for x in leaves):
                return value
            out = []
            for k, leaf in enumerate(leaves):
                if isinstance(leaf, Value):
                    if id(leaf) not in memo:
                        hint = name if tree is None else f"{name}_{k}"
                        inner = ctx.root.new_input(leaf.aval, hint)
                        ctx.closure_inputs.append((Captured(leaf), inner, name))
                        memo[id(leaf)] = (leaf, inner)
                    out.append(memo[id(leaf)][1])
                else:
                    out.append(leaf)
            return out[0] if tree is None else _pytree.unflatten(tree, out)

        wrapped = {}

        def wrap(scope):
            if scope is None:
                return None
            if id(scope) not in wrapped:
                outer_env = None if scope.outer_env is None else _CaptureEnv(scope.outer_env, capture)
                wrapped[id(scope)] = scope_type(scope.globals, scope.closure, outer_env, wrap(scope.outer_scope))
            return wrapped[id(scope)]

        self.defaults = {k: capture(v, k) for k, v in self.defaults.items()}   # evaluated in the enclosing one
        return scope_type(self.fn.scope.globals, {}, _CaptureEnv(self.fn.env, capture), wrap(self.fn.scope))
