"""Shape queries along a padded axis give the valid length (``tlaloc._jit.bounded``).

``x.shape[i]`` (``dim_size``), the count of ``mean`` (``reduced_count``) and
``broadcast_like(x, like)`` of a value with a padded axis are the bounded-axis
rules of these composites (``tlaloc._prims.composites``): where the axis they
read is padded they give the valid length, an ``int32`` input of the program,
instead of the bucket size; elsewhere their body is built as usual. Registered
in ``bounded_rules.RULES`` when ``tlaloc._core.rules.ensure_rules`` loads this module.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from .._core.builder import Value, current_builder
from .._core.primitive import REGISTRY
from ..errors import TlalocError
from .bounded_rules import RULES, _axes, _shape


def _dim_size(tr, b, prim, args, params, in_tags):
    tags = in_tags[0]
    name = tags[params["axis"] % len(tags)]
    return b.add_plain(prim, args, params) if name is None else tr.length(name, np.int64)


def _reduced_count(tr, b, prim, args, params, in_tags):
    x, tags = args[0], in_tags[0]
    axes = _axes(params, len(tags))
    padded = [tags[a] for a in axes if tags[a] is not None]
    if not padded:
        return b.add_plain(prim, args, params)
    dt = np.dtype(x.aval.dtype) if _dt.is_float(x.aval.dtype) else np.dtype(np.float64)
    count = np.asarray(int(np.prod([_shape(x)[a] for a in axes if tags[a] is None])), dt)
    for name in padded:
        count = b.add_plain(REGISTRY["multiply"], [count, tr.length(name, dt)], {})
    return count


def _broadcast_like(tr, b, prim, args, params, in_tags):
    out = b.add_plain(prim, args, params)
    like, like_tags = args[1], in_tags[1]
    if like_tags is not None and _shape(out) == _shape(like):
        out = tr.tag(_as_node(out), like_tags)
    return out


def _as_node(x):
    """``x`` as a value of the program: a constant (folded while specialising) becomes a
    ``broadcast_to`` node, so that its padded axes can be tagged."""
    if type(x) is Value:
        return x
    a = np.asarray(x)
    scalar = a.reshape(-1)[:1].reshape(()) if a.size and np.all(a == a.reshape(-1)[0]) else None
    if scalar is None:
        raise TlalocError(f"bounded axes: a constant of shape {a.shape} spans a padded axis")
    return current_builder().add(REGISTRY["broadcast_to"], [scalar], {"shape": a.shape})


RULES.update({"dim_size": _dim_size, "reduced_count": _reduced_count, "broadcast_like": _broadcast_like})
