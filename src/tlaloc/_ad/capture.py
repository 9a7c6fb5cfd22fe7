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
    out = []
    for x in leaves:
        a = np.asarray(x)
        out.append(AbstractValue(a.dtype, tuple(a.shape)))
    return out


class Step(_ReverseTransform):
    """A captured training step: ``run(model, batch) -> (loss, grads)``."""

    def __init__(self, model, example_inputs, loss_fn, backend="xla"):
        if backend not in ("xla", "interpreter"):
            raise ArgumentError(f"capture: backend must be 'xla' or 'interpreter', got {backend!r}")
        self.loss_fn = loss_fn
        self.backend = backend
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
        compiled once (outputs are device arrays; ``np.asarray`` reads them)."""
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
            log.info("capture: compiling %s for a new bucket %s", self.name, [tuple(a.shape) for a in avals])
            compiled = entry["xla"] = Lowered(graph, None, [], platform, name=self.name).compile()
        return compiled

    def __call__(self, model, batch):
        return self.run(model, batch)


def capture(model, example_inputs, loss_fn, backend="xla"):
    """Trace ``loss_fn(model, example_inputs)`` and build its reverse-mode derivative.

    Args:
      model: a pytree of arrays (e.g. a ``tl.nn`` module).
      example_inputs: a pytree of arrays fixing the first bucket of shapes.
      loss_fn: ``(model, batch) -> scalar``.
      backend: ``"xla"`` (compiled through ``tl.jit``'s path) or ``"interpreter"``
        (the rendered Python).

    Returns:
      A ``Step`` with ``run(model, batch) -> (loss, grads)``.
    """
    return Step(model, example_inputs, loss_fn, backend=backend)
