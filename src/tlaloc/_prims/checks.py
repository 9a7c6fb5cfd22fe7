"""Checks as identity primitives: they raise where NumPy runs them, or once shapes are known.

``check_labels(labels, num_classes, ignore_index=...)`` returns ``labels`` unchanged and
raises ``ArgumentError`` when a label is outside ``[0, num_classes)`` and is not
``ignore_index``. Eagerly and wherever a graph is interpreted or rendered to Python
(``tl.grad`` called on arrays), the check runs; compiled code (StableHLO) cannot raise,
so the lowering is the identity and callers must make an invalid value visible
(``nn.cross_entropy`` returns NaN for it). No derivative flows into integer labels.

``check_input_shape(x, ...)`` and ``check_same_shape(a, b, ...)`` return their first operand
unchanged and refuse shapes that NumPy would broadcast into a result of another shape (a
``LayerNorm(4)`` given ``(3, 1)``, ``mse_loss`` of ``(4, 1)`` against ``(4,)``). A layer checks a
known shape itself; it binds these only where the shape is not known yet (a graph built at
definition time, for ``tl.grad`` and ``tl.jit``). There the check runs when the graph is
interpreted on arrays, and when ``tl.jit`` specialises it to concrete shapes, where it is
refused at the user's ``file:line:col`` and the node then vanishes (``_core/specialize_rules``).
Under ``vmap`` the batch axes are named in ``batch_axes`` and left out of the comparison.
"""
from __future__ import annotations

import numpy as np

from .._core.primitive import Primitive
from ..errors import ArgumentError, ShapeError


def _identity_check(name, message, error, *, passes_cotangent):
    """A primitive ``name(first, second, **params)`` that returns ``first`` unchanged and raises
    ``error(message(first, second, **params))`` where it runs on arrays and ``message`` is not None.
    Its output has ``first``'s shape and dtype; ``second`` takes no derivative, and ``first`` takes
    the cotangent and tangent through when ``passes_cotangent`` (none flows otherwise)."""
    def impl(first, second, **params):
        msg = message(first, second, **params)
        if msg is not None:
            raise error(msg)
        return first

    prim = Primitive(name, impl=impl, hlo=None,
                     shape_rule=lambda first, second, **_: first.shape,
                     dtype_rule=lambda first, second, **_: first.dtype)
    if passes_cotangent:
        prim.vjp = lambda g, first, second, out, **_: (g, None)
        prim.jvp = lambda t, first, second, out, **_: t[0]
    else:
        prim.vjp = lambda g, first, second, out, **_: (None, None)
        prim.jvp = lambda t, first, second, out, **_: None
    return prim


#: ``who -> (what the values are called, what bounds them)`` for callers other than cross_entropy
_WORDING = {"one_hot": ("labels", "num_classes={n}"), "Embedding": ("ids", "num_embeddings={n}")}


def bad_label_message(labels, num_classes, ignore_index, who) -> str | None:
    """The error text for the first out-of-range label in concrete ``labels``, or None."""
    labels = np.asarray(labels)
    noun, bound = _WORDING.get(who, ("labels", "logits with {n} classes"))
    if labels.dtype.kind not in "iu":
        why = " (probabilities as targets are not supported)" if who == "cross_entropy" else \
            " (a float is not rounded to an index)"
        return (f"{who}: {noun} must be {'integers' if noun == 'ids' else 'integer class indices'}, got dtype "
                f"{labels.dtype}; convert them with .astype(np.int64){why}")
    n = int(num_classes)
    bad = (labels < 0) | (labels >= n)
    if ignore_index is not None:
        bad &= labels != ignore_index
    if not bad.any():
        return None
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    ignore = "" if ignore_index is None else f" (or ignore_index={ignore_index})"
    fix = "check the label encoding, or pass ignore_index= for padding labels" if who == "cross_entropy" else \
        ("negative ids do not wrap around; check the encoding" if noun == "ids" else "check the label encoding")
    return (f"{who}: {noun} must be in [0, {n}){ignore} for {bound.format(n=n)}, but "
            f"{noun}{list(where)} = {int(labels[where] if where else labels)} ({int(bad.sum())} bad in all); {fix}")


check_labels_p = _identity_check("check_labels", bad_label_message, ArgumentError, passes_cotangent=False)


def _labels_batch(args, dims, **params):
    if dims[1] is not None:
        from ..errors import NoRuleError
        raise NoRuleError("no batching rule for `check_labels` with a batched class count")
    return check_labels_p.bind(*args, **params), dims[0]


check_labels_p.batch = _labels_batch


def check_labels(labels, num_classes, ignore_index=None, who="cross_entropy"):
    """``labels`` unchanged; raises ArgumentError (where it runs on arrays) for a label outside
    ``[0, num_classes)`` other than ``ignore_index``."""
    return check_labels_p.bind(labels, num_classes, ignore_index=ignore_index, who=who)


# -- custom_vjp: a bwd rule's cotangent must match its argument ------------------------------------

def cotangent_message(bar, arg, *, name, index) -> str | None:
    """The error text when ``bar`` (concrete) does not have ``arg``'s shape and dtype, or None."""
    bs, as_ = np.shape(bar), np.shape(arg)
    bd, ad = np.asarray(bar).dtype, np.asarray(arg).dtype
    if bs == as_ and (bd == ad or bd.kind != "f" or ad.kind != "f"):
        return None
    return (f"the bwd rule of `{name}` returned, for argument {index}, a cotangent of shape {bs} and dtype "
            f"{bd.name}, but the argument has shape {as_} and dtype {ad.name}; each cotangent must have its "
            f"argument's shape and dtype (sum over broadcast axes and .astype(x.dtype) in bwd)")


check_cotangent_p = _identity_check("check_cotangent", cotangent_message, ShapeError, passes_cotangent=True)


def _cotangent_batch(args, dims, **params):
    if dims[0] == dims[1]:
        return check_cotangent_p.bind(*args, **params), dims[0]
    return args[0], dims[0]          # one side batched: shapes differ by the batch axis; not checked here


check_cotangent_p.batch = _cotangent_batch


def check_cotangent(bar, arg, name, index):
    """``bar`` unchanged; raises ShapeError (where it runs on arrays) unless it has ``arg``'s
    shape and (for floats) dtype."""
    return check_cotangent_p.bind(bar, arg, name=name, index=index)


# -- shapes that would broadcast into a result of another shape ------------------------------------

def _example_shape(shape, batch_axes):
    """``shape`` without the ``batch_axes`` (vmap's), or None unless every dim is a known int."""
    if shape is None:
        return None
    shape = tuple(shape)
    if any(type(d) is not int for d in shape):
        return None
    drop = {a % len(shape) for a in batch_axes} if shape else set()
    return tuple(d for i, d in enumerate(shape) if i not in drop)


def input_shape_message(shape, *, who, what, trailing=(), rank=None, batch_axes=()) -> str | None:
    """The error text when a layer's input ``shape`` lacks the ``rank`` or does not end in
    ``trailing``, or None (also while the shape is not known)."""
    shape = _example_shape(shape, batch_axes)
    if shape is None:
        return None
    n = len(trailing)
    if rank is not None and len(shape) != rank:
        return (f"{who}: the input must be {what}, got shape {shape} (rank {len(shape)}, expected "
                f"{rank}); reshape it, e.g. x[None] for a single example")
    if len(shape) < n or tuple(shape[len(shape) - n:]) != tuple(trailing):
        return (f"{who}: the input must be {what}, got shape {shape}; its trailing axes must be "
                f"{tuple(trailing)} (the layer's sizes); check the layer sizes or transpose the input")
    return None


def same_shape_message(a_shape, b_shape, *, who, names, batch_axes=((), ())) -> str | None:
    """The error text when two operands that must not broadcast have different shapes, or None."""
    a, b = _example_shape(a_shape, batch_axes[0]), _example_shape(b_shape, batch_axes[1])
    if a is None or b is None or a == b:
        return None
    first, second = names
    return (f"{who}: {first} and {second} must have the same shape, got {a} and {b} (broadcasting them "
            f"would compare every {first} with every {second}); reshape one, e.g. "
            f"{second}.reshape({first}.shape)")


def input_dtype_message(dtype, *, who, what, **_) -> str | None:
    """The error text when a float layer's input has an integer or bool ``dtype`` (NumPy would promote
    it to float64 against float32 weights; torch refuses it), or None (also while it is not known)."""
    from ..dtypes import is_inexact
    if dtype is None or is_inexact(dtype):
        return None
    return (f"{who}: the input must be a floating-point array {what}, got {np.dtype(dtype)}; convert it first, "
            f"e.g. x.astype(np.float32) (NumPy would promote it to float64 against float32 weights)")


def _input_shape_impl(x, **params):
    if isinstance(x, (list, tuple)):
        # regression: np.result_type read a nested list as a structured dtype spec ("Field elements
        # must be 2- or 3-tuples")
        raise ArgumentError(f"{params.get('who', 'layer')}: the input must be an array {params.get('what', '')}, "
                            f"got a Python {type(x).__name__}; convert it first, e.g. np.asarray(x, np.float32)")
    msg = input_dtype_message(np.result_type(x), **params)
    if msg is not None:
        raise ArgumentError(msg)
    msg = input_shape_message(np.shape(x), **params)
    if msg is not None:
        raise ShapeError(msg)
    return x


def _same_shape_impl(a, b, **params):
    msg = same_shape_message(np.shape(a), np.shape(b), **params)
    if msg is not None:
        raise ArgumentError(msg)
    return a


check_input_shape_p = Primitive("check_input_shape", impl=_input_shape_impl, hlo=None,
                                shape_rule=lambda x, **_: x.shape, dtype_rule=lambda x, **_: x.dtype)
check_input_shape_p.vjp = lambda g, x, out, **_: (g,)
check_input_shape_p.jvp = lambda t, x, out, **_: t[0]

check_same_shape_p = Primitive("check_same_shape", impl=_same_shape_impl, hlo=None,
                               shape_rule=lambda a, b, **_: a.shape, dtype_rule=lambda a, b, **_: a.dtype)
check_same_shape_p.vjp = lambda g, a, b, out, **_: (g, None)
check_same_shape_p.jvp = lambda t, a, b, out, **_: t[0]


def _with_batch_axis(axes: tuple, x, d) -> tuple:
    """``axes`` (positions of earlier batch axes) once a batch axis is at ``d`` of ``x``."""
    if d is None:
        return tuple(axes)
    if d < 0:
        d += len(x.aval.shape if hasattr(x, "aval") else np.shape(x))
    return tuple(a + (a >= d) for a in axes) + (d,)


def _input_shape_batch(args, dims, *, batch_axes, **params):
    x, d = args[0], dims[0]
    return check_input_shape_p.bind(x, batch_axes=_with_batch_axis(batch_axes, x, d), **params), d


def _same_shape_batch(args, dims, *, batch_axes, **params):
    axes = tuple(_with_batch_axis(ax, x, d) for ax, x, d in zip(batch_axes, args, dims))
    return check_same_shape_p.bind(*args, batch_axes=axes, **params), dims[0]


check_input_shape_p.batch = _input_shape_batch
check_same_shape_p.batch = _same_shape_batch


def check_input_shape(x, who: str, what: str, trailing: tuple = (), rank=None):
    """``x`` unchanged; raises ShapeError where its shape is known (on arrays, and when ``tl.jit``
    specialises) and lacks the ``rank`` or does not end in ``trailing``."""
    return check_input_shape_p.bind(x, who=who, what=what, trailing=tuple(int(t) for t in trailing),
                                    rank=None if rank is None else int(rank), batch_axes=())


def check_same_shape(a, b, who: str, names: tuple):
    """``a`` unchanged; raises ArgumentError where both shapes are known and differ."""
    return check_same_shape_p.bind(a, b, who=who, names=tuple(names), batch_axes=((), ()))
