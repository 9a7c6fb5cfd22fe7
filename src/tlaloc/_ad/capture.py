"""``tl.capture``: trace model code once per bucket of input shapes, differentiate
it with the same reverse transform as ``grad``, and run the derivative.

    step = tl.capture(model, example_batch, loss_fn)     # loss_fn(model, batch) -> scalar
    loss, grads = step.run(model, batch)                  # grads: same structure as model
    print(tl.source(step))                                # the derivative, as Python

The model is a pytree (frozen dataclasses, tuples, dicts) of arrays. Model
code runs under the tracing front end: Python control flow on static values
unrolls; on array values it must use ``tl.cond``/``tl.while_loop``/``tl.scan``.
Each new bucket (argument structure, shapes and dtypes) is traced and
compiled once; ``TLALOC_LOG_COMPILES=1`` logs why.

With a ``mesh`` the step is one SPMD program over the mesh's devices (every
process's, in a multi-process run: ``tlaloc.distributed``), as ``tl.jit(...,
mesh=...)`` compiles: ``in_shardings=(P(), P("data"))`` splits the batch, and
XLA's partitioner all-reduces the gradients inside the program.
"""
from __future__ import annotations

import logging

import numpy as np

from .. import _pytree
from .._core.aval import AbstractValue
from .._core.builder import Builder
from .._frontend.lower import LoweredFunction
from ..errors import ArgumentError
from .api import _ReverseTransform

log = logging.getLogger("tlaloc.compile")


def _avals(leaves):
    """Each leaf's dtype and (global) shape, without reading a device array's values."""
    out = []
    for x in leaves:
        a = x if hasattr(x, "shape") and hasattr(x, "dtype") else np.asarray(x)
        out.append(AbstractValue(np.dtype(a.dtype), tuple(a.shape)))
    return out


def _program_shardings(mesh, in_shardings, trees, graph):
    """The ``tlaloc.sharding.Shardings`` of a captured bucket: inputs as ``in_shardings`` says
    (``(model spec, batch spec)``, each a pytree prefix; ``None``: replicated), the loss
    replicated, each gradient sharded as its parameter."""
    from .. import sharding as shd
    model_specs = shd.expand(in_shardings[0], trees[0], "capture: in_shardings[0] (model)")
    specs = model_specs + shd.expand(in_shardings[1], trees[1], "capture: in_shardings[1] (batch)")
    ins = []
    for k, v in enumerate(graph.inputs):
        shape = tuple(v.aval.shape)
        dims = shd.resolve(mesh, specs[k] if k < len(specs) else None, shape, None,
                           f"capture: in_shardings (input `{v.hint or k}`)")
        ins.append(tuple(() for _ in shape) if dims is None else dims)
    outs = [()]                                          # the loss, a scalar: replicated
    for k, o in enumerate(graph.outputs[1:]):
        shape = tuple(o.aval.shape)
        dims = shd.resolve(mesh, model_specs[k], shape, None, f"capture: gradient {k}")
        outs.append(tuple(() for _ in shape) if dims is None else dims)
    return shd.Shardings(mesh, tuple(ins), tuple(outs))


class Step(_ReverseTransform):
    """A captured training step: ``run(model, batch) -> (loss, grads)``."""

    def __init__(self, model, example_inputs, loss_fn, backend="xla", mesh=None, in_shardings=None):
        from ..sharding import Mesh, PartitionSpec
        if backend not in ("xla", "interpreter"):
            raise ArgumentError(f"capture: backend must be 'xla' or 'interpreter', got {backend!r}")
        if mesh is not None and not isinstance(mesh, Mesh):
            raise ArgumentError(f"capture: mesh must be a tl.sharding.Mesh, got {type(mesh).__name__}")
        if mesh is None and in_shardings is not None:
            raise ArgumentError("capture: in_shardings name mesh axes; pass the mesh too: "
                                "tl.capture(model, batch, loss_fn, mesh=tl.sharding.Mesh({'data': 2}), "
                                "in_shardings=(P(), P('data')))")
        if mesh is not None and backend == "interpreter":
            raise ArgumentError("capture: a mesh needs backend='xla' (the interpreter runs on one device)")
        self.loss_fn = loss_fn
        self.backend = backend
        if in_shardings is None:
            in_shardings = (None, None)
        if not (isinstance(in_shardings, (tuple, list)) and not isinstance(in_shardings, PartitionSpec)
                and len(in_shardings) == 2):
            raise ArgumentError(f"capture: in_shardings must be a pair (model shardings, batch shardings), e.g. "
                                f"(P(), P('data')) for data parallel; got {in_shardings!r}")
        self.mesh, self.in_shardings = mesh, tuple(in_shardings)
        self._example = (model, example_inputs)
        self._jitted = None
        _ReverseTransform.__init__(self, loss_fn, argnums=0, has_aux=False, with_value=True)

    def _entry(self, arg_trees, arg_avals=None):
        if arg_trees is None:                      # the example bucket, built at capture time
            arg_trees, arg_avals, _ = self._bucket(*self._example)
        return super()._entry(arg_trees, arg_avals)

    def primal_lowering(self, arg_trees, arg_avals=None):
        if arg_avals is None:
            raise ArgumentError("capture: a bucket needs concrete shapes")
        tm, tb = arg_trees
        b = Builder(name=getattr(self.loss_fn, "__name__", "loss"))
        with b.active():
            ins = [b.new_input(a, f"p{k}") for k, a in enumerate(arg_avals)]
            nm = tm.num_leaves
            model = _pytree.unflatten(tm, ins[:nm])
            batch = _pytree.unflatten(tb, ins[nm:])
            loss = self.loss_fn(model, batch)
            graph = b.finish([loss], b.name)
        log.info("capture: traced %s for a new bucket %s", b.name,
                 [tuple(a.shape) for a in arg_avals])
        return LoweredFunction(graph, self.loss_fn, ["model", "batch"], [tm, tb], [],
                               _pytree.TreeDef("leaf"), None)

    def _bucket(self, model, batch):
        (lm, tm), (lb, tb) = _pytree.flatten(model), _pytree.flatten(batch)
        return [tm, tb], _avals(lm) + _avals(lb), lm + lb

    def run(self, model, batch):
        """Loss and gradients (with ``model``'s structure) for one batch.

        With ``backend="xla"`` each bucket is specialised, emitted as StableHLO and
        compiled once (outputs are device arrays; ``np.asarray`` reads them). With a
        ``mesh``, ``model`` and ``batch`` may be global arrays
        (``tlaloc.distributed.global_array``); the loss comes back replicated and each
        gradient sharded as its parameter."""
        trees, avals, leaves = self._bucket(model, batch)
        entry = self._entry(trees, avals)
        compiled = self._compiled(entry, trees, avals) if self.backend == "xla" else None
        if compiled is not None:
            outs = compiled.call_flat(list(leaves))
        else:
            outs = entry["fn"](*[np.asarray(x) for x in leaves])
        loss, grads = outs[0], list(outs[1:])
        return loss, _pytree.unflatten(trees[0], grads)

    def _compiled(self, entry, trees, avals):
        """The bucket's XLA executable, or None when the step holds a primitive that
        is not compiled (e.g. a run-time-sized ``arange``): it then runs as Python, and
        the reason is logged once, as a warning. Random sampling compiles."""
        if "xla" in entry:
            return entry["xla"]
        from ..errors import NoRuleError
        try:
            return self._compile(entry, trees, avals)
        except NoRuleError as e:
            if self.mesh is not None:
                raise NoRuleError(f"capture: {self.name} with a mesh must compile, but: {e}") from None
            log.warning("capture: %s runs uncompiled (interpreter) for this bucket: %s", self.name, e)
            entry["xla"] = None
            return None

    def _compile(self, entry, trees, avals):
        compiled = entry.get("xla")
        if compiled is None:
            from .._core.specialize import specialize
            from .._jit.stages import Lowered
            from .._runtime.pjrt import has_platform
            graph = specialize(entry["graphs"][0][0], avals)
            platform = "cuda" if has_platform("cuda") else "cpu"
            shardings = None if self.mesh is None else _program_shardings(self.mesh, self.in_shardings, trees, graph)
            log.info("capture: compiling %s for a new bucket %s", self.name, [tuple(a.shape) for a in avals])
            compiled = entry["xla"] = Lowered(graph, None, [], platform, name=self.name, shardings=shardings).compile()
        return compiled

    def __call__(self, model, batch):
        return self.run(model, batch)


def capture(model, example_inputs, loss_fn, backend="xla", *, mesh=None, in_shardings=None):
    """Trace ``loss_fn(model, example_inputs)`` and build its reverse-mode derivative.

    Args:
      model: a pytree of arrays (e.g. a ``tl.nn`` module).
      example_inputs: a pytree of arrays fixing the first bucket of shapes.
      loss_fn: ``(model, batch) -> scalar``.
      backend: ``"xla"`` (compiled through ``tl.jit``'s path) or ``"interpreter"``
        (the rendered Python).
      mesh: a ``tl.sharding.Mesh``: the step is partitioned over its devices (across
        processes after ``tlaloc.distributed.initialize``), as with ``tl.jit(mesh=...)``.
      in_shardings: with ``mesh``, ``(model shardings, batch shardings)``, each a
        ``PartitionSpec``, ``None`` (replicated) or a pytree prefix of it:
        ``(P(), P("data"))`` replicates the model and splits the batch's first axis
        (data parallel). Gradients are sharded as their parameters; the loss replicated.

    Returns:
      A ``Step`` with ``run(model, batch) -> (loss, grads)``.

    Raises:
      ArgumentError: an unknown ``backend``; ``in_shardings`` without ``mesh``, or not a
        pair that fits the model and batch; a mesh with ``backend="interpreter"``.
      NoRuleError: with a mesh, a step holding a primitive that does not compile.
    """
    return Step(model, example_inputs, loss_fn, backend=backend, mesh=mesh, in_shardings=in_shardings)
