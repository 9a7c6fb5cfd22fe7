"""Regions that a node calls as functions on the host (``odeint``'s right-hand side,
``fixed_point``'s step): running them, their reverse-mode graphs, and refusals.

Such a node keeps a DXIR region in a param listed in ``prim.function_params``; the
interpreter passes the Graph, the Python renderer a ``def`` it writes for it
(``_render/python.py``), and ``as_callable`` runs either.
"""
from __future__ import annotations

from .._core.graph import Graph
from ..errors import NoRuleError


def as_callable(region):
    """``region`` (a Graph, interpreted, or the function rendered for it) as ``f(*xs) -> list``."""
    if isinstance(region, Graph):
        from .._core.interpreter import eval_graph
        return lambda *xs: list(eval_graph(region, *xs))
    return lambda *xs: list(region(*xs))


_REVERSE: dict = {}


def reverse_region(graph: Graph) -> Graph:
    """``(*inputs, a) -> (out, a ∂out/∂input for each input)``: the reverse-mode graph of a
    one-output region, built once per region (zeros where the output does not depend on
    an input)."""
    hit = _REVERSE.get(id(graph))
    if hit is not None and hit[0] is graph:
        return hit[1]
    from .._ad.reverse import forward_sweep
    from .._core.builder import Builder
    from .._core.passes import dce
    from .._core.simplify import simplify
    from .._prims.broadcasting import zeros_like
    b = Builder(name=f"{graph.name}_vjp")
    with b.active():
        ins = [b.new_input(v.aval, v.hint) for v in graph.inputs]
        a = b.new_input(graph.outputs[0].aval, "a")
        outs, backward = forward_sweep(graph, ins)
        bars = backward([a])
        bars = [zeros_like(x) if bar is None else bar for x, bar in zip(ins, bars)]
        region = simplify(dce(b.finish([outs[0], *bars], f"{graph.name}_vjp")))
    _REVERSE[id(graph)] = (graph, region)
    return region


def refusal(kind: str, name: str, why: str):
    """A rule slot that refuses by name; ``.refused`` documents it in the rule table."""
    def refuse(*args, **kwargs):
        raise NoRuleError(f"no {kind} rule for `{name}`: {why}")
    refuse.refused = why
    return refuse


def lower_region(lowerer, fn, arg_trees, arg_avals, node, what):
    """``fn`` lowered on its own for these arguments, and its closure arrays as values of the
    enclosing lowering (operands that follow the arguments). Refused, at ``node``, for a
    nested ``def``/``lambda`` (it would close over the enclosing function's arrays) and for
    a function that makes call-time actions (random draws, I/O)."""
    import inspect
    from ..errors import FenceError
    from .lower import lower_function
    from .values import LocalFunction
    src = lowerer.src
    if isinstance(fn, LocalFunction) or not inspect.isfunction(fn):
        raise src.error(node, f"{what} must be a function defined with `def` outside the differentiated "
                              f"function; pass the arrays it needs as arguments")
    try:
        lowered = lower_function(fn, arg_trees=list(arg_trees), arg_avals=list(arg_avals))
    except FenceError as e:
        from .structure import ShapeNeeded
        # the region needs a rank or a size its arguments do not carry yet (np.dot of arguments of
        # unknown rank): specialise the enclosing function, which gives the region concrete avals
        cls = ShapeNeeded if isinstance(e, ShapeNeeded) and lowerer.ctx.specialisable else FenceError
        raise src.error(node, f"{what} `{fn.__name__}` could not be lowered: {e}", cls) from None
    closure = []
    for k, getter in enumerate(lowered.closure_getters):
        if getattr(getter, "__tlaloc_call_time__", False):
            raise src.error(node, f"{what} `{fn.__name__}` makes a call-time action (a random draw, I/O, a side "
                                  f"effect); it must be a function of its arguments")
        closure.append(lowerer._external(getter(), ("region", id(fn), id(getter)), getter,
                                         f"{fn.__name__}_closure{k}"))
    lowerer.ctx.guards.extend(lowered.guards)
    return lowered, closure
