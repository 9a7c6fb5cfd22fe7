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
from ..errors import ArgumentError


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


def _check_impl(labels, num_classes, *, ignore_index, who):
    msg = bad_label_message(labels, num_classes, ignore_index, who)
    if msg is not None:
        raise ArgumentError(msg)
    return labels


check_labels_p = Primitive("check_labels", impl=_check_impl, hlo=None,
                           shape_rule=lambda labels, n, **_: labels.shape,
                           dtype_rule=lambda labels, n, **_: labels.dtype)
check_labels_p.vjp = lambda g, labels, n, out, **_: (None, None)
check_labels_p.jvp = lambda t, labels, n, out, **_: None


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


def _cotangent_impl(bar, arg, *, name, index):
    msg = cotangent_message(bar, arg, name=name, index=index)
    if msg is not None:
        from ..errors import ShapeError
        raise ShapeError(msg)
    return bar


check_cotangent_p = Primitive("check_cotangent", impl=_cotangent_impl, hlo=None,
                              shape_rule=lambda bar, arg, **_: bar.shape,
                              dtype_rule=lambda bar, arg, **_: bar.dtype)
check_cotangent_p.vjp = lambda g, bar, arg, out, **_: (g, None)
check_cotangent_p.jvp = lambda t, bar, arg, out, **_: t[0]


def _cotangent_batch(args, dims, **params):
    if dims[0] == dims[1]:
        return check_cotangent_p.bind(*args, **params), dims[0]
    return args[0], dims[0]          # one side batched: shapes differ by the batch axis; not checked here


check_cotangent_p.batch = _cotangent_batch


def check_cotangent(bar, arg, name, index):
    """``bar`` unchanged; raises ShapeError (where it runs on arrays) unless it has ``arg``'s
    shape and (for floats) dtype."""
    return check_cotangent_p.bind(bar, arg, name=name, index=index)
