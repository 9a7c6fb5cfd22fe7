"""``tl.vjp`` called inside a function being lowered (under ``tl.jit``, ``tl.grad``, ``tl.vmap``).

``y, vjp_fn = tl.vjp(f, x)`` then ``vjp_fn(ct)`` in a function that is itself transformed: the
forward graph of ``f`` is inlined at the ``vjp`` call (its primal outputs and residuals become
values of the enclosing graph), and ``vjp_fn`` is a ``SymbolicPullback`` that inlines the
backward graph on those residuals and the cotangent where it is called. The pullback lives only
while the enclosing function is lowered; returning it from that function is refused.

(Regression: the eager ``tl.vjp`` ran on the symbolic values, and its pullback's values
"escaped the function that built it".)
"""
from __future__ import annotations

from .. import _pytree
from .._core.passes import inline
from .._frontend.local_transform import LocalCallable
from .._frontend.values import LocalFunction
from ..errors import ArgumentError


class SymbolicPullback:
    """The ``vjp_fn`` of a ``tl.vjp`` inside a lowering: ``vjp_fn(ct)`` inlines the backward graph."""

    def __init__(self, bwd, residuals, out_tree, arg_trees, name):
        self._bwd, self._res, self._out_tree, self._arg_trees = bwd, list(residuals), out_tree, arg_trees
        self.__name__ = name

    def __call__(self, ct):
        leaves, tree = _pytree.flatten(ct)
        if tree != self._out_tree:
            raise ArgumentError(f"{self.__name__}: the cotangent must have the output's structure "
                                f"{self._out_tree!r}, got {tree!r}")
        bars = inline(self._bwd, self._res + list(leaves))
        out, k = [], 0
        for t in self._arg_trees:
            out.append(_pytree.unflatten(t, list(bars[k:k + t.num_leaves])))
            k += t.num_leaves
        return tuple(out)

    def __tlaloc_lower_symbolic__(self, lowerer, args, kwargs, node):
        if kwargs or len(args) != 1:
            raise lowerer.src.error(node, f"{self.__name__} takes one argument: the output cotangent")
        try:
            return self(args[0])
        except ArgumentError as e:
            raise lowerer.src.error(node, str(e)) from None


def lower_vjp(lowerer, args, kwargs, node):
    """``tl.vjp(f, *primals, has_aux=...)`` at a call site inside a lowering (see the module docstring)."""
    from .api import _VJPTransform, _vjp_cache
    extra = set(kwargs) - {"has_aux"}
    if extra or not args:
        raise lowerer.src.error(node, f"vjp inside a transformed function: call it as vjp(f, *primals, "
                                      f"has_aux=False) (got keywords {sorted(extra)})")
    has_aux = bool(kwargs.get("has_aux", False))
    fun, primals = args[0], list(args[1:])
    if isinstance(fun, LocalFunction):            # closure-converted (local_transform.py), not cached
        t = _VJPTransform(LocalCallable(fun, lowerer._defaults(fun.node.args, fun)), has_aux)
    else:
        t = _vjp_cache(fun, has_aux)
    flat, trees = [], []
    for p in primals:
        leaves, tree = _pytree.flatten(p)
        flat += leaves
        trees.append(tree)
    entry = t.entry_at_call_site(trees, flat)
    lowered = entry["lowered"]
    (fwd, *_), (bwd, *_) = entry["graphs"][0], entry["graphs"][1]
    outs = inline(fwd, flat + t.closure_at_call(lowerer, lowered))
    n_out, _, _ = t._layout
    primal = _pytree.unflatten(lowered.out_tree, list(outs[:n_out]))
    out_tree = lowered.out_tree.children[0] if has_aux else lowered.out_tree
    pullback = SymbolicPullback(bwd, outs[n_out:], out_tree, lowered.arg_trees, f"{t.name}_fn")
    if has_aux:
        return primal[0], pullback, primal[1]
    return primal, pullback
