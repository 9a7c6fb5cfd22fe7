"""Batching (``vmap``): a DXIR → DXIR pass driven by the primitives' batching rules.

``batch_graph(graph, in_dims, in_avals, size)`` returns a graph that computes
``graph`` for a whole batch of examples at once, and the batch axis of each
output. Every value of the batched graph carries a *batch dim*: ``None`` (the
value is the same for every example: unbatched) or the axis of the batch.

Each primitive's rule (``prim.batch``, next to the rules of this package in
``batching_rules.py``, ``batching_index.py``, ``batching_control.py``) maps
batched operands to a batched result::

    rule(args, dims, **params) -> (out, out_dim)        # (tuple, tuple) for multiple results

``args`` are symbolic values of the builder being filled (or Python/NumPy
constants, always unbatched); ``dims`` their batch dims. A node whose operands
are all unbatched is copied unchanged, so unbatched work stays unbatched.
Rules put the batch axis first (``out_dim == 0``), except that stacks (the
per-iteration lists of a loop) keep it at 1: entry ``k`` of a batched stack is
batched at 0, and a stack reads like an array with a leading iteration axis.

Batching needs ranks, so graphs are batched at call time, when every input's
shape is known (see ``vmap.py``); the batch size is a plain int. A primitive
without a rule raises ``NoRuleError("no batching rule for `<name>`")``.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from .._core import aval as _aval
from .._core.aval import AbstractValue
from .._core.rules import ensure_rules
from .._core.builder import Builder, Value, current_builder, expansion_graph
from .._core.control import undef_literal
from .._core.graph import Graph, Literal
from .._core.passes import dce
from .._prims import elementwise as _ew
from .._prims import shape_ops as _sh
from .._prims._rules import _strong_float, _weak_sample
from ..errors import NoRuleError, ShapeError, at_location

_state = threading.local()


# -- the batch size ---------------------------------------------------------------------

def axis_size() -> int:
    """The size of the batch axis of the pass now running."""
    stack = getattr(_state, "sizes", None)
    if not stack:
        raise RuntimeError("axis_size() outside a batching pass")
    return stack[-1]


@contextlib.contextmanager
def _sized(n: int):
    if not hasattr(_state, "sizes"):
        _state.sizes = []
    _state.sizes.append(int(n))
    try:
        yield
    finally:
        _state.sizes.pop()


# -- small helpers shared by the rules ------------------------------------------------------

def is_value(x) -> bool:
    return type(x) is Value


def aval_of(x) -> AbstractValue:
    if is_value(x):
        return x.aval
    if x is None:
        return _aval.UNKNOWN
    return _aval.of(x)


def rank(x, what: str = "an operand") -> int:
    """The rank of ``x`` (batch axis included); refuses an unknown rank."""
    if is_value(x):
        r = x.aval.rank
        if r is None:
            raise ShapeError(f"vmap: the rank of {what} ({x.var!r}) is unknown, and batching needs it; "
                             f"it comes from an operation whose result shape is not known ahead of time "
                             f"(e.g. a slice with array bounds x[i:j]); use fixed-size operations "
                             f"(lax.dynamic_slice) there")
        return r
    return np.ndim(x)


def example_rank(x, d) -> int:
    """The rank of one example of ``x`` (batched at ``d``)."""
    return rank(x) - (0 if d is None else 1)


def shape(x, what: str = "an operand") -> tuple:
    """The concrete shape of ``x``; refuses unknown sizes."""
    if is_value(x):
        s = x.aval.shape
        if s is None or any(type(d) is not int for d in s):
            raise ShapeError(f"vmap: the shape of {what} ({x.var!r}) is not known, and batching it "
                             f"needs the sizes; use fixed-size operations there")
        return tuple(s)
    return tuple(np.shape(x))


def example_shape(x, d) -> tuple:
    s = shape(x)
    return s if d is None else s[:d] + s[d + 1:]


def as_constant(x):
    """A folded NumPy scalar as a 0-d array (the renderer writes arrays with their dtype)."""
    return np.asarray(x) if isinstance(x, np.generic) else x


def emit(prim, *args, **params):
    """Record a node even when no operand is symbolic (no constant folding):
    the generated code then shows the operation instead of a baked array."""
    b = current_builder()
    return b.add(prim, args, params)


def moveaxis(x, src: int, dst: int):
    r = rank(x)
    src, dst = src % r, dst % r
    if src == dst:
        return x
    perm = [i for i in range(r) if i != src]
    perm.insert(dst, src)
    return _sh.transpose(x, tuple(perm))


def to_front(x, d):
    """``x`` with its batch axis first (unbatched values unchanged)."""
    return x if d is None or d == 0 else moveaxis(x, d, 0)


def expand_after_batch(x, n: int):
    """Insert ``n`` unit axes right after the (leading) batch axis."""
    if n <= 0:
        return x
    return _sh.expand_dims(x, tuple(range(1, 1 + n)))


def batched(x, d, dtype=None):
    """``x`` batched at 0: moved there, or broadcast along a new leading axis.

    ``dtype`` gives a Python-scalar constant the dtype of the value it stands for
    (a weak ``0.0`` must not become float64 next to float32 data)."""
    if d is not None:
        return to_front(x, d)
    n = axis_size()
    if x is None:
        raise ShapeError("vmap: cannot batch a value that is undefined on this path")
    if not is_value(x):
        const = np.asarray(x, dtype=dtype) if dtype is not None else x
        return emit(_sh.broadcast_to_p, const, shape=(n,) + tuple(np.shape(x)))
    return _sh.broadcast_to(x, (n,) + shape(x))


def example_of(x, d):
    """One example of ``x`` (the first): for operands that only lend a shape or dtype."""
    if d is None:
        return x
    from .._prims.indexing import getitem
    return getitem(x, (slice(None),) * d + (0,))


def batched_aval(a: AbstractValue, d) -> AbstractValue:
    """The aval of a value whose examples have aval ``a``, batched at ``d``."""
    if d is None or a.shape is None:
        return a if d is None else a.with_(shape=None, names=None, weak=False)
    s = tuple(a.shape)
    names = None if a.names is None else tuple(a.names[:d]) + (None,) + tuple(a.names[d:])
    return a.with_(shape=s[:d] + (axis_size(),) + s[d:], names=names, weak=False)


def unbatched_aval(a: AbstractValue, d) -> AbstractValue:
    """The aval of one example of a value with aval ``a`` batched at ``d``."""
    if d is None or a.shape is None:
        return a
    s = tuple(a.shape)
    names = None if a.names is None else tuple(a.names[:d]) + tuple(a.names[d + 1:])
    return a.with_(shape=s[:d] + s[d + 1:], names=names)


# -- rules of primitives declared elsewhere ----------------------------------------------------------

BY_NAME: dict = {}
"""Rules for primitives declared outside the primitive table's modules (typed
tensors, custom derivative rules), keyed by name: ``install_rules`` attaches
them once the primitive exists."""


def region_call(prim):
    """The rule of a call whose meaning is a region (``prim.inline_region``, e.g.
    a custom-rule call): batch that region inline. Its inputs are the node's
    first operands, as the renderer binds them."""
    def rule(args, dims, **params):
        body = params[prim.inline_region]
        n = len(body.inputs)
        pairs = batch_inline(body, list(args[:n]), list(dims[:n]))
        return tuple(v for v, _ in pairs), tuple(d for _, d in pairs)
    return rule


def composite(prim):
    """The rule of a composite (``prim.expansion``: ``sum_to``, ``dim_size`` ...): its body
    at the avals of one example, batched inline."""
    def rule(args, dims, **params):
        avals = [unbatched_aval(aval_of(a), d) for a, d in zip(args, dims)]
        body = expansion_graph(prim, avals, params)
        if body is None:
            raise NoRuleError(f"no batching rule for `{prim.name}` where the shapes of its operands are not "
                              f"known ({', '.join(str(a) for a in avals)}); it is batched through its body, "
                              f"which needs them. Use fixed-size operations there")
        pairs = batch_inline(body, list(args), list(dims))
        if prim.multiple_results:
            return tuple(v for v, _ in pairs), tuple(d for _, d in pairs)
        return pairs[0]
    rule.expands = True
    return rule


def install_rules() -> None:
    """Attach rules to primitives declared after the rule modules were imported."""
    from .._core.primitive import REGISTRY
    for name, prim in REGISTRY.items():
        if prim.batch is None:
            if name in BY_NAME:
                prim.batch = BY_NAME[name]
            elif getattr(prim, "inline_region", None):
                prim.batch = region_call(prim)
            elif prim.expansion is not None:
                prim.batch = composite(prim)


# -- the pass ------------------------------------------------------------------------------

def _needs_rule(prim) -> bool:
    """Rules that also canonicalize unbatched nodes (e.g. einsum's ``...``)."""
    return getattr(prim.batch, "handles_unbatched", False)


def batch_inline(graph: Graph, args, dims):
    """Emit the batched ``graph`` into the active builder.

    ``args`` are the values of ``graph``'s inputs (batched at ``dims``).
    Returns ``[(value, dim)]`` per output; an undefined output is ``(None, None)``.
    """
    b = current_builder()
    if len(args) != len(graph.inputs):
        raise TypeError(f"batch {graph.name}: {len(graph.inputs)} inputs, {len(args)} args")
    env = {v.id: (a, d) for v, a, d in zip(graph.inputs, args, dims)}

    def read(atom):
        return (atom.value, None) if isinstance(atom, Literal) else env[atom.id]

    for node in graph.nodes:
        pairs = [read(a) for a in node.inputs]
        ins = [p[0] for p in pairs]
        ds = [p[1] for p in pairs]
        multi = node.prim.multiple_results
        with b.at(node.loc):
            ins = _weak_operands(node, ins)
            if all(d is None for d in ds) and not _needs_rule(node.prim):
                out = node.prim.bind(*ins, **dict(node.params))
                od = (None,) * len(node.outputs) if multi else None
            else:
                rule = node.prim.rule("batch")
                try:
                    out, od = rule(ins, ds, **dict(node.params))
                except (NoRuleError, ShapeError) as e:     # a rule refuses these operands (a boolean mask)
                    raise at_location(e, node.loc) from None
        outs, ods = (tuple(out), tuple(od)) if multi else ((out,), (od,))
        for old, new, d in zip(node.outputs, outs, ods):
            new = as_constant(new)
            if is_value(new) and new.var.hint is None:
                new.var.hint = old.hint
            env[old.id] = (new, d)
    return [read(o) for o in graph.outputs]


def _weak_operands(node, ins):
    """``ins`` with each Python scalar of one example (a weak operand of ``node``) that
    batching made an array (a loop index or counter carried per example) converted to
    the dtype it adopts in ``node`` (NEP 50): a batched ``int`` loop index or ``0.0``
    accumulator meeting float32 data stays float32, as it does for one example."""
    first = getattr(node.prim.batch, "weak_scalars_from", None)
    if first is None:
        return ins
    avals = [a.aval for a in node.inputs[first:]]
    strong = [a.dtype for a in avals if not a.weak and a.dtype is not None]
    if not strong or not any(a.weak for a in avals):
        return ins
    out = list(ins)
    for k, (a, x) in enumerate(zip(avals, ins[first:]), first):
        if not (a.weak and is_value(x) and x.aval.dtype is not None and not x.aval.weak):
            continue
        target = np.result_type(*strong, _weak_sample(a.dtype, _strong_float(strong)))   # as the dtype rules
        if x.aval.dtype != target:
            out[k] = _ew.convert(x, target)
    return out


def finish_outputs(pairs, want, dtypes=None):
    """Bring outputs to the batch dims ``want`` (``None``: leave as is, 0: batched at 0).

    ``dtypes[k]`` (when known) is the dtype a constant output is broadcast in."""
    dtypes = dtypes or [None] * len(pairs)
    out = []
    for (v, d), w, dt in zip(pairs, want, dtypes):
        if w is None or v is None:
            out.append((v, d))
        else:
            out.append((batched(v, d, dt), 0))
    return out


def build_region(in_avals, hints, fn, want=None, name="region", dtypes=None):
    """A new closed region graph: ``fn(inputs) -> [(value, dim)]`` fills it.

    ``want`` (and ``dtypes``) optionally force output batch dims (see
    ``finish_outputs``). Returns ``(graph, out_dims)``.
    """
    rb = Builder(name=name)
    with rb.active():
        ins = [rb.new_input(a, h) for a, h in zip(in_avals, hints)]
        pairs = fn(ins)
        if want is not None:
            pairs = finish_outputs(pairs, want, dtypes)
        outs = [undef_literal() if v is None else v for v, _ in pairs]
        g = dce(rb.finish(outs))
    return g, [d for _, d in pairs]


def region(graph: Graph, in_avals, in_dims, want=None, name=None, undef=None, dtypes=None):
    """Batch a region (a branch or a loop body) into a new closed graph whose
    inputs have ``in_avals`` (batched ones include the batch axis).

    ``undef[k]`` feeds input ``k`` as undefined (a loop variable first set inside
    the loop, while its shape is being found)."""
    def fill(ins):
        if undef is not None:
            ins = [None if u else v for v, u in zip(ins, undef)]
        return batch_inline(graph, ins, in_dims)
    return build_region(in_avals, [v.hint for v in graph.inputs], fill, want, name or graph.name, dtypes)


def batch_graph(graph: Graph, in_dims, in_avals, axis_size_: int, name=None, out_fn=None):
    """Batch ``graph``: the batched graph and the batch dim of each output.

    Args:
      graph: a DXIR graph (typically lowered for one example).
      in_dims: per input, ``None`` (unbatched) or the axis of the batch.
      in_avals: per input, its aval in the batched graph (batch axis included).
      axis_size_: the batch size.
      out_fn: optional ``out_fn(pairs) -> pairs`` run on the ``(value, dim)``
        outputs inside the new graph (``vmap`` places them at ``out_axes``).

    Returns:
      ``(batched graph, out_dims)``; the new graph has the same inputs and outputs.
    """
    ensure_rules()
    with _sized(axis_size_):
        b = Builder(name=name or f"vmap_{graph.name}")
        with b.active():
            ins = [b.new_input(a, v.hint) for v, a in zip(graph.inputs, in_avals)]
            pairs = batch_inline(graph, ins, in_dims)
            if out_fn is not None:
                pairs = out_fn(pairs)
            outs = [undef_literal() if v is None else v for v, _ in pairs]
            g = b.finish(outs)
    return g, [d for _, d in pairs]
