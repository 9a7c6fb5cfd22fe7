"""Run-time checks on concrete values: identity primitives that raise where NumPy runs them.

``check_labels(labels, num_classes, ignore_index=...)`` returns ``labels`` unchanged and
raises ``ArgumentError`` when a label is outside ``[0, num_classes)`` and is not
``ignore_index``. Eagerly and wherever a graph is interpreted or rendered to Python
(``tl.grad`` called on arrays), the check runs; compiled code (StableHLO) cannot raise,
so the lowering is the identity and callers must make an invalid value visible
(``nn.cross_entropy`` returns NaN for it). No derivative flows into integer labels.
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


def bad_label_message(labels, num_classes, ignore_index, who) -> str | None:
    """The error text for the first out-of-range label in concrete ``labels``, or None."""
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iu":
        return (f"{who}: labels must be integer class indices, got dtype {labels.dtype}; "
                f"convert them with .astype(np.int64) (probabilities as targets are not supported)")
    n = int(num_classes)
    bad = (labels < 0) | (labels >= n)
    if ignore_index is not None:
        bad &= labels != ignore_index
    if not bad.any():
        return None
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    ignore = "" if ignore_index is None else f" (or ignore_index={ignore_index})"
    return (f"{who}: labels must be in [0, {n}){ignore} for logits with {n} classes, but "
            f"labels{list(where)} = {int(labels[where] if where else labels)} ({int(bad.sum())} bad in all); "
            f"check the label encoding, or pass ignore_index= for padding labels")


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
