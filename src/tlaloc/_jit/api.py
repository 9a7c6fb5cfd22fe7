"""``tl.jit``: compile a function (or a transformed one, ``tl.jit(tl.grad(f))``)
through DXIR → specialisation → StableHLO → XLA (PJRT).

    f_fast = tl.jit(f)                     # compiles at the first call per signature
    f_fast(x, w)                           # device arrays out (np.asarray reads them)
    tl.jit(f).lower(x, w).as_text()        # the StableHLO module
    tl.jit(f).lower(x, w).compile()        # ahead of time
    tl.jit(step, donate_argnums=(0,))      # updates argument 0's buffer in place

One compile per signature: argument structure, shapes and dtypes, and the
values of ``static_argnums``; set ``TLALOC_LOG_COMPILES=1`` to log each compile
with its reason (new shape / new dtype / new static value).

The pipeline, and where later stages plug in:

    graph (DXIR, definition time)
      → specialize(graph, avals)                  tlaloc._core.specialize
      → [recognize + coarsen: DXIR → DXIR]        (a pass on the specialised graph)
      → emit_module(graph, donate=...)            tlaloc._render.stablehlo  [+ sdy shardings]
      → Executable(program, platform)             tlaloc._runtime.pjrt      [IREE: a sibling runtime]
"""
from __future__ import annotations

import functools
import logging
import os
import time

import numpy as np

from .. import _pytree
from .._core.aval import AbstractValue
from .._core.interpreter import eval_graph
from .._core.specialize import specialize
from ..errors import ArgumentError
from .lowering import Source, source_for
from .stages import Compiled, Lowered

log = logging.getLogger("tlaloc.jit")
_LEAF = _pytree.TreeDef("leaf")


@functools.lru_cache(maxsize=64)
def _leaves(n):
    return [_LEAF] * n


def _array_types() -> tuple:
    types = [np.ndarray]
    try:
        from jaxlib import _jax
        types.append(_jax.ArrayImpl)
    except Exception:                                      # pragma: no cover
        pass
    return tuple(types)


_ARRAY_TYPES = frozenset(_array_types())
_BACKENDS = ("xla", "interpreter")


def _as_tuple(nums, name, n_max=None):
    if nums is None:
        return ()
    if isinstance(nums, (int, np.integer)) and not isinstance(nums, bool):
        return (int(nums),)
    try:
        return tuple(int(a) for a in nums)
    except TypeError:
        raise ArgumentError(f"jit: {name} must be an int or a tuple of ints, got {nums!r}") from None


def _leaf_aval(x) -> AbstractValue:
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        # a Python number is weak, as in the interpreter: it adopts the other operand's dtype
        return AbstractValue(np.asarray(x).dtype, (), weak=True)
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        return AbstractValue(np.dtype(x.dtype), tuple(int(d) for d in x.shape))
    try:
        arr = np.asarray(x)
    except Exception:
        raise ArgumentError(f"jit: expected an array or a number, got {type(x).__name__}") from None
    if arr.dtype == object:
        raise ArgumentError(f"jit: expected an array or a number, got {type(x).__name__}")
    return AbstractValue(arr.dtype, arr.shape)


class Jitted:
    """The callable ``tl.jit`` returns; see the module docstring."""

    def __init__(self, fun, backend="xla", static_argnums=(), donate_argnums=(), platform=None):
        if backend not in _BACKENDS:
            raise ArgumentError(f"jit: backend must be one of {_BACKENDS}, got {backend!r}")
        self.fun = fun
        self.backend = backend
        self.platform = platform            # None: "cuda" where that PJRT backend exists, else "cpu"
        self.static_argnums = _as_tuple(static_argnums, "static_argnums")
        self.donate_argnums = _as_tuple(donate_argnums, "donate_argnums")
        if set(self.static_argnums) & set(self.donate_argnums):
            raise ArgumentError("jit: an argument cannot be both static and donated")
        self._cache: dict = {}
        self._fast: dict = {}           # (dtype, shape) per array argument -> (compiled, source)
        self._sources: dict = {}
        self._seen: list = []           # keys compiled so far, for the recompile reason
        name = getattr(fun, "__name__", "f")
        self.__name__ = name
        self.__qualname__ = getattr(fun, "__qualname__", name)
        self.__doc__ = getattr(fun, "__doc__", None)
        self.__wrapped__ = fun

    # -- signature ------------------------------------------------------------------------
    def _split(self, args):
        n = len(args)
        static = tuple(sorted(a % n for a in self.static_argnums)) if n else ()
        for a in self.static_argnums:
            if not -n <= a < n:
                raise ArgumentError(f"jit: static_argnums={a} but {self.__name__} got {n} positional arguments")
        statics = []
        for a in static:
            try:
                hash(args[a])
            except TypeError:
                raise ArgumentError(f"jit: static argument {a} ({type(args[a]).__name__}) must be hashable; "
                                    f"pass arrays as ordinary arguments") from None
            statics.append((a, args[a]))
        dyn, trees = [], []
        for k, a in enumerate(args):
            if k in static:
                trees.append(None)
                continue
            leaves, tree = _pytree.flatten(a)
            dyn.extend(leaves)
            trees.append(tree)
        return tuple(statics), trees, dyn

    def _source(self, statics, trees) -> Source:
        key = (statics, tuple(trees))
        src = self._sources.get(key)
        if src is None:
            src = self._sources[key] = source_for(self.fun, trees, dict(statics))
        return src

    def _prepare(self, args):
        statics, trees, flat = self._split(args)
        src = self._source(statics, trees)
        closure = [g() for g in src.closure_getters]
        leaves = list(flat) + closure
        avals = [_leaf_aval(x) for x in leaves]
        key = (statics, tuple(trees), tuple((a.dtype.str, a.shape, a.weak) for a in avals))
        return src, key, trees, flat, leaves, avals

    # -- stages ----------------------------------------------------------------------------
    def lower(self, *args) -> Lowered:
        """Specialise and emit for ``args``; ``.as_text()``, ``.compile()``, ``.serialize()``."""
        src, key, trees, flat, leaves, avals = self._prepare(args)
        return self._lower(src, trees, avals, len(flat), key[0])

    def _platform(self) -> str:
        if self.platform is None:
            from .._runtime.pjrt import has_platform
            self.platform = "cuda" if has_platform("cuda") else "cpu"
        return self.platform

    def _lower(self, src, trees, avals, n_flat, statics=()) -> Lowered:
        graph = specialize(src.graph, avals)
        donate = []
        k = 0
        for pos, tree in enumerate(trees):
            n = 0 if tree is None else tree.num_leaves
            if pos in {a % len(trees) for a in self.donate_argnums}:
                donate.extend(range(k, k + n))
            k += n
        return Lowered(graph, src, donate, self._platform(), name=self.__name__, statics=statics)

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise ArgumentError(f"jit: pass the arguments of {self.__name__} positionally "
                                f"(got keywords {sorted(kwargs)})")
        if self.backend == "xla" and not self.static_argnums:
            try:
                fast = tuple((a.dtype, a.shape) for a in args if type(a) in _ARRAY_TYPES)
            except AttributeError:
                fast = None
            if fast is not None and len(fast) == len(args):
                hit = self._fast.get(fast)
                if hit is not None:                 # plain arrays, seen before: no flattening
                    compiled, src = hit
                    closure = [g() for g in src.closure_getters]
                    return src.finish(args, _leaves(len(args)), compiled.executable(*args, *closure))
        src, key, trees, flat, leaves, avals = self._prepare(args)
        if self.backend == "interpreter":
            src.check(args, trees, leaves)
            outs = eval_graph(src.graph, *[x if isinstance(x, (bool, int, float)) else np.asarray(x)
                                           for x in leaves])
            return src.finish(args, trees, outs)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._compile(key, src, trees, avals, len(flat))
        src.check(args, trees, leaves)
        outs = compiled.call_flat(leaves)
        if not self.static_argnums and all(type(a) in _ARRAY_TYPES for a in args) and not src.closure_getters:
            self._fast[tuple((a.dtype, a.shape) for a in args)] = (compiled, src)
        return src.finish(args, trees, outs)

    def _compile(self, key, src, trees, avals, n_flat) -> Compiled:
        reason = self._reason(key)
        t0 = time.perf_counter()
        compiled = self._lower(src, trees, avals, n_flat, key[0]).compile()
        dt = time.perf_counter() - t0
        level = logging.WARNING if os.environ.get("TLALOC_LOG_COMPILES", "") not in ("", "0") else logging.DEBUG
        sig = ", ".join(f"{a.dtype.name}{list(a.shape)}" for a in avals)
        log.log(level, "tlaloc.jit: compiled %s(%s) in %.3f s (%s)", self.__name__, sig, dt, reason)
        self._cache[key] = compiled
        self._seen.append(key)
        return compiled

    def _reason(self, key) -> str:
        if not self._seen:
            return "first call"
        statics, trees, sig = key
        same_tree = [k for k in self._seen if k[1] == trees]
        if not same_tree:
            return "new argument structure"
        if all(k[0] != statics for k in same_tree):
            return "new static value"
        same = [k for k in same_tree if k[0] == statics]
        shapes = tuple(s[1] for s in sig)
        if all(tuple(s[1] for s in k[2]) != shapes for k in same):
            return "new shape"
        return "new dtype"

    def clear_cache(self) -> None:
        self._cache.clear()
        self._fast.clear()
        self._seen.clear()

    def cache_size(self) -> int:
        return len(self._cache)


def jit(fun=None, *, backend: str = "xla", static_argnums=(), donate_argnums=(), platform=None):
    """Compile ``fun`` with XLA, once per argument signature.

    Args:
      fun: a Python function using ``tlaloc.numpy``/NumPy, or a transformed
        function (``tl.grad(f)``, ``tl.value_and_grad(f)``).
      backend: ``"xla"`` (StableHLO through PJRT) or ``"interpreter"`` (the
        NumPy reference on the same DXIR, for checking).
      static_argnums: positional arguments passed as Python values (hashable);
        each new value compiles anew.
      donate_argnums: positional arguments whose buffers the program may
        overwrite (in place where an output has the same type); a donated
        device array cannot be used again.
      platform: ``"cpu"`` or ``"cuda"``; by default CUDA where its PJRT plugin and a
        GPU exist, else the CPU.

    Returns:
      A callable with ``fun``'s signature returning device arrays (in
      ``fun``'s output structure), with ``.lower(*args)`` for the AOT stages.

    Usable as ``@tl.jit`` or ``@tl.jit(static_argnums=1)``.
    """
    if fun is None:
        return functools.partial(jit, backend=backend, static_argnums=static_argnums,
                                 donate_argnums=donate_argnums, platform=platform)
    return Jitted(fun, backend=backend, static_argnums=static_argnums, donate_argnums=donate_argnums,
                  platform=platform)


__all__ = ["jit", "Jitted"]
