"""The coarsened nodes of custom derivative rules (``tlaloc._ad.custom``) and their
reverse and forward rules.

A call of a custom function inside a transformed function is one node,
``custom_vjp_call``, ``custom_jvp_call`` or ``custom_vjp_jvp_call``, whose params
hold the lowered graphs of ``fun``, ``fwd``, ``bwd`` and ``jvp`` (``_ROLES``) and
whose inputs are the arguments, then each region's closure inputs. Its
``NodeRule``s: reverse mode inlines ``fwd`` and, in the backward sweep, ``bwd``
(a vjp-only rule keeps them as ``custom_vjp_rule`` nodes, which refuse forward
mode); forward mode inlines ``jvp``; reverse mode over a jvp-only rule transposes
``jvp``.
"""
from __future__ import annotations

import numpy as np

from .._core.builder import Value
from .._core.interpreter import eval_graph
from .._core.passes import inline
from .._core.primitive import Primitive
from .._prims.broadcasting import broadcast_like, zeros_like
from .._prims.checks import check_cotangent
from ..errors import NoRuleError
from .reverse import forward_sweep

_ROLES = ("fun", "fwd", "bwd", "jvp")


# -- the coarsened node --------------------------------------------------------------------------

class _RegionCall(Primitive):
    """A call whose meaning is a region: its outputs are that region's output avals."""
    region_param = "fun"

    def abstract_eval(self, *avals, **params):
        return tuple(o.aval for o in params[self.region_param].outputs)


def _call_impl(*ins, fun, fwd, bwd, jvp, n_args, n_closure, bwd_mask, name, where):
    return tuple(eval_graph(fun, *ins[:n_args + n_closure[0]]))


def _declare_call(name):
    p = _RegionCall(name, impl=_call_impl, hlo=None, multiple_results=True,
                    shape_rule=lambda *a, **k: None, dtype_rule=lambda *a, **k: None)
    p.inline_region = "fun"
    p.reverse_rule = _call_reverse
    p.forward_rule = _call_forward
    return p


def _closure_slices(params):
    """Where each region's closure inputs sit among the node's inputs."""
    out, k = {}, params["n_args"]
    for role, n in zip(_ROLES, params["n_closure"]):
        out[role] = slice(k, k + n)
        k += n
    return out


def _fill(gs, like):
    return [g if g is not None else zeros_like(x) for g, x in zip(gs, like)]


def _is_float(x) -> bool:
    dt = getattr(getattr(x, "aval", None), "dtype", None) if type(x) is Value else np.asarray(x).dtype
    return dt is None or dt.kind == "f"


def _call_reverse(node, ins):
    p = dict(node.params)
    n_args, cl = p["n_args"], _closure_slices(p)
    args = list(ins[:n_args])
    n_in = len(ins)
    if p["fwd"] is None:                       # jvp-only: transpose the jvp rule
        outs = node.prim.bind(*ins, **p)

        def backward_jvp(gs):
            if all(g is None for g in gs):
                return [None] * n_in
            zeros = [zeros_like(a) for a in args]
            _, back = forward_sweep(p["jvp"], args + zeros + list(ins[cl["jvp"]]))
            bars = back([None] * len(outs) + list(gs))[n_args:2 * n_args]
            bars = [b if _is_float(a) else None for a, b in zip(args, bars)]
            return bars + [None] * (n_in - n_args)

        return tuple(outs), backward_jvp
    n_out = len(p["fun"].outputs)
    if p["jvp"] is None:                       # vjp-only: keep fwd/bwd coarsened (forward mode refuses)
        res = rule_p.bind(*args, *ins[cl["fwd"]], body=p["fwd"], name=p["name"], where=p["where"])
    else:
        res = inline(p["fwd"], args + list(ins[cl["fwd"]]))
    outs, residuals = list(res[:n_out]), list(res[n_out:])

    def backward(gs):
        if all(g is None for g in gs):
            return [None] * n_in
        bwd_ins = residuals + _fill(gs, outs) + list(ins[cl["bwd"]])
        if p["jvp"] is None:
            bars = rule_p.bind(*bwd_ins, body=p["bwd"], name=p["name"], where=p["where"])
        else:
            bars = inline(p["bwd"], bwd_ins)
        it = iter(bars)
        bars = [next(it) if m else None for m in p["bwd_mask"]]
        bars = [b if b is None or not _is_float(a) else check_cotangent(b, a, p["name"], k)   # at run time
                for k, (b, a) in enumerate(zip(bars, args))]
        bars = [b if type(b) is Value or (b is not None and np.any(np.asarray(b) != 0)) else None
                for b in bars]
        return bars + [None] * (n_in - n_args)

    return tuple(outs), backward


def _call_forward(node, ins, tins):
    p = dict(node.params)
    n_args, cl = p["n_args"], _closure_slices(p)
    if all(t is None for t in tins[:n_args]):
        outs = node.prim.bind(*ins, **p)
        return tuple(outs), (None,) * len(outs)
    if p["jvp"] is None:
        raise _no_forward_rule(p["name"], p["where"], node.loc)
    args = list(ins[:n_args])
    tans = _fill(tins[:n_args], args)
    res = inline(p["jvp"], args + tans + list(ins[cl["jvp"]]))
    n_out = len(p["fun"].outputs)
    outs, touts = res[:n_out], res[n_out:]
    return tuple(outs), tuple(_tangent(t, o) for t, o in zip(touts, outs))


def _tangent(t, like):
    if type(t) is Value:
        return t
    if t is None or not np.any(np.asarray(t) != 0):
        return None
    return broadcast_like(t, like)


def _no_forward_rule(name, where, loc):
    used = f", used at {loc}" if loc is not None else ""
    return NoRuleError(
        f"no JVP rule for the custom_vjp function `{name}` (defined at {where}{used}): it defines only a "
        f"reverse rule (defvjp), so forward mode (jvp, jacfwd, hessian) cannot use it. Add a forward rule "
        f"with `{name}.defjvp(rule)` (or define it with tl.custom_vjp_jvp), or use grad/vjp/jacrev")


custom_vjp_call_p = _declare_call("custom_vjp_call")
custom_jvp_call_p = _declare_call("custom_jvp_call")
custom_vjp_jvp_call_p = _declare_call("custom_vjp_jvp_call")


# -- the fwd / bwd halves of a vjp-only rule, kept coarsened ---------------------------------------

class _RuleHalf(_RegionCall):
    region_param = "body"


def _half_reverse(node, ins):
    outs, backward = forward_sweep(node.params["body"], list(ins))
    return tuple(outs), backward


def _half_forward(node, ins, tins):
    if all(t is None for t in tins):
        outs = node.prim.bind(*ins, **dict(node.params))
        return tuple(outs), (None,) * len(outs)
    raise _no_forward_rule(node.params["name"], node.params["where"], node.loc)


rule_p = _RuleHalf("custom_vjp_rule", impl=lambda *ins, body, name, where: tuple(eval_graph(body, *ins)),
                   hlo=None, multiple_results=True, shape_rule=lambda *a, **k: None,
                   dtype_rule=lambda *a, **k: None)
rule_p.inline_region = "body"
rule_p.reverse_rule = _half_reverse
rule_p.forward_rule = _half_forward
