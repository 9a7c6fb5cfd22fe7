"""Custom-rule calls under batching (``vmap``). (Their specialisation for ``jit`` is
in ``tlaloc._core.specialize_control``.)

* Batching keeps the call coarsened: ``fun``, ``fwd``, ``bwd`` and ``jvp`` are
  each batched (every output batched at 0), so a rule still wins when the
  batched function is differentiated afterwards. ``bwd`` sums the cotangent of
  an unbatched argument over the batch (one cotangent for the value every
  example shares). The halves of a vjp-only rule (``custom_vjp_rule``) batch
  their body and stay marked.
"""
from __future__ import annotations

from .._prims.reductions import reduce_sum
from .batching import aval_of, batch_inline, batched, build_region, region, to_front
from .custom_call import _closure_slices, custom_jvp_call_p, custom_vjp_call_p, custom_vjp_jvp_call_p, rule_p

_CALLS = (custom_vjp_call_p, custom_jvp_call_p, custom_vjp_jvp_call_p)


def _batch_call(args, dims, **p):
    args = [to_front(a, d) for a, d in zip(args, dims)]
    dims = [None if d is None else 0 for d in dims]
    avals = [aval_of(a) for a in args]
    n, cl = p["n_args"], _closure_slices(p)
    n_out = len(p["fun"].outputs)

    def part(role, lead_avals, lead_dims):
        g = p[role]
        ins_avals = lead_avals + avals[cl[role]]
        out, _ = region(g, ins_avals, lead_dims + dims[cl[role]], want=[0] * len(g.outputs), name=g.name)
        return out

    new = dict(p)
    new["fun"] = part("fun", avals[:n], dims[:n])
    if p["fwd"] is not None:
        new["fwd"] = part("fwd", avals[:n], dims[:n])
        res_avals = [o.aval for o in new["fwd"].outputs[n_out:]]
        out_avals = [o.aval for o in new["fun"].outputs]
        new["bwd"] = _batch_bwd(p, res_avals + out_avals + avals[cl["bwd"]], dims, cl)
    if p["jvp"] is not None:
        new["jvp"] = part("jvp", avals[:n] * 2, dims[:n] * 2)
    outs = _prim_of(p).bind(*args, **new)
    return tuple(outs), (0,) * len(outs)


def _batch_bwd(p, in_avals, dims, cl):
    """bwd batched: residuals and cotangents arrive batched at 0; an unbatched argument's
    cotangent is summed over the batch."""
    bwd = p["bwd"]
    n_lead = len(bwd.inputs) - (cl["bwd"].stop - cl["bwd"].start)
    arg_dims = [d for d, m in zip(dims[:p["n_args"]], p["bwd_mask"]) if m]

    def fill(ins):
        pairs = batch_inline(bwd, ins, [0] * n_lead + dims[cl["bwd"]])
        out = []
        for (v, d), ad in zip(pairs, arg_dims):
            v = batched(v, d)
            out.append((v, 0) if ad is not None else (reduce_sum(v, (0,)), None))
        return out
    g, _ = build_region(in_avals, [v.hint for v in bwd.inputs], fill, name=bwd.name)
    return g


def _prim_of(p):
    if p["fwd"] is not None and p["jvp"] is not None:
        return custom_vjp_jvp_call_p
    return custom_vjp_call_p if p["fwd"] is not None else custom_jvp_call_p


def _batch_half(args, dims, *, body, name, where):
    g, out_dims = region(body, [aval_of(a) for a in args], list(dims), name=body.name)
    outs = rule_p.bind(*args, body=g, name=name, where=where)
    return tuple(outs), tuple(out_dims)


for _p in _CALLS:
    _p.batch = _batch_call
rule_p.batch = _batch_half

