"""``tl.jit``: compile a function (or a transformed one, ``tl.jit(tl.grad(f))``)
through DXIR → specialisation → StableHLO → XLA (PJRT) or IREE.

    f_fast = tl.jit(f)                     # compiles at the first call per signature
    f_fast(x, w)                           # device arrays out (np.asarray reads them)
    tl.jit(f).lower(x, w).as_text()        # the StableHLO module
    tl.jit(f).lower(x, w).compile()        # ahead of time
    tl.jit(step, donate_argnums=(0,))      # updates argument 0's buffer in place
    tl.jit(f, backend="iree")              # the same StableHLO through IREE (llvm-cpu, local-sync)
    tl.jit(step, mesh=mesh, in_shardings=(P(None, "model"), P("data", None)))   # SPMD (tlaloc.sharding)

Transforms compile too: ``tl.grad``/``tl.value_and_grad``, ``tl.jvp``,
``tl.vmap``, and ``tl.jacfwd``/``tl.jacrev``/``tl.hessian`` (as a vmap over the
basis; see ``tlaloc._jit.transformed``).

One compile per signature: argument structure, shapes and dtypes, and the
values of ``static_argnums``; set ``TLALOC_LOG_COMPILES=1`` to log each compile
with its reason (new shape / new dtype / new static value). A call whose
signature was seen before takes the hit path (``tlaloc._jit.dispatch``): one walk
over the arguments, no TreeDefs, avals or argument checks (they passed for that
signature), and on XLA jaxlib's C++ dispatch moves NumPy arguments to the device,
runs the program and wraps its outputs, as ``jax.jit`` does.

The pipeline, and where later stages plug in:

    graph (DXIR, definition time)
      → specialize(graph, avals)                  tlaloc._core.specialize
      → coarsen(graph) → decompose(graph, target) tlaloc._recognize (claimed ops stay, as custom_call)
      → emit_module(graph, donate, shardings)     tlaloc._render.stablehlo  (+ Shardy attributes)
      → Executable(program)                       tlaloc._runtime.pjrt (one device, or SPMD) | .iree
"""
from __future__ import annotations

import functools
import logging
import os
import time

import numpy as np

from .. import _pytree, _typecheck
from .. import sharding as _sharding  # noqa: F401  (makes ``tl.sharding`` reachable once ``tl.jit`` is)
from .._ad.call_checks import refuse_array_subclasses
from .._core.interpreter import eval_graph
from .._core.specialize import specialize
from .._core.specialize_control import while_capacity
from .._frontend.call_binding import bind_keywords, check_positional_count, require_callable, static_positions
from .._frontend.structure import ShapeNeeded
from ..errors import ArgumentError, FenceError, TlalocError
from . import bounded, bounded_export, dispatch, residuals
from .lowering import Source, source_for
from .shardings import program_shardings
from .signature import array_types, as_tuple, compile_reason, iree_array_types, leaf_aval, split_args
from .stages import Compiled, Lowered
from .transformed import shape_dependent

log = logging.getLogger("tlaloc.jit")
_LEAF = _pytree.TreeDef("leaf")
_ARRAY_TYPES = array_types()
_BACKENDS = ("xla", "iree", "interpreter")


class Jitted:
    """The callable ``tl.jit`` returns; see the module docstring."""

    def __init__(self, fun, backend="xla", static_argnums=(), donate_argnums=(), platform=None, mesh=None,
                 in_shardings=None, out_shardings=None, recognize=True, buckets=None, static_argnames=()):
        require_callable("jit", fun)
        if backend not in _BACKENDS:
            raise ArgumentError(f"jit: backend must be one of {_BACKENDS}, got {backend!r}")
        if backend == "iree":
            from .._runtime.iree import _iree
            _iree()                         # refuse now when IREE is not installed
            if platform not in (None, "cpu"):
                raise ArgumentError(f"jit: backend='iree' runs on the CPU (llvm-cpu), not platform={platform!r}")
        self.fun = fun
        self.backend = backend
        self.platform = platform            # None: "cuda" where that PJRT backend exists, else "cpu"
        self.static_argnums = as_tuple(static_argnums, "static_argnums")
        # names -> positions as call_binding binds them; a keyword-only one exists only where the call
        # passes keyword-only arguments (else it keeps its default, folded), hence kept apart
        self._named_statics = static_positions(fun, static_argnames)
        self.static_argnums = tuple(dict.fromkeys(self.static_argnums + tuple(
            k for k, kwonly in self._named_statics if not kwonly)))
        self._named_statics = tuple(k for k, kwonly in self._named_statics if kwonly)
        self.donate_argnums = as_tuple(donate_argnums, "donate_argnums")
        if set(self.static_argnums) & set(self.donate_argnums):
            raise ArgumentError("jit: an argument cannot be both static and donated")
        if (in_shardings is not None or out_shardings is not None) and mesh is None:
            raise ArgumentError("jit: in_shardings/out_shardings name mesh axes; pass the mesh too: "
                                "tl.jit(f, mesh=tl.sharding.Mesh({'data': 4}), in_shardings=...)")
        if mesh is not None and backend == "interpreter":
            raise ArgumentError("jit: a mesh needs backend='xla' (the interpreter runs on one device)")
        self.mesh, self.in_shardings, self.out_shardings = mesh, in_shardings, out_shardings
        self.recognize = recognize
        self._array_types = iree_array_types() if backend == "iree" else _ARRAY_TYPES
        self._cache: dict = {}
        self._hits: dict = {}           # call signature (tlaloc._jit.dispatch) -> Hit
        self._static = frozenset(self.static_argnums)
        dispatch.know_array_types(self._array_types)
        self._sources: dict = {}
        self._guards: list = []         # of every source lowered: all true while no folded global changed
        self._seen: list = []           # keys compiled so far, for the recompile reason
        self._rows: dict = {}           # key -> residual rows of reverse-mode whiles (tlaloc._jit.residuals)
        name = getattr(fun, "__name__", "f")
        self.__name__ = name
        self.__qualname__ = getattr(fun, "__qualname__", name)
        self.__doc__ = getattr(fun, "__doc__", None)
        self.__wrapped__ = fun
        self._plan = bounded.plan_for(fun, buckets)       # bounded axes (F32["seq<=512"]), or None
        if self._plan is not None and (backend != "xla" or mesh is not None):
            raise ArgumentError(f"jit: {name} has bounded axes {list(self._plan.names)}; they compile with "
                                f"backend='xla' and no mesh")
        # typed-tensor annotations: checked at every new signature (not on the hit path), and the
        # function lowered now, so what its annotations refuse is refused here, as under tl.grad
        self._check = _typecheck.call_checker(fun)
        if not self.static_argnums and hasattr(fun, "__code__"):
            trees = [_LEAF] * fun.__code__.co_argcount
            _typecheck.lower_annotated(fun, lambda: self._source((), trees, ()))

    # -- signature ------------------------------------------------------------------------
    def _split(self, args):
        n = len(args)
        given = {a % n for a in self.static_argnums if -n <= a < n}
        # a string is never an array: static (one program per value), as static_argnums would make it
        extra = tuple(k for k in self._named_statics if k < n) + tuple(
            k for k, a in enumerate(args) if type(a) is str and k not in given)
        return split_args(args, self.static_argnums + tuple(k for k in extra if k not in given), self.__name__)

    def _source(self, statics, trees, flat_avals) -> Source:
        shaped = shape_dependent(self.fun) or getattr(self, "_needs_shapes", False)
        key = (statics, tuple(trees), tuple(flat_avals) if shaped else None)
        src = self._sources.get(key)
        if src is None:
            try:
                src = source_for(self.fun, trees, dict(statics), list(flat_avals) if shaped else None)
            except ShapeNeeded:
                if shaped:
                    raise
                self._needs_shapes = True         # the code reads shapes: one source per signature
                return self._source(statics, trees, flat_avals)
            for g in src.closure_getters:
                where = getattr(g, "__tlaloc_host_call__", None)
                if where is not None:
                    raise FenceError(f"{where} runs at call time (a random draw or other call whose result "
                                     f"is not a function of the arguments) and cannot be compiled by tl.jit; "
                                     f"use tlaloc.random (keys passed as arguments), or draw outside the "
                                     f"jitted function and pass the noise in")
            self._sources[key] = src
            self._guards.extend(src.guards)
        return src

    def _forget_stale(self):
        """A global or closure value folded into the program was rebound or mutated: lower and
        compile again, as tl.grad rebuilds. (Regression: `SCALE = 3.0` after the first call left
        tl.jit(f) and tl.jit(tl.grad(f)) returning the old program's values.)"""
        stale = next(g.name for g in self._guards if not g())
        log.log(logging.WARNING if os.environ.get("TLALOC_LOG_COMPILES", "") not in ("", "0") else logging.DEBUG,
                "tlaloc.jit: lowering %s again: `%s` changed since it was lowered", self.__name__, stale)
        self._sources.clear()
        self._cache.clear()
        self._hits.clear()
        self._guards = []
        t = getattr(self.fun, "__tlaloc_transformed__", None)       # tl.jit(tl.grad(f)): its builds too
        for attr in ("_entries", "_levels"):
            cache = getattr(t, attr, None)
            if isinstance(cache, dict):
                cache.clear()

    def _prepare(self, args):
        statics, trees, flat = self._split(args)
        flat_avals = [leaf_aval(x) for x in flat]
        src = self._source(statics, trees, flat_avals)
        closure = [g() for g in src.closure_getters]
        leaves = list(flat) + closure
        avals = flat_avals + [leaf_aval(x) for x in closure]
        key = (statics, tuple(trees), tuple((a.dtype.str, a.shape, a.weak) for a in avals))
        return src, key, trees, flat, leaves, avals

    # -- stages ----------------------------------------------------------------------------
    def lower(self, *args) -> Lowered:
        """Specialise and emit for ``args``; ``.as_text()``, ``.compile()``, ``.serialize()``.

        With bounded axes: the program of the bucket that holds ``args`` (it takes the
        padded arguments, then one int32 valid length per bounded axis name)."""
        if self._plan is not None:
            return bounded_export.lower_for(self, args)[0]
        src, key, trees, flat, leaves, avals = self._prepare(args)
        return self._lower(src, trees, avals, len(flat), key[0])

    def _platform(self) -> str:
        if self.platform is None:
            from .._runtime.pjrt import has_platform
            self.platform = "cuda" if has_platform("cuda") else "cpu"
        return self.platform

    def export(self, directory, *args) -> dict:
        """Write one StableHLO program per bucket and ``manifest.json`` into ``directory``.

        Only for functions with bounded axes; ``args`` are example arguments (any sizes
        within the bounds: only their dtypes, ranks and unbounded sizes matter). See
        ``tlaloc._jit.bounded_export`` for the manifest. Returns the manifest.
        """
        if self._plan is None:
            raise ArgumentError(f"jit: {self.__name__} has no bounded axis (F32['seq<=512', ...]); use "
                                f".lower(*args).serialize(path) for one program")
        return bounded_export.export(self, directory, args)

    def _lower(self, src, trees, avals, n_flat, statics=(), graph=None, rows=residuals.START_ROWS) -> Lowered:
        if graph is None:
            with while_capacity(rows):
                graph = specialize(src.graph, avals)
        donate = []
        k = 0
        for pos, tree in enumerate(trees):
            n = 0 if tree is None else tree.num_leaves
            if pos in {a % len(trees) for a in self.donate_argnums}:
                donate.extend(range(k, k + n))
            k += n
        shardings = None if self.mesh is None else program_shardings(
            self.__name__, self.mesh, self.in_shardings, self.out_shardings, src, trees, graph, n_flat)
        return Lowered(graph, src, donate, "cpu" if self.backend == "iree" else self._platform(),
                       name=self.__name__, statics=statics, backend=self.backend, shardings=shardings,
                       recognize=self.recognize)

    def __call__(self, *args, **kwargs):
        if kwargs:                  # bound to positions as Python binds them (_frontend/call_binding.py)
            args = bind_keywords(f"jit of {self.__name__}", self.fun, args, kwargs)
        if self._plan is not None:
            return bounded.call(self, self._plan, args)
        if self._guards and not all(g() for g in self._guards):
            self._forget_stale()
        sig = None
        if self.backend != "interpreter":
            sig = dispatch.signature(args, self._static)
            if sig is not None:
                hit = self._hits.get(sig[0])
                if hit is not None:                 # a signature seen before (tlaloc._jit.dispatch)
                    try:
                        out = hit(args, sig[1])
                    except TlalocError as e:
                        if not residuals.is_full(e):
                            raise
                        out = dispatch.Hit.MISS     # the slow path grows the residual stacks
                    if out is not dispatch.Hit.MISS:
                        return out
        if not kwargs:
            check_positional_count(f"jit of {self.__name__}", self.fun, len(args))
        refuse_array_subclasses("jit", self.__wrapped__, args)      # a masked array or np.matrix: refused by name
        if self._check is not None:
            self._check(args)                       # a new signature: the arguments against the annotations
        src, key, trees, flat, leaves, avals = self._prepare(args)
        if self.backend == "interpreter":
            src.check(args, trees, leaves)
            outs = eval_graph(src.graph, *[x if isinstance(x, (bool, int, float)) else np.asarray(x)
                                           for x in leaves])
            return src.finish(args, trees, outs)
        src.check(args, trees, leaves)                  # before compiling: bad arguments are refused by name
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._compile(key, src, trees, avals, len(flat))
        while True:
            try:
                return self._run(compiled, src, args, trees, flat, leaves, sig)
            except TlalocError as e:
                if not residuals.is_full(e):
                    raise
            # a reverse-mode while filled its residual stacks: twice the rows, compile, run again
            rows = residuals.grown(self._rows.get(key, residuals.START_ROWS), self.__name__,
                                   bool(self.donate_argnums))
            self._rows[key] = rows
            self._hits.clear()
            compiled = self._compile(key, src, trees, avals, len(flat))

    def _run(self, compiled, src, args, trees, flat, leaves, sig):
        if sig is not None and len(sig[1]) == len(flat) and all(a is b for a, b in zip(sig[1], flat)):
            # later calls with this signature skip _prepare and the checks: they passed for it now
            hit = dispatch.make_hit(src, trees, compiled, leaves, len(flat))
            if hit is not None:
                self._hits[sig[0]] = hit
                return src.finish(args, trees, hit.run(leaves))
        return src.finish(args, trees, compiled.call_flat(leaves))

    def _compile(self, key, src, trees, avals, n_flat) -> Compiled:
        reason = compile_reason(key, self._seen, self._rows)
        t0 = time.perf_counter()
        rows = self._rows.get(key, residuals.START_ROWS)
        compiled = self._lower(src, trees, avals, n_flat, key[0], rows=rows).compile()
        dt = time.perf_counter() - t0
        level = logging.WARNING if os.environ.get("TLALOC_LOG_COMPILES", "") not in ("", "0") else logging.DEBUG
        sig = ", ".join(f"{a.dtype.name}{list(a.shape)}" for a in avals)
        log.log(level, "tlaloc.jit: compiled %s(%s) in %.3f s (%s)", self.__name__, sig, dt, reason)
        self._cache[key] = compiled
        self._seen.append(key)
        return compiled

    def clear_cache(self) -> None:
        self._cache.clear()
        self._hits.clear()
        self._seen.clear()
        self._rows.clear()

    def cache_size(self) -> int:
        return len(self._cache)


def jit(fun=None, *, backend: str = "xla", static_argnums=(), donate_argnums=(), platform=None, mesh=None,
        in_shardings=None, out_shardings=None, recognize=True, buckets=None, static_argnames=()):
    """Compile ``fun`` with XLA (or IREE), once per argument signature.

    Args:
      fun: a Python function using ``tlaloc.numpy``/NumPy, or a transformed
        function (``tl.grad(f)``, ``tl.value_and_grad(f)``, ``tl.jvp(f)``,
        ``tl.vmap(f)``, ``tl.jacfwd``/``tl.jacrev``/``tl.hessian``).
      backend: ``"xla"`` (StableHLO through PJRT), ``"iree"`` (the same
        StableHLO through IREE: llvm-cpu, local-sync driver; float64 math IREE
        cannot link, e.g. ``tanh``, is refused by name), or ``"interpreter"``
        (the NumPy reference on the same DXIR, for checking).
      static_argnums: positional arguments passed as Python values (hashable);
        each new value compiles anew. A ``str`` argument is always static.
      static_argnames: the same, by parameter name (keyword-only parameters too).
      donate_argnums: positional arguments whose buffers the program may
        overwrite (in place where an output has the same type); a donated
        device array cannot be used again.
      platform: ``"cpu"`` or ``"cuda"``; by default CUDA where its PJRT plugin and a
        GPU exist, else the CPU.
      mesh: a ``tl.sharding.Mesh``: the program is partitioned over its devices
        (XLA's SPMD partitioner, Shardy annotations).
      in_shardings / out_shardings: per argument (and result), a
        ``PartitionSpec``, ``None`` or ``axis_rules(...)`` (see ``tlaloc.sharding``).
      recognize: find coarse patterns (attention, RMSNorm, RoPE, SwiGLU,
        cross-entropy) and let kernels claim them (``tlaloc._recognize``).
      buckets: ``{axis name: sizes}`` for bounded axes (``F32["seq<=512", "d"]``);
        default: powers of two from 16, and the bound. A function with bounded
        axes compiles once per bucket, runs on arguments padded to the smallest
        bucket that holds them, and returns results sliced back to the valid
        lengths (see ``tlaloc._jit.bounded``; ``.export(dir, *args)`` writes
        every bucket's program).

    Returns:
      A callable with ``fun``'s signature returning device arrays (in
      ``fun``'s output structure), with ``.lower(*args)`` for the AOT stages.

    Raises:
      ArgumentError: bad options; at a call, arguments that do not fit.
      TypeAnnotationError: a call whose bounded axis is over its bound (naming
        the argument, the axis, the size and the bound), or whose arguments do not
        fit ``fun``'s typed-tensor annotations (checked once per new signature,
        never on the hit path); with annotations, a dtype mix or an axis-name clash
        they make visible is refused (DTypeError/TypeAnnotationError, at
        ``file:line:col``) when ``jit`` is applied, as under ``tl.grad``.
      BoundedAxisError: an operation of ``fun`` would read the padding of a
        bounded axis (at its ``file:line:col``, when a bucket is first compiled).

    Usable as ``@tl.jit`` or ``@tl.jit(static_argnums=1)``.
    """
    opts = dict(backend=backend, static_argnums=static_argnums, donate_argnums=donate_argnums, platform=platform,
                mesh=mesh, in_shardings=in_shardings, out_shardings=out_shardings, recognize=recognize,
                buckets=buckets, static_argnames=static_argnames)
    if fun is None:
        return functools.partial(jit, **opts)
    return Jitted(fun, **opts)


__all__ = ["jit", "Jitted"]
