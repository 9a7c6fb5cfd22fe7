"""The ``mosaic_kernel`` primitive: a DXIR op holding a Pallas kernel's Mosaic payload.

==================  ===========================================================
rule                behaviour
==================  ===========================================================
shape / dtype       from ``jax.eval_shape`` of the kernel (concrete operand avals)
impl (NumPy)        runs ``reference`` when ``reference_fallback=True``; else
                    ``NoRuleError`` naming the kernel: it runs only on TPU
StableHLO lowering  for TPU: ``stablehlo.custom_call @tpu_custom_call`` with the
                    payload (cached, see ``payload.py``); for another target the
                    reference program when allowed, else ``NoRuleError``
VJP / JVP / batch   none: the transforms refuse ``mosaic_kernel`` by name; wrap it
                    in a custom rule to differentiate through it
==================  ===========================================================
"""
from __future__ import annotations

import numpy as np

from ..._core.primitive import REGISTRY, Primitive
from ...errors import ArgumentError, NoRuleError
from .payload import payload as _export_payload


def _who(params) -> str:
    k = params["kernel"]
    return f"`mosaic_kernel` (Pallas kernel `{getattr(k, '__name__', k)}`)"


def _impl(*arrays, kernel, reference, reference_fallback, static_args, kwargs, num_outputs):
    if not reference_fallback:
        raise NoRuleError(f"{_who({'kernel': kernel})} runs only on TPU; pass reference_fallback=True to run "
                          f"its reference program on other targets")
    out = reference(*arrays)
    out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if len(out) != num_outputs:
        raise ArgumentError(f"the reference of {_who({'kernel': kernel})} returned {len(out)} arrays; the "
                            f"kernel has {num_outputs} outputs")
    return tuple(np.asarray(o) for o in out)


def _out_avals(avals, kernel, static_args, kwargs, num_outputs):
    if not all(a.is_concrete for a in avals):
        return None
    import jax
    structs = [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) for a in avals]
    out = jax.eval_shape(lambda *xs: kernel(*xs, *static_args, **dict(kwargs)), *structs)
    leaves = jax.tree_util.tree_leaves(out)
    return [(tuple(o.shape), np.dtype(o.dtype)) for o in leaves]


def _shape_rule(*avals, kernel, num_outputs, static_args, kwargs, **_):
    outs = _out_avals(avals, kernel, static_args, kwargs, num_outputs)
    return tuple(s for s, _ in outs) if outs else (None,) * num_outputs


def _dtype_rule(*avals, kernel, num_outputs, static_args, kwargs, **_):
    outs = _out_avals(avals, kernel, static_args, kwargs, num_outputs)
    return tuple(d for _, d in outs) if outs else (None,) * num_outputs


mosaic_kernel_p = Primitive("mosaic_kernel", impl=_impl, shape_rule=_shape_rule, dtype_rule=_dtype_rule,
                            hlo="stablehlo.custom_call", multiple_results=True)
# A kernel op, not one of the core primitives (DESIGN §1 keeps that set small): it stays out of
# the core table, whose coverage tests expect a batching rule and a lowering for every entry.
# Transforms read rules off the node's primitive, so they still refuse it by name.
REGISTRY.pop(mosaic_kernel_p.name, None)
KERNEL_OPS = {mosaic_kernel_p.name: mosaic_kernel_p}


def lower(em, node, vals, target: str = "tpu"):
    """Emit ``node`` with the StableHLO emitter ``em``: the TPU custom call, or on
    another target the reference program (when allowed)."""
    p = node.params
    if target != "tpu":
        if not p["reference_fallback"]:
            raise NoRuleError(f"no {target} lowering for {_who(p)}: it lowers only for TPU; pass "
                              f"reference_fallback=True to lower its reference program instead")
        return _lower_reference(em, node, vals)
    avals = [(v.shape, v.dtype) for v in vals]
    pl = _export_payload(p["kernel"], avals, p["static_args"], dict(p["kwargs"]))
    attrs = dict(pl.attrs)
    return em.op("stablehlo.custom_call", list(vals), [(np.dtype(d), tuple(s)) for s, d in pl.out_avals],
                 attrs=attrs)


def _lower_reference(em, node, vals):
    from ..._core.builder import Builder
    from ..._core.aval import AbstractValue
    b = Builder(name="reference")
    with b.active():
        ins = [b.new_input(AbstractValue(v.dtype, v.shape)) for v in vals]
        out = node.params["reference"](*ins)
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        graph = b.finish(out)
    return em.lower_graph(graph, list(vals))


mosaic_kernel_p.lower = lambda em, node, *vals: lower(em, node, vals, getattr(em, "target", "tpu"))


def mosaic_kernel(operands, kernel, reference, reference_fallback: bool = False, *, static_args=(),
                  kwargs=None, num_outputs: int = 1):
    """Apply Pallas kernel ``kernel`` to ``operands`` as one DXIR op.

    Args:
      operands: the arrays (NumPy, or symbolic values inside a transform) the kernel takes.
      kernel: a function ``kernel(*operands, *static_args, **kwargs)`` that is a single
        ``pallas_call`` (its TPU lowering is exported with jax.export and cached).
      reference: the same computation in ``tlaloc.numpy``; it runs where the kernel cannot.
      reference_fallback: allow ``reference`` on targets other than TPU (the NumPy
        interpreter included); otherwise those refuse the op by name.
      static_args, kwargs: static arguments of ``kernel`` (part of the payload cache key).
      num_outputs: how many arrays the kernel returns (needed only when operand shapes
        are not known yet).
    Returns:
      The output array, or a tuple when the kernel has several.
    """
    from ..._core.aval import of
    kwargs = tuple(sorted((kwargs or {}).items()))
    known = [getattr(x, "aval", None) or of(x) for x in operands]
    outs = _out_avals(known, kernel, tuple(static_args), kwargs, num_outputs)
    n = len(outs) if outs else num_outputs
    res = mosaic_kernel_p.bind(*operands, kernel=kernel, reference=reference,
                               reference_fallback=bool(reference_fallback), static_args=tuple(static_args),
                               kwargs=kwargs, num_outputs=n)
    return res[0] if n == 1 else tuple(res)
