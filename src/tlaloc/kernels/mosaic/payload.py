"""A Pallas kernel's serialized Mosaic payload, exported on any machine, cached.

``payload(kernel, avals, static_args, kwargs)`` lowers ``kernel`` for TPU with
``jax.export.export(jax.jit(...), platforms=["tpu"])`` (this works without a
TPU) and keeps what the one ``stablehlo.custom_call @tpu_custom_call`` in the
result carries: its attributes, verbatim (the ``backend_config`` holds the
base64 Mosaic body), and its result types.

The cache key is what identifies a kernel: the default matmul precision, the
kernel function, the static args, the operand shapes and dtypes and the sorted
kwargs (``repr``-ed, so kwargs must be hashable values, never arrays). Hits and
misses are counted, and the reason of each miss is kept in ``CACHE.log``.
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np

from ...errors import ArgumentError

log = logging.getLogger("tlaloc.kernels.mosaic")


@dataclasses.dataclass(frozen=True)
class MosaicPayload:
    """The custom call jax.export wrote for one (kernel, shapes) pair.

    attrs: attribute name -> its MLIR text, in jax's order (``backend_config``,
    ``call_target_name``, ``kernel_name``, ``operand_layouts``, ``result_layouts`` ...).
    out_avals: ``((shape, dtype), ...)`` of the results.
    """
    attrs: tuple
    in_avals: tuple
    out_avals: tuple
    backend_config: str = ""     # the payload: JSON holding the base64 Mosaic module

    def attr(self, name: str):
        return dict(self.attrs).get(name)


class PayloadCache:
    def __init__(self):
        self.entries: dict = {}
        self.hits = 0
        self.misses = 0
        self.log: list = []

    def clear(self):
        self.entries.clear()
        self.hits = self.misses = 0
        self.log.clear()

    def stats(self) -> dict:
        return {"entries": len(self.entries), "hits": self.hits, "misses": self.misses}


CACHE = PayloadCache()


def cache_key(kernel, avals, static_args=(), kwargs=None):
    import jax
    kwargs = kwargs or {}
    for k, v in kwargs.items():
        if isinstance(v, np.ndarray) or hasattr(v, "__jax_array__"):
            raise ArgumentError(f"kwarg {k!r} of a Mosaic kernel is an array; kernel kwargs are static "
                                f"values (pass arrays as operands)")
    shapes = tuple((tuple(int(d) for d in s), np.dtype(d).name) for s, d in avals)
    return (jax.config.jax_default_matmul_precision, kernel, tuple(static_args), shapes,
            repr(sorted(kwargs.items())).encode())


def payload(kernel, avals, static_args=(), kwargs=None) -> MosaicPayload:
    """The (cached) Mosaic payload of ``kernel(*operands, *static_args, **kwargs)``
    for operands of ``avals`` (``[(shape, dtype)]``)."""
    key = cache_key(kernel, avals, static_args, kwargs)
    hit = CACHE.entries.get(key)
    if hit is not None:
        CACHE.hits += 1
        return hit
    CACHE.misses += 1
    reason = _miss_reason(key)
    CACHE.log.append((getattr(kernel, "__name__", repr(kernel)), reason))
    log.info("mosaic payload for %s: export (%s)", getattr(kernel, "__name__", kernel), reason)
    out = _export(kernel, avals, tuple(static_args), dict(kwargs or {}))
    CACHE.entries[key] = out
    return out


def _miss_reason(key) -> str:
    same = [k for k in CACHE.entries if k[1] is key[1]]
    if not same:
        return "first use of this kernel"
    for k in same:
        if k[3] != key[3]:
            return f"new operand shapes/dtypes {key[3]}"
        if k[2] != key[2] or k[4] != key[4]:
            return "new static args or kwargs"
        if k[0] != key[0]:
            return f"new default matmul precision {key[0]}"
    return "new key"


def _export(kernel, avals, static_args, kwargs) -> MosaicPayload:
    import jax
    n = len(avals)
    structs = [jax.ShapeDtypeStruct(tuple(s), np.dtype(d)) for s, d in avals]

    def fn(*args):
        return kernel(*args[:n], *static_args, **kwargs)
    exported = jax.export.export(jax.jit(fn), platforms=["tpu"])(*structs)
    return extract(exported.mlir_module(), avals)


def extract(module_text: str, in_avals) -> MosaicPayload:
    """The single ``tpu_custom_call`` of an exported module, which must be all its ``main`` does."""
    from jaxlib.mlir import ir
    from ..._render.stablehlo import mlir_context
    with mlir_context():
        module = ir.Module.parse(module_text)
        main = next(op for op in module.body.operations
                    if op.operation.name == "func.func" and str(op.attributes["sym_name"]) == '"main"')
        ops = list(main.regions[0].blocks[0].operations)
        calls = [o for o in ops if o.operation.name == "stablehlo.custom_call"]
        body = [o for o in ops if o.operation.name != "func.return"]
        if len(calls) != 1 or len(body) != 1 or str(calls[0].attributes["call_target_name"]) != '"tpu_custom_call"':
            raise ArgumentError(
                "a Mosaic kernel must be a single pallas_call applied to its operands; the exported program "
                f"has {[o.operation.name for o in body]} (move reshapes and other ops out of the kernel)")
        call = calls[0]
        args = [v.arg_number if isinstance(v.owner, ir.Block) else -1 for v in call.operands]
        if args != list(range(len(in_avals))):
            raise ArgumentError("the pallas_call must take the kernel's operands in order, unchanged")
        attrs = tuple((name, str(call.attributes[name])) for name in
                      [call.attributes[i].name for i in range(len(call.attributes))])
        outs = tuple(_aval_of(r.type) for r in call.results)
        config = ir.StringAttr(call.attributes["backend_config"]).value
    return MosaicPayload(attrs, tuple((tuple(s), np.dtype(d).name) for s, d in in_avals), outs, config)


def _aval_of(t):
    from jaxlib.mlir import ir
    rt = ir.RankedTensorType(t)
    et = str(rt.element_type)
    dt = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16", "i32": "int32",
          "i64": "int64", "i8": "int8", "i1": "bool", "ui32": "uint32", "ui8": "uint8"}[et]
    return (tuple(rt.shape), dt)
