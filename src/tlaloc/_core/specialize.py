"""Specialisation: a DXIR graph rebuilt at concrete shapes and dtypes.

Graphs built at definition time know neither ranks nor dtypes (avals with
``shape=None``). A compiled back end needs both, so ``specialize(graph,
in_avals)`` re-binds every node through a fresh ``Builder`` with the argument
avals (``f64[3,4]``), recursing into regions, and on the way

* inlines the composites of derivative code (``tlaloc._prims.composites``), as
  the builder does once shapes are known: ``dim_size``, ``reduced_count`` become
  constants; ``sum_to``/``broadcast_like``/``reshape_like``/``expand_reduced``/
  ``cast_like`` become ``reduce_sum``/``broadcast_to``/``reshape``/``convert``
  or vanish; ``matmul_t_lhs``/``matmul_t_rhs`` become a ``matmul``;
* ``matmul`` and ``einsum`` become ``dot_general``
  with ``transpose``/``reshape``/``reduce_sum``; ``safe_mul``/``safe_div``
  become ``select(... == 0, 0, a * b)``; ``getitem`` operands that became
  constants move into the static index spec (see ``specialize_rules``);
* evaluates nodes whose operands are all constants (small results only);
* inlines the branch a constant ``cond`` predicate picks, gives a ``for_range``
  with constant bounds a static trip count (the ``ys`` stacks get it as their
  leading dim), iterates loop carries to a fixed point of their avals, and
  replaces ``UNDEF`` (a value a path never assigns) with zeros of the type the
  other side gives it (see ``specialize_control``).

The result is a graph of the same primitives (so the interpreter still runs
it: ``eval_graph(specialize(g, avals), *args) == eval_graph(g, *args)``) in
which every var has a dtype and integer dims. Static inputs (``Static(v)`` in
``in_avals``) are bound as constants and are not inputs of the result.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, GraphError, NoRuleError, TlalocError, at_location
from .aval import AbstractValue
from .aval import of as _aval_of
from .builder import Builder, Value, current_builder, rebinding
from .control import UNDEF
from .graph import Graph, Literal, Var
from .passes import dce
from .primitive import REGISTRY
from .rules import ensure_rules
from .verifier import verify
from .._prims._expand import gives_up, shape  # noqa: F401  (shape: for the rules)

#: Constant folding keeps results up to this many elements; larger ones stay
#: nodes (a literal that big would be written into the program text).
FOLD_LIMIT = 4096

#: ``name -> rule(*ins, **params)``: a rule returns the node's result(s)
#: (built with ``emit``), or ``NotImplemented`` to bind the node unchanged.
RULES: dict = {}


class Static:
    """An input bound to a constant while specialising (``static_argnums``)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return f"Static({self.value!r})"


def specialize(graph: Graph, in_avals, name: str | None = None) -> Graph:
    """``graph`` rebuilt with concrete input avals.

    Args:
      graph: a DXIR graph (inputs may have unknown avals).
      in_avals: one entry per input: a concrete ``AbstractValue``, or
        ``Static(value)`` to bind the input to a constant.
    Returns:
      A verified graph whose inputs are the non-static inputs, in order, and
      whose every var is concrete (dtype and int dims).
    Raises:
      ShapeError / DTypeError: the avals do not fit the program (with the
        user's file:line:col where known).
      NoRuleError: a construct compiled code cannot express (named).
    """
    ensure_rules()
    if len(in_avals) != len(graph.inputs):
        raise TypeError(f"specialize {graph.name}: {len(graph.inputs)} inputs, {len(in_avals)} avals")
    b = Builder(name=name or graph.name)
    with b.active(), rebinding(rebind):
        ins = []
        for v, a in zip(graph.inputs, in_avals):
            if isinstance(a, Static):
                ins.append(a.value)
            else:
                if not a.is_concrete:
                    raise TlalocError(f"specialize: input `{v.hint}` needs a concrete aval, got {a}")
                ins.append(b.new_input(a, v.hint))        # a weak input is a Python number
        outs = run(graph, ins)
        for o, v in zip(outs, graph.outputs):
            if o is UNDEF:
                raise TlalocError(f"{graph.name}: output `{getattr(v, 'hint', None) or '?'}` is not "
                                  f"defined on every path")
        g = b.finish(outs)
    g = dce(g)
    check_concrete(g)
    return verify(g)


def check_concrete(graph: Graph, where: str = "") -> None:
    """Raise ``GraphError`` naming the first var without a dtype or int dims.

    When the unknown size depends on an integer scalar input (``x[:n]`` with ``n`` traced), the
    error names that input and says to mark it static.
    """
    for v in graph.inputs:
        _need_concrete(v, f"{where or graph.name}: input")
    sources = _integer_scalar_sources(graph)
    for node in graph.nodes:
        if node.prim.name == "getitem" and not all(o.aval.is_concrete for o in node.outputs):
            _refuse_mask(node)
        for o in node.outputs:
            _need_concrete(o, f"{where or graph.name}: result of `{node.prim.name}`"
                              + (f" ({node.loc})" if node.loc else ""), sources.get(o.id, ()))
        for region in node.regions():
            check_concrete(region, f"{where or graph.name}.{region.name}")


def _refuse_mask(node) -> None:
    """A ``getitem`` by a boolean mask: its result's size depends on the data (``NoRuleError``
    at the user's line, naming the mask and the alternative)."""
    from .._prims.indexing import MASK_REFUSAL, is_mask
    if any(is_mask(a.aval) for a in node.inputs[1:]):
        raise at_location(NoRuleError(f"boolean-mask indexing {MASK_REFUSAL}"), node.loc)


def _integer_scalar_sources(graph: Graph) -> dict:
    """var id → the names of the 0-d integer inputs of ``graph`` whose values it depends on."""
    deps = {v.id: frozenset([v.hint or "v"]) for v in graph.inputs
            if v.aval.is_concrete and v.aval.shape == () and v.aval.dtype is not None
            and v.aval.dtype.kind in "iub"}
    for node in graph.nodes:
        found = frozenset().union(*(deps.get(a.id, frozenset()) for a in node.inputs
                                    if isinstance(a, Var)))
        if found:
            for o in node.outputs:
                deps[o.id] = found
    return deps


def _need_concrete(v: Var, label: str, int_sources=()) -> None:
    if not v.aval.is_concrete:
        hint = ""
        if int_sources:
            names = ", ".join(f"`{n}`" for n in sorted(int_sources))
            hint = (f"; its size depends on the value of the integer argument {names}: mark it static "
                    f"(tl.jit(f, static_argnums=...)) so that each value compiles its own program")
        raise GraphError(f"{label} `{v.hint or 'v'}` has aval {v.aval} after specialisation; "
                         f"compiled code needs a dtype and a size for every axis{hint}")


# -- running a graph through the rules --------------------------------------------------

def run(graph: Graph, args) -> list:
    """Emit ``graph``'s nodes, specialised, into the active builder; returns its outputs.

    ``args`` are ``Value``s of the active builder or constants. Outputs are
    values, constants, or ``UNDEF``.
    """
    env = {v.id: a for v, a in zip(graph.inputs, args)}

    def read(a):
        if isinstance(a, Literal):
            return UNDEF if a.value is None else a.value
        return env[a.id]

    b = current_builder()
    for node in graph.nodes:
        ins = [read(a) for a in node.inputs]
        with b.at(node.loc):
            try:
                outs = apply(node.prim, ins, dict(node.params))
            except NoRuleError as e:          # a construct compiled code cannot express: where
                raise at_location(e, node.loc) from None
        for old, new in zip(node.outputs, outs):
            if type(new) is Value and new.var.hint is None:
                new.var.hint = old.hint
            env[old.id] = new
    return [read(o) for o in graph.outputs]


def apply(prim, ins, params) -> tuple:
    """Specialise one application of ``prim``; always returns a tuple of results."""
    region = getattr(prim, "inline_region", None)
    if region is not None and isinstance(params.get(region), Graph) and prim.name not in RULES:
        # a coarsened call (custom derivative rules): compiled code runs its body
        body = params[region]
        return tuple(run(body, list(ins[:len(body.inputs)])))
    rule = RULES.get(prim.name)
    if rule is not None and (prim.name in _ALWAYS or any(type(x) is Value for x in ins)):
        out = rule(*ins, **params)
        if out is not NotImplemented:
            return tuple(out) if prim.multiple_results else (out,)
    out = bind(prim, ins, params)
    return tuple(out) if prim.multiple_results else (out,)


_CONTROL = {"cond", "for_range", "while_loop"}
_ALWAYS = _CONTROL | {"full"}          # rules that run even when every operand is a constant


def rebind(prim, args, params):
    """A primitive of a composite's body, through the rules (see ``builder.rebinding``)."""
    out = apply(prim, list(args), dict(params))
    return out if prim.multiple_results else out[0]


def emit(name: str, *args, **params):
    """Apply the primitive ``name`` (through the rules) inside a rule."""
    prim = REGISTRY[name]
    out = apply(prim, list(args), params)
    return out if prim.multiple_results else out[0]


def bind(prim, ins, params):
    """Add ``prim`` as a node (or fold it when every operand is a constant)."""
    for x in ins:
        if x is UNDEF:
            raise TlalocError(f"`{prim.name}` reads a value that is not assigned on this path; "
                              f"assign it on every path before using it")
    if not any(type(x) is Value for x in ins) and prim.name not in _CONTROL:
        out = prim.impl(*ins, **params)
        outs = out if prim.multiple_results else (out,)
        if all(np.size(o) <= FOLD_LIMIT for o in outs):
            return out
        node = add_node(prim, ins, params)
        nodes = node if prim.multiple_results else (node,)
        return node if all(n.aval.is_concrete for n in nodes) else out
    return add_node(prim, ins, params)


def add_node(prim, ins, params):
    """Add ``prim`` as a node even when its operands are constants."""
    out = current_builder().add(prim, list(ins), dict(params))
    outs = out if prim.multiple_results else (out,)
    if not all(type(o) is Value for o in outs):
        return out          # a composite's body gave a constant (a size, a count)
    weak = [_is_weak(x) for x in ins]
    if any(o.aval.dtype is None for o in outs) or (prim.name in ELEMENTWISE and any(weak)):
        _sample_dtypes(prim, ins, params, outs, all(weak))
    return out


#: Primitives whose result dtype NumPy decides from the operands (NEP 50: a
#: Python scalar is weak). Their dtypes are recomputed from samples when an
#: operand is weak, so that a weak ``int`` does not count as a float.
ELEMENTWISE = {"add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "arctan2",
               "remainder", "floor_divide", "less", "less_equal", "greater", "greater_equal", "equal",
               "not_equal", "logical_and", "logical_or", "safe_mul", "safe_div", "select", "clamp"}


def _is_weak(x) -> bool:
    if type(x) is Value:
        return x.aval.weak
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def _sample(x):
    """A 0-d stand-in for ``x`` that NumPy promotes as it would promote ``x``."""
    if type(x) is Value:
        a = x.aval
        if a.weak:
            kind = "f" if a.dtype is None else np.dtype(a.dtype).kind
            return False if kind == "b" else 0 if kind in "iu" else 0.0
        return np.zeros((), a.dtype)
    if np.ndim(x) == 0:
        return x
    return np.asarray(x).reshape(-1)[:1].reshape(())


def _sample_dtypes(prim, ins, params, outs, all_weak) -> None:
    """Give results the dtypes NumPy gives on 0-d samples of the operands (used
    where a dtype rule saw Python scalars: ``where(p, 1.0, 0.0)``, ``i - 1``)."""
    if any(type(x) is Value and x.aval.dtype is None for x in ins):
        return      # a loop variable still being typed: its loop settles it
    try:
        with np.errstate(all="ignore"):
            got = prim.impl(*[_sample(x) for x in ins], **params)
    except Exception:
        if any(o.aval.dtype is None for o in outs):
            raise DTypeError(f"`{prim.name}`: cannot tell the result dtype from Python-scalar operands; "
                             f"give one operand a dtype (e.g. np.float64(1.0))") from None
        return
    got = got if prim.multiple_results else (got,)
    for o, g in zip(outs, got):
        # Python scalars in, a Python scalar out (``n + 1.0`` stays weak, as in Python),
        # though NumPy's implementation hands back a NumPy scalar
        o.var.aval = o.aval.with_(dtype=np.asarray(g).dtype, weak=all_weak and np.ndim(g) == 0)


# -- helpers for rules ------------------------------------------------------------------

def aval(x) -> AbstractValue | None:
    """The aval of a value or constant (``None`` for ``UNDEF``)."""
    if x is UNDEF:
        return None
    if type(x) is Value:
        return x.aval
    return _aval_of(x)


def dtype(x):
    if type(x) is Value:
        return x.aval.dtype
    return np.asarray(x).dtype


def is_static(x) -> bool:
    return type(x) is not Value and x is not UNDEF


#: Decorator: the rule falls back to binding the node when a shape is unknown (``shape``).
concrete_rule = gives_up


def register(*names):
    def deco(fn):
        for n in names:
            RULES[n] = fn
        return fn
    return deco


def zeros(av: AbstractValue):
    """Zeros of aval ``av`` in the active builder (a scalar constant, broadcast)."""
    z = np.zeros((), av.dtype)
    if not av.shape:
        return z
    return add_node(REGISTRY["broadcast_to"], [z], {"shape": tuple(av.shape)})


def coerce(x, av: AbstractValue, what: str = "value"):
    """``x`` as a value of exactly aval ``av`` (dtype converted, scalar broadcast).

    ``UNDEF`` becomes zeros. Only a scalar may be broadcast; any other shape
    difference raises ``ShapeError``-like ``TlalocError`` naming ``what``.
    """
    from ..errors import ShapeError
    if x is UNDEF:
        return zeros(av)
    if is_static(x):
        arr = np.asarray(x)
        if arr.dtype != av.dtype:
            with np.errstate(all="ignore"):
                arr = arr.astype(av.dtype)
        if arr.shape == tuple(av.shape):
            return arr
        if arr.ndim == 0:
            return add_node(REGISTRY["broadcast_to"], [arr], {"shape": tuple(av.shape)})
        raise ShapeError(f"{what}: a constant of shape {arr.shape} where shape {tuple(av.shape)} is needed")
    if not x.aval.is_concrete:
        return x            # a round of a loop's fixed point: the loop retypes it
    out = x
    if x.aval.dtype != av.dtype:
        out = add_node(REGISTRY["convert"], [out], {"dtype": np.dtype(av.dtype)})
    if tuple(x.aval.shape) != tuple(av.shape):
        if x.aval.shape != ():
            raise ShapeError(f"{what} has shape {tuple(x.aval.shape)} here but {tuple(av.shape)} elsewhere; "
                             f"compiled code needs one shape per value")
        out = add_node(REGISTRY["broadcast_to"], [out], {"shape": tuple(av.shape)})
    return out
