"""Primitives are data: one ``Primitive`` object per operation, with one entry
per concern.

=============  ==============================================================
entry          meaning
=============  ==============================================================
impl           NumPy implementation, ``impl(*arrays, **params)``
shape_rule     ``shape_rule(*avals, **params) -> shape | tuple of shapes``
dtype_rule     ``dtype_rule(*avals, **params) -> dtype | tuple of dtypes``
hlo            the StableHLO op it lowers to (a name, e.g. ``stablehlo.sine``)
lower          the StableHLO lowering function (added by the emitter's tables)
vjp            ``vjp(g, *primals, out=..., **params) -> cotangent per input``,
               or a ``NodeRule`` (see below)
jvp            ``jvp(tangents, *primals, out=..., **params) -> tangent(s)``,
               or a ``NodeRule``
batch          ``batch(args, dims, **params) -> (out, out_dim)``
effectful      run for its effect (printing, raising): never removed or merged
expansion      a composite: ``expansion(*operands, **params)`` builds the result
               from other primitives, or returns ``NotImplemented`` when it needs
               shapes or dtypes not yet known (see below)
eager          what ``tlaloc.numpy.lax.<name>`` calls: ``impl`` without
               ``bind``'s checks where the operands are plain NumPy arrays
               (same bits), else ``bind`` (see ``_prims/_eager.py``)
=============  ==============================================================

A primitive with regions (control flow, custom rules, coarsened ops) transforms
the whole node instead: its ``vjp`` is a ``NodeRule`` wrapping
``reverse(node, ins) -> (outs, backward)`` and its ``jvp`` a ``NodeRule``
wrapping ``forward(node, ins, tangents) -> (outs, out_tangents)``. Assigning
``prim.reverse_rule`` / ``prim.forward_rule`` sets that one slot.

A composite (``expansion`` set: the shape-only helpers of derivative code such as
``sum_to``) never reaches a graph whose operand shapes are known: ``Builder.add``
builds its body in its place. When the shapes are unknown (a graph built at
definition time) the node stays; specialisation re-binds it at concrete shapes (the
body then inlines), and batching and lowering use one generic rule that expands the
body at the node's avals (``expansion_graph``), so a composite needs no entry of its
own in those tables.

The rules other modules attach (batching, lowering, specialisation, bounded and
named axes) are loaded by ``tlaloc._core.rules.ensure_rules()``, which every
engine calls before it looks a rule up. A transform that meets a primitive
without its rule raises ``NoRuleError`` naming both.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..errors import NoRuleError
from .. import dtypes as _dt

REGISTRY: dict[str, "Primitive"] = {}
_VALUE_TYPE = None
_WEAK = (float, int, bool)
_CONTAINERS = (list, tuple, type(None))

import numpy as _np  # noqa: E402

_NDARRAY = _np.ndarray
_GENERIC = _np.generic
#: abstract_eval's results by (primitive, its two rules, input avals, params): tracing a serving
#: program evaluates the same rules on the same avals once per layer (a third of the export's time)
_AVAL_MEMO: dict = {}
_AVAL_MEMO_SIZE = 1 << 16
#: param value types whose equality is their identity of meaning (1 == 1.0 == True is not:
#: the type is part of the key)
_KEY_ATOMS = frozenset((int, float, bool, str, type(None)))


def _key_part(v):
    """A hashable stand-in for one param value that equals another only for the same meaning,
    or None when there is none (the result is then not memoised)."""
    t = type(v)
    if t in _KEY_ATOMS or isinstance(v, _np.dtype):
        return (t, v)
    if t is tuple:
        if all(type(x) is int for x in v):                  # shapes and axes: the common case
            return v
        parts = tuple(_key_part(x) for x in v)
        return None if None in parts else (t, parts)
    return None


def _aval_key(prim, avals, params):
    parts = []
    for k in sorted(params):
        part = _key_part(params[k])
        if part is None:
            return None
        parts.append((k, part))
    # a rule replaced later is a new key; so is the float promotion mode (dtypes.numpy_dtype_promotion)
    return (prim, prim.shape_rule, prim.dtype_rule, avals, tuple(parts), _dt.promotion_mode())


def _load_value_type():
    global _VALUE_TYPE
    from .builder import Value
    _VALUE_TYPE = Value
    return Value


def _node_rule_slot(slot: str, doc: str) -> property:
    """A property that reads and sets slot ``slot`` as a ``NodeRule`` (``None`` clears it)."""
    def get(self) -> Optional[Callable]:
        rule = getattr(self, slot)
        return rule.fn if type(rule) is NodeRule else None

    def set_(self, fn: Optional[Callable]) -> None:
        setattr(self, slot, None if fn is None else NodeRule(fn))
    return property(get, set_, doc=doc)


class Primitive:
    #: True for a primitive run for what it does, not what it returns (``print`` and ``assert``
    #: of computed values, ``_frontend/call_time.py``): dead-code elimination and CSE keep it.
    effectful = False

    def __init__(self, name: str, *, impl: Callable, shape_rule: Callable,
                 dtype_rule: Callable, hlo: Optional[str] = None,
                 multiple_results: bool = False,
                 nondiff_argnums: tuple = (), inference_only: bool = False):
        if name in REGISTRY:
            raise ValueError(f"primitive {name!r} is declared twice")
        self.name = name
        self.impl = impl
        self.shape_rule = shape_rule
        self.dtype_rule = dtype_rule
        self.hlo = hlo
        self.multiple_results = multiple_results
        self.nondiff_argnums = nondiff_argnums
        self.inference_only = inference_only
        self.vjp: Optional[Callable] = None
        self.jvp: Optional[Callable] = None
        self.batch: Optional[Callable] = None
        self.lower: Optional[Callable] = None
        self.eager: Optional[Callable] = None
        self.expansion: Optional[Callable] = None
        REGISTRY[name] = self

    # Control flow and custom rules transform their regions themselves: one slot each.
    reverse_rule = _node_rule_slot("vjp", "``reverse(node, ins) -> (outs, backward)`` when ``vjp`` is a "
                                          "``NodeRule``, else None.")
    forward_rule = _node_rule_slot("jvp", "``forward(node, ins, tangents) -> (outs, out_tangents)`` when "
                                          "``jvp`` is a ``NodeRule``, else None.")

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"

    def bind(self, *args, **params):
        """Apply the primitive: eagerly with NumPy, or as a DXIR node when any
        argument is a symbolic ``Value``."""
        value_type = _VALUE_TYPE or _load_value_type()
        foreign = False
        for a in args:
            t = type(a)
            if t is value_type:
                from .builder import current_builder
                return current_builder(a).add(self, args, params)
            if t is not _NDARRAY and t not in _WEAK and t not in _CONTAINERS and not isinstance(a, _GENERIC):
                foreign = foreign or hasattr(a, "__array__")
        if foreign:       # e.g. a JAX device array: computed on the host with NumPy, never dispatched away
            args = tuple(_np.asarray(a) if (type(a) is not _NDARRAY and hasattr(a, "__array__")
                                            and not isinstance(a, _GENERIC)) else a for a in args)
        return self.apply_impl(*args, **params)

    def apply_impl(self, *args, **params):
        """``impl`` on concrete ``args``, keeping Python scalars weak (NEP 50): folding
        ``2.0 - 1.0`` gives the Python float 1.0, not a float64 that would later clash
        with float32 arrays. The interpreter evaluates every node through this, so a
        counter ``n = n + 1.0`` of a graph stays weak there as it does in eager code."""
        out = self.impl(*args, **params)
        if args and not self.multiple_results and all(type(a) in _WEAK for a in args):
            if getattr(out, "shape", None) == ():
                py = out.item()
                # only where the Python scalar means the same dtype (not a uint32 key word)
                if _np.asarray(py).dtype == out.dtype:
                    return py
        return out

    def abstract_eval(self, *avals, **params):
        key = _aval_key(self, avals, params)
        if key is not None:
            hit = _AVAL_MEMO.get(key)
            if hit is not None:
                return hit
        from .aval import AbstractValue
        shapes = self.shape_rule(*avals, **params)
        dtypes = self.dtype_rule(*avals, **params)
        if self.multiple_results:
            out = tuple(AbstractValue(d, s) for s, d in zip(shapes, dtypes))
        else:
            out = AbstractValue(dtypes, shapes)
        if key is not None:
            if len(_AVAL_MEMO) >= _AVAL_MEMO_SIZE:
                _AVAL_MEMO.clear()
            _AVAL_MEMO[key] = out
        return out

    def rule(self, transform: str):
        """The rule for ``transform`` ("vjp", "jvp", "batch"), or NoRuleError."""
        r = getattr(self, transform)
        if r is None:
            label = {"vjp": "VJP", "jvp": "JVP", "batch": "batching", "lower": "StableHLO lowering"}[transform]
            from .rules import refusal
            raise NoRuleError(f"no {label} rule for `{self.name}`{refusal(self.name, transform)}")
        return r


class NodeRule:
    """A derivative rule over the whole node (its regions included), not its operands."""
    __slots__ = ("fn",)

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)

    def __repr__(self) -> str:
        return f"NodeRule({getattr(self.fn, '__qualname__', self.fn)!r})"


def def_vjp(prim: Primitive):
    """Decorator: register ``fn`` as ``prim``'s VJP rule."""
    def register(fn):
        prim.vjp = fn
        return fn
    return register


def def_jvp(prim: Primitive):
    def register(fn):
        prim.jvp = fn
        return fn
    return register


def def_batch(prim: Primitive):
    def register(fn):
        prim.batch = fn
        return fn
    return register
