"""Bounded axes under ``tl.jit``: one program per bucket, not one per size.

    @tl.jit
    def f(x: F32["seq<=512", "d"], w: F32["d", "e"]):
        return tnp.softmax(x @ w, axis=0).sum(axis=0)          # (e,)

    f(np.ones((37, 8), np.float32), w)      # seq 37 runs padded to 64: compiled once for bucket 64
    tl.jit(f, buckets={"seq": (64, 128, 512)})               # a ladder of your own
    f.export("out/", x, w)                  # one StableHLO program per bucket + manifest.json

An axis annotated ``name<=bound`` (every axis of that name, in every argument)
is padded with zeros to the smallest bucket that holds it; the default ladder
is the powers of two from 16 up to the bound, and the bound itself (16, 32,
..., 512: six programs for lengths 1..512). Each program takes one more input
per bounded axis name, its valid length (``int32`` scalar, after the
closure arrays), and computes what the function computes on the unpadded
arguments: shape queries along the axis give the valid length, reductions and
contractions over it mask the padding (``bounded_rules``), and results that
keep the axis are sliced back to the valid length on the host (NumPy arrays).
What would read the padding is refused with ``BoundedAxisError`` at the
user's ``file:line:col`` when the program is specialised (first call of a bucket).

Sizes are checked at every call: over the bound, or zero, is refused with
``TypeAnnotationError``/``ArgumentError`` naming the argument and axis.
``tl.jit(tl.grad(f))`` and ``tl.jit(tl.value_and_grad(f))`` work the same way
(the gradient of a bounded argument is sliced back too); other transforms of a
function with bounded axes, ``mesh=`` and the IREE back end are refused.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time

import numpy as np

from .._core import specialize as _sp
from .._core.aval import AbstractValue
from .._core.rules import ensure_rules
from .._core.builder import Builder, Value, node_hook, rebinding, _state
from .._core.control import UNDEF
from .._core.passes import dce
from .._core.verifier import verify
from ..errors import ArgumentError, TlalocError
from .bounded_queries import _as_node
from .bounded_rules import Tracker

log = logging.getLogger("tlaloc.jit")
MIN_BUCKET = 16
_I32 = np.dtype(np.int32)


# -- plan: which axes are bounded, and their ladders ------------------------------------------------

def ladder(bound: int, buckets=None) -> tuple:
    """The bucket sizes of an axis bounded by ``bound``.

    Default: powers of two from ``MIN_BUCKET`` (16) below the bound, then the
    bound. ``buckets`` (ints in 1..bound) replaces them; the bound is added
    when missing, so every size up to it has a bucket.
    """
    if buckets is None:
        out, b = [], MIN_BUCKET
        while b < bound:
            out.append(b)
            b *= 2
        return tuple(out) + (bound,)
    ok = isinstance(buckets, (tuple, list, set, frozenset, range)) and all(
        isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)) for s in buckets)
    if not ok:
        raise ArgumentError(f"jit: buckets= gives the sizes {buckets!r}; expected a tuple of ints, "
                            f"e.g. buckets={{'seq': (64, 128)}}")
    sizes = sorted({int(s) for s in buckets})
    bad = [s for s in sizes if not 1 <= s <= bound]
    if bad:
        raise ArgumentError(f"jit: bucket sizes {bad} are outside 1..{bound} (the bound of the axis)")
    return tuple(sizes) + (() if sizes and sizes[-1] == bound else (bound,))


@dataclasses.dataclass(frozen=True)
class Plan:
    """The bounded axes of a function: ``params`` maps a positional parameter to
    ``((axis, name), ...)``; ``ladders`` and ``bounds`` are per axis name."""
    params: dict
    ladders: dict
    bounds: dict

    @property
    def names(self) -> tuple:
        return tuple(sorted(self.bounds))


def plan_for(fun, buckets=None):
    """The ``Plan`` of ``fun``'s annotations, or None when no axis is bounded."""
    from .._typecheck import _unwrap, param_specs
    if buckets is not None and not isinstance(buckets, dict):
        raise ArgumentError(f"jit: buckets= must be a dict from a bounded axis name to its bucket sizes, e.g. "
                            f"buckets={{'seq': (64, 128)}}; got {type(buckets).__name__}")
    specs = param_specs(_unwrap(fun))
    bounds: dict = {}
    for s in specs:
        for name, bound in s.type.bounds.items():
            if bounds.setdefault(name, bound) != bound:
                raise ArgumentError(f"jit: the axis `{name}` has two bounds ({bounds[name]} and {bound}) in the "
                                    f"annotations of {getattr(fun, '__name__', fun)}; give it one")
    if not bounds:
        if buckets:
            raise ArgumentError(f"jit: buckets= names {sorted(buckets)}, but no argument of "
                                f"{getattr(fun, '__name__', fun)} has a bounded axis (F32['seq<=512', ...])")
        return None
    t = getattr(fun, "__tlaloc_transformed__", None)
    if t is not None and getattr(t, "kind", None) not in ("grad", "value_and_grad"):
        raise ArgumentError(f"jit: bounded axes work under tl.jit(f), tl.jit(tl.grad(f)) and "
                            f"tl.jit(tl.value_and_grad(f)), not under {t.kind}")
    unknown = sorted(set(buckets or {}) - set(bounds))
    if unknown:
        raise ArgumentError(f"jit: buckets= names {unknown}, which are not bounded axes (bounded: {sorted(bounds)})")
    params = {}
    for s in specs:
        if s.type.variadic and any(d.name in bounds for d in s.type.dims):
            raise ArgumentError(f"jit: argument `{s.name}` ({s.type}) has a bounded axis and `...`; write every axis")
        axes = tuple((i, d.name) for i, d in enumerate(s.type.dims) if d.kind == "named" and d.name in bounds)
        if axes:
            params[s.index] = axes
    ladders = {n: ladder(b, (buckets or {}).get(n)) for n, b in bounds.items()}
    return Plan(params, ladders, bounds)


def bucket_of(plan: Plan, name: str, n: int) -> int:
    return next(b for b in plan.ladders[name] if b >= n)


# -- specialising with padded axes ------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class BucketMeta:
    """What the host needs to call one bucket's program."""
    names: tuple            # bounded axis names, in the order of the length inputs
    sizes: dict             # name -> bucket size
    out_tags: tuple         # per output: axis names (None: not padded), or None
    min_length: dict        # name -> least valid length the program indexes


def specialize_bounded(graph, in_avals, leaf_tags: dict, sizes: dict):
    """``specialize`` at padded avals with one ``int32`` valid-length input per axis name
    (after ``graph``'s inputs, in sorted name order) and padding masked.

    Args:
      graph: the function's DXIR graph.
      in_avals: concrete avals, bounded axes at their bucket size.
      leaf_tags: input index -> per-axis names of its padded axes (None elsewhere).
      sizes: axis name -> bucket size.
    Returns:
      ``(graph, BucketMeta)``.
    Raises:
      BoundedAxisError: an operation would read the padding (at the user's file:line:col).
    """
    ensure_rules()
    names = tuple(sorted(sizes))
    b = Builder(name=graph.name)
    with b.active():
        ins = []
        for v, a in zip(graph.inputs, in_avals):
            if not a.is_concrete:
                raise TlalocError(f"specialize: input `{v.hint}` needs a concrete aval, got {a}")
            ins.append(b.new_input(a, v.hint))
        lengths = {n: b.new_input(AbstractValue(_I32, ()), f"len_{n}") for n in names}
        tracker = Tracker(lengths, dict(sizes))
        for i, tags in leaf_tags.items():
            tracker.tag(ins[i], tags)
        with node_hook(tracker), rebinding(_sp.rebind):
            outs = _sp.run(graph, ins)
        for o, v in zip(outs, graph.outputs):
            if o is UNDEF:
                raise TlalocError(f"{graph.name}: output `{getattr(v, 'hint', None) or '?'}` is not defined on "
                                  f"every path")
        out_tags = tuple(tracker.tags_of(o) for o in outs)
        g = b.finish(outs)
    g = dce(g)
    _sp.check_concrete(g)
    return verify(g), BucketMeta(names, dict(sizes), out_tags, dict(tracker.min_length))


def _active():
    hook = getattr(_state, "node_hook", None)
    return hook if isinstance(hook, Tracker) else None


# -- sizes known only at run time along a padded axis ---------------------------------------------

def _full(tr, orig, *dims, fill_value, dtype):
    by_id = {v.var.id: n for n, per in tr._len64.items() for v in per.values()}
    tags = [by_id.get(d.var.id) if type(d) is Value else None for d in dims]
    if not any(tags):
        return orig(*dims, fill_value=fill_value, dtype=dtype)
    dims = [tr.sizes[t] if t is not None else d for d, t in zip(dims, tags)]
    return tr.tag(_as_node(orig(*dims, fill_value=fill_value, dtype=dtype)), tags)


_WRAPPERS = {"full": _full}


def install_rules() -> None:
    """Wrap the specialisation rule of ``full`` so that a size that is a valid length gives
    a padded axis (shape queries along a padded axis are ``bounded_rules``' own rules; run by ``tlaloc._core.rules.ensure_rules``, after the specialisation tables load)."""
    for name, fn in _WRAPPERS.items():
        orig = _sp.RULES[name]
        if getattr(orig, "_bounded", False):
            continue

        def rule(*ins, _orig=orig, _fn=fn, **params):
            tr = _active()
            return _orig(*ins, **params) if tr is None else _fn(tr, _orig, *ins, **params)
        rule._bounded = True
        rule.__doc__ = f"{orig.__doc__ or name}; along a padded axis, see tlaloc._jit.bounded"
        _sp.RULES[name] = rule


# -- calling ----------------------------------------------------------------------------------------

def lengths_of(plan: Plan, fun, args) -> dict:
    """``{axis name: valid length}`` of a call; refuses a size over the bound or zero."""
    from .._frontend import typing_hooks
    if typing_hooks.check_call is not None:
        typing_hooks.check_call(fun, args)               # sizes over the bound, names with two sizes
    out = {}
    for index, axes in plan.params.items():
        if index >= len(args):
            continue
        shape = np.shape(args[index]) if not hasattr(args[index], "shape") else tuple(args[index].shape)
        for axis, name in axes:
            n = int(shape[axis])
            if n < 1:
                raise ArgumentError(f"{getattr(fun, '__name__', 'f')}: argument {index} has an empty bounded axis "
                                    f"`{name}` (shape {shape}); a bounded axis needs at least one element")
            out.setdefault(name, n)
    missing = sorted(set(plan.bounds) - set(out))
    if missing:
        raise ArgumentError(f"{getattr(fun, '__name__', 'f')}: no argument gives the size of the bounded axes "
                            f"{missing}")
    return out


def pad_args(plan: Plan, args, sizes: dict) -> tuple:
    """The arguments with every bounded axis zero-padded to ``sizes[name]`` (NumPy arrays)."""
    out = list(args)
    for index, axes in plan.params.items():
        if index >= len(args):
            continue
        a = np.asarray(args[index])
        widths = [(0, 0)] * a.ndim
        for axis, name in axes:
            widths[axis] = (0, sizes[name] - a.shape[axis])
        out[index] = np.pad(a, widths) if any(w[1] for w in widths) else a
    return tuple(out)


def leaf_tags(plan: Plan, trees, avals) -> dict:
    """Input index -> per-axis names, for the flat leaves of arguments with structure ``trees``."""
    out, k = {}, 0
    for pos, tree in enumerate(trees):
        n = 0 if tree is None else tree.num_leaves
        if pos in plan.params:
            if tree is None or tree.kind != "leaf":
                raise ArgumentError(f"jit: argument {pos} has a bounded axis, so it must be an array (not static, "
                                    f"not a pytree)")
            tags = [None] * len(avals[k].shape)
            for axis, name in plan.params[pos]:
                tags[axis] = name
            out[k] = tuple(tags)
        k += n
    return out


def unpad(outs, meta: BucketMeta, lengths: dict) -> list:
    """Outputs with their padded axes sliced to the valid lengths (NumPy arrays where sliced)."""
    res = []
    for o, tags in zip(outs, meta.out_tags):
        if tags is None:
            res.append(o)
        else:
            res.append(np.asarray(o)[tuple(slice(0, lengths[t]) if t is not None else slice(None) for t in tags)])
    return res


def call(jitted, plan: Plan, args):
    """``jitted(*args)`` for a function with bounded axes (see the module docstring)."""
    lengths = lengths_of(plan, jitted.fun, args)
    sizes = {n: bucket_of(plan, n, lengths[n]) for n in plan.names}
    padded = pad_args(plan, args, sizes)
    src, key, trees, flat, leaves, avals = jitted._prepare(padded)
    hit = jitted._cache.get(key)
    if hit is None:
        hit = jitted._cache[key] = compile_bucket(jitted, plan, src, key, trees, avals, len(flat), sizes)
        jitted._seen.append(key)
    compiled, meta = hit
    for name, need in meta.min_length.items():
        if lengths[name] < need:
            raise ArgumentError(f"{jitted.__name__}: the program indexes entry {need - 1} of the bounded axis "
                                f"`{name}`, but this call's `{name}` has length {lengths[name]}")
    src.check(padded, trees, leaves)
    outs = compiled.call_flat(list(leaves) + [np.int32(lengths[n]) for n in meta.names])
    return src.finish(args, trees, unpad(outs, meta, lengths))


def lower_bucket(jitted, plan, src, key, trees, avals, n_flat, sizes):
    """The ``Lowered`` program of one bucket and its ``BucketMeta``."""
    graph, meta = specialize_bounded(src.graph, avals, leaf_tags(plan, trees, avals), sizes)
    return jitted._lower(src, trees, avals, n_flat, key[0], graph=graph), meta


def compile_bucket(jitted, plan, src, key, trees, avals, n_flat, sizes):
    t0 = time.perf_counter()
    lowered, meta = lower_bucket(jitted, plan, src, key, trees, avals, n_flat, sizes)
    compiled = lowered.compile()
    level = logging.WARNING if os.environ.get("TLALOC_LOG_COMPILES", "") not in ("", "0") else logging.DEBUG
    log.log(level, "tlaloc.jit: compiled %s for bucket %s in %.3f s (new bucket)", jitted.__name__,
            ", ".join(f"{n}={s}" for n, s in sorted(sizes.items())), time.perf_counter() - t0)
    return compiled, meta
