"""Specialisation rules for primitives that concrete shapes decide.

The shape-only helpers of derivative code (``sum_to``, ``dim_size``, ``grad_seed``
...) need no rule here: they are composites (``tlaloc._prims.composites``), whose
body the builder inlines when specialisation re-binds them at concrete shapes.

Each rule takes the node's operands (values or constants) and params and
returns its result(s) built with ``emit``, or ``NotImplemented`` to keep the
node as it is. Rules run only when some operand is a value (nodes of
constants are folded instead).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from .builder import Value
from .specialize import concrete_rule, dtype, emit, is_static, register
from .specialize import shape as shape_of


@register("stop_gradient", "copy", "stack_ys")
def _identity(x):
    return x


@register("check_input_shape", "check_same_shape")
def _shape_check(*operands, **params):
    """Shapes are concrete here: a layer input or a loss operand that would broadcast into a result
    of another shape is refused at the user's file:line:col (``_prims/checks.py``); a shape that
    fits leaves the first operand, and the check vanishes from the compiled program."""
    from .._prims import checks
    from ..errors import ArgumentError, ShapeError, at_location
    from .builder import current_builder
    shapes = [x.aval.shape if type(x) is Value else np.shape(x) for x in operands]
    if any(s is None or any(type(d) is not int for d in s) for s in shapes):
        return NotImplemented            # a round of a loop's fixed point: checked once it is typed
    if len(operands) == 1:
        x = operands[0]
        msg = checks.input_dtype_message(x.aval.dtype if type(x) is Value else np.result_type(x), **params)
        if msg is not None:
            raise at_location(ArgumentError(msg), current_builder().loc)
        msg, error = checks.input_shape_message(shapes[0], **params), ShapeError
    else:
        msg, error = checks.same_shape_message(*shapes, **params), ArgumentError
    if msg is not None:
        raise at_location(error(msg), current_builder().loc)
    return operands[0]


@register("check_labels")
def _check_labels(labels, num_classes, **params):
    """Compiled code cannot check label values, but their dtype is known here: float labels (which
    would match no class, or be truncated to another row) are refused at the user's file:line:col."""
    from .._prims import checks
    from ..errors import ArgumentError, at_location
    from .builder import current_builder
    dt = dtype(labels)
    if dt is None or np.dtype(dt).kind in "iu":
        return NotImplemented
    msg = checks.bad_label_message(np.zeros((), dt), 1, params.get("ignore_index"), params.get("who", "cross_entropy"))
    raise at_location(ArgumentError(msg), current_builder().loc)


@register("zeros_like")
def _zeros_like(x):
    """The zero of a Python scalar is a Python scalar (weak), as the cotangent of a
    returned ``1.5`` must not make the other path of an ``if`` float64."""
    if type(x) is not Value or not (x.aval.weak and x.aval.shape == ()) or x.aval.dtype is None:
        return NotImplemented
    kind = np.dtype(x.aval.dtype).kind
    return False if kind == "b" else 0 if kind in "iu" else 0.0


@register("name_axes")
def _name_axes(x, *, names):
    return x            # axis names are for sharding (Shardy), not yet lowered


@register("arange")
def _arange(start, stop, step, *, dtype):
    from ..errors import NoRuleError
    if not all(is_static(v) for v in (start, stop, step)):
        raise NoRuleError("arange with a bound known only at run time has a size known only at run time; "
                          "compiled code needs a static size")
    return NotImplemented


@register("full")
def _full(*dims, fill_value, dtype):
    from ..errors import NoRuleError
    if not all(is_static(d) for d in dims):
        raise NoRuleError("full/zeros/ones with a size known only at run time cannot be compiled; "
                          "use a size computed from static shapes")
    shape = tuple(int(d) for d in dims)
    return emit("broadcast_to", np.asarray(fill_value, dtype=dtype), shape=shape)


@register("odeint", "odeint_adjoint", "fixed_point")
def _host_solver(*ins, **params):
    """Nodes that iterate on the host with SciPy or a data-dependent loop (``_frontend/odeint.py``,
    ``_frontend/fixed_point.py``): refused by name before their unspecialised regions are read."""
    from ..errors import NoRuleError
    raise NoRuleError("odeint and fixed_point run on the host (SciPy's LSODA, a data-dependent number of "
                      "iterations); tl.jit cannot compile them: call the gradient eagerly, without tl.jit")


# -- identities -----------------------------------------------------------------------

@register("convert")
def _convert(x, *, dtype):
    return x if not is_static(x) and x.aval.dtype == np.dtype(dtype) else NotImplemented


@register("broadcast_to")
@concrete_rule
def _broadcast_to(x, *, shape):
    return x if shape_of(x) == tuple(shape) else NotImplemented


@register("reshape")
@concrete_rule
def _reshape(x, *, shape):
    return x if shape_of(x) == tuple(shape) else NotImplemented


@register("transpose")
@concrete_rule
def _transpose(x, *, axes):
    r = len(shape_of(x))
    if axes is None:
        return x if r <= 1 else NotImplemented
    return x if tuple(a % r for a in axes) == tuple(range(r)) else NotImplemented


@register("swapaxes")
@concrete_rule
def _swapaxes(x, *, axis1, axis2):
    r = len(shape_of(x))
    perm = list(range(r))
    a, b = axis1 % r, axis2 % r
    perm[a], perm[b] = perm[b], perm[a]
    return emit("transpose", x, axes=tuple(perm))


# -- NaN-safe products ------------------------------------------------------------------

def _finite_nonzero(c) -> bool:
    a = np.asarray(c)
    return bool(np.all(np.isfinite(a)) and np.all(a != 0)) if a.dtype.kind in "fc" else bool(np.all(a != 0))


def _masked(op: str, a, b, zero_when):
    """``op(a, b)`` with 0 where ``zero_when`` (operands that are exact zeros) holds; the mask is
    left out where no NaN can arise (integers, or every such operand a finite non-zero constant)."""
    if dtype(a) is None or dtype(b) is None:
        return NotImplemented
    out = emit(op, a, b)
    if not _dt.is_inexact(dtype(out)):
        return out
    if all(is_static(x) and _finite_nonzero(x) for x in zero_when):
        return out
    zero = None
    for x in zero_when:
        eq = emit("equal", x, 0)
        zero = eq if zero is None else emit("logical_or", zero, eq)
    return emit("select", zero, emit("zeros_like", out), out)


@register("safe_mul")
def _safe_mul(a, b):
    """``a * b`` where an exact zero in either factor gives 0 (never 0 * inf = NaN)."""
    static = [x for x in (a, b) if is_static(x)]
    unmasked = bool(static) and all(_finite_nonzero(c) for c in static)     # c * 0 = 0, c * inf = inf
    return _masked("multiply", a, b, static if unmasked else (a, b))


@register("safe_div")
def _safe_div(a, b):
    """``a / b`` where ``a == 0`` gives 0 (also where ``b == 0``)."""
    return _masked("divide", a, b, (a,))


# -- indexing: operands that became constants move into the static spec -------------------

def _fold_spec(spec, dyn):
    """Constant scalar integer operands of ``spec`` become static entries.

    Returns ``(spec, dyn)`` with the remaining dynamic operands renumbered.
    """
    keep, new_index = [], {}

    def static_int(j):
        v = dyn[j]
        return (is_static(v) and np.ndim(v) == 0 and np.asarray(v).dtype.kind in "iu"
                and not isinstance(v, (bool, np.bool_)))

    def ref(j):
        if j not in new_index:
            new_index[j] = len(keep)
            keep.append(dyn[j])
        return ("d", new_index[j])

    def bound(b):
        if isinstance(b, tuple):
            offset = b[2] if b[0] == "o" else 0           # a window's stop, x[i:i + c] (indexing.py)
            if static_int(b[1]):
                return int(dyn[b[1]]) + offset
            r = ref(b[1])
            return ("o", r[1], offset) if b[0] == "o" else r
        return b

    out = []
    for e in spec:
        if e[0] == "d":
            out.append(("i", int(dyn[e[1]])) if static_int(e[1]) else ref(e[1]))
        elif e[0] == "s":
            out.append(("s", bound(e[1]), bound(e[2]), bound(e[3])))
        else:
            out.append(e)
    return tuple(out), keep


@register("getitem")
def _getitem(x, *dyn, spec):
    new_spec, keep = _fold_spec(spec, list(dyn))
    if new_spec == spec:
        return NotImplemented
    return emit("getitem", x, *keep, spec=new_spec)


def _index_add(x, v, *dyn, spec):
    new_spec, keep = _fold_spec(spec, list(dyn))
    return NotImplemented if new_spec == spec else emit("index_add", x, v, *keep, spec=new_spec)


def _index_set(x, v, *dyn, spec):
    masked = _masked_fill(x, v, dyn, spec)
    if masked is not NotImplemented:
        return masked
    new_spec, keep = _fold_spec(spec, list(dyn))
    return NotImplemented if new_spec == spec else emit("index_set", x, v, *keep, spec=new_spec)


def _masked_fill(x, v, dyn, spec):
    """``x[mask] = v`` with ``mask`` a boolean array over x's leading axes and ``v`` one value: NumPy's
    result is ``where(mask, v, x)`` (the mask given trailing unit axes), whose size is x's, so
    compiled and batched code can express it, where the general masked write (``v`` one value per
    True entry) has a size known only at run time. ``v`` is cast to x's dtype, as NumPy's assignment
    casts it. NotImplemented for any other index."""
    if len(spec) != 1 or spec[0][0] != "d":
        return NotImplemented
    mask = dyn[spec[0][1]]
    m_dtype, m_shape, x_shape = dtype(mask), shape_of(mask), shape_of(x)
    one_value = v.aval.shape == () if type(v) is Value else np.ndim(v) == 0
    if m_dtype is None or m_dtype.kind != "b" or m_shape is None or x_shape is None or not one_value:
        return NotImplemented
    k = len(m_shape)
    if k == 0 or k > len(x_shape) or tuple(m_shape) != tuple(x_shape[:k]):
        return NotImplemented               # NumPy refuses a mask of another shape: the usual path says so
    x_dtype = dtype(x)
    if type(v) is Value:
        if v.aval.dtype != x_dtype:
            v = emit("convert", v, dtype=x_dtype)
    else:
        v = np.asarray(v).astype(x_dtype)
    if k < len(x_shape):
        mask = emit("reshape", mask, shape=tuple(m_shape) + (1,) * (len(x_shape) - k))
    return emit("select", mask, v, x)


register("index_add")(_index_add)
register("index_set")(_index_set)
