"""autograd's ``autograd.extend`` names, on tlaloc's custom rules: ``primitive``, ``defvjp``, ``defjvp``.

An autograd program that defines its own derivative ports by changing the import::

    from tlaloc.extend import defvjp, primitive

    @primitive
    def logsumexp(x):
        m = np.max(x)
        return m + np.log(np.sum(np.exp(x - m)))

    def logsumexp_vjp(ans, x):                  # autograd's VJP maker: (ans, *args) -> (g -> x_bar)
        return lambda g: np.full(x.shape, g) * np.exp(x - ans)

    defvjp(logsumexp, logsumexp_vjp)

``primitive(f)`` is ``tl.custom_vjp_jvp(f)``; ``defvjp`` and ``defjvp`` translate
autograd's rule makers into its ``fwd``/``bwd`` and ``jvp`` rules, so the rules are
lowered and differentiated like any tlaloc code (reverse over reverse works where
the makers are differentiable, as in autograd). Differences from autograd: the
function and its makers are lowered from source (the body must be code tlaloc
reads, not arbitrary Python as in autograd), and under a transform a primitive takes
positional arguments only.
"""
from __future__ import annotations

from ._ad.custom import CustomDerivative, custom_vjp_jvp
from .errors import ArgumentError, NoRuleError

__all__ = ["primitive", "defvjp", "defjvp"]


def primitive(fun):
    """autograd's ``@primitive``: ``fun`` with derivatives given later by ``defvjp``/``defjvp``."""
    return custom_vjp_jvp(fun)


def _makers(what, fun, makers, argnums):
    """``((argnum, maker), ...)`` after checking ``fun`` and the counts."""
    if not isinstance(fun, CustomDerivative):
        raise ArgumentError(f"{what}: the first argument must be a function made with "
                            f"tlaloc.extend.primitive (got {fun!r})")
    argnums = tuple(range(len(makers))) if argnums is None else tuple(argnums)
    if len(argnums) != len(makers):
        raise ArgumentError(f"{what}: {len(makers)} rule makers for argnums {argnums}")
    return tuple(zip(argnums, makers))


def defvjp(fun, *vjpmakers, argnums=None):
    """autograd's ``defvjp(fun, maker_0, maker_1, ..., argnums=None)``.

    ``maker_k(ans, *args)`` returns the map ``g -> cotangent of args[argnums[k]]``
    (``argnums`` defaults to ``0, 1, ...``). A ``None`` maker, or an argument without
    one, has no VJP: differentiating through it with a floating-point array there
    raises ``NoRuleError`` naming it (autograd raises too); integer arguments get none.
    """
    makers = dict(_makers("defvjp", fun, vjpmakers, argnums))
    name = fun.__name__
    inner = fun.fun

    def fwd(first, *rest):
        ans = inner(first, *rest)
        return ans, (ans, (first, *rest))

    def bwd(res, g):                      # lowered like user code: the makers are inlined
        ans, args = res
        bars = []
        for k, arg in enumerate(args):
            maker = makers.get(k)
            if maker is None:
                bars.append(_no_rule(arg, k, name))
            else:
                bars.append(maker(ans, *args)(g))
        return tuple(bars)

    fwd.__name__, bwd.__name__ = f"{name}_fwd", f"{name}_bwd"
    fun.defvjp(fwd, bwd)
    return fun


def _no_rule(arg, k, name):
    """None (no cotangent) for an integer argument; a floating one has no VJP: refused."""
    import numpy as np
    aval = getattr(arg, "aval", None)
    dtype = aval.dtype if aval is not None else np.result_type(arg)
    if dtype is None:               # not known before the first call: built again then
        from ._frontend.structure import ShapeNeeded
        raise ShapeNeeded(f"`{name}`: the dtype of argument {k}, which has no VJP maker")
    if np.dtype(dtype).kind in "fc":
        raise NoRuleError(f"`{name}` has no VJP for argument {k} (defvjp gave None or no maker for it); "
                          f"give one, or pass that value through a closure instead of an argument")
    return None


def defjvp(fun, *jvpmakers, argnums=None):
    """autograd's ``defjvp(fun, jvp_0, jvp_1, ..., argnums=None)``: ``jvp_k(g, ans, *args)``
    is the tangent of the result for tangent ``g`` of ``args[argnums[k]]``; the result's
    tangent is their sum (a ``None`` maker contributes nothing for a zero tangent)."""
    makers = _makers("defjvp", fun, jvpmakers, argnums)
    inner = fun.fun

    def jvp(primals, tangents):
        ans = inner(*primals)
        out_dot = None
        for k, maker in makers:
            if maker is not None:
                term = maker(tangents[k], ans, *primals)
                out_dot = term if out_dot is None else out_dot + term
        return ans, out_dot

    jvp.__name__ = f"{fun.__name__}_jvp"
    fun.defjvp(jvp)
    return fun
