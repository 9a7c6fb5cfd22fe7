"""StableHLO lowerings of ``argsort``, ``take_along_axis`` and ``add_along_axis``.

``argsort``: a stable ``stablehlo.sort`` of (x, iota) along
the axis, whose comparator puts NaN after every number ascending (before every
number descending), NumPy's order. The iota operand rides along as the result.
``take_along_axis``/``add_along_axis``: traced at the node's concrete shapes as
advanced indexing (``getitem``/``index_add`` with an arange per other axis).
"""
from __future__ import annotations

from .._prims.sorting import index_tuple
from .stablehlo import out_aval
from .stablehlo_serving import lower_by_reference


def _argsort(em, node, x):
    it, sh = out_aval(node)
    axis = node.params["axis"] % max(len(sh), 1)
    dt = node.inputs[0].aval.dtype
    v = em.value(x, dt, sh)
    idx = em.op("stablehlo.iota", [], (it, sh), attrs={"iota_dimension": f"{axis} : i64"})
    with em.region([(dt, ()), (dt, ()), (it, ()), (it, ())]) as ((a, b, _ai, _bi), body):
        if node.params["descending"]:
            a, b = b, a                      # a before b when b comes before a ascending
        nan_a, nan_b = em.compare("NE", a, a), em.compare("NE", b, b)
        number_before_nan = em.binary("stablehlo.and", em.unary("stablehlo.not", nan_a), nan_b)
        em.ret([em.binary("stablehlo.or", em.compare("LT", a, b), number_before_nan)])
    outs = em.op("stablehlo.sort", [v, idx], [(dt, sh), (it, sh)],
                 attrs={"dimension": f"{axis} : i64", "is_stable": "true"}, regions=[body])
    return outs[1]


def _take_reference(x, idx, *, axis):
    from .. import numpy as tnp
    return tnp._getitem(x, index_tuple(x.aval.shape, idx, axis))


def _add_reference(like, idx, g, *, axis):
    from .. import numpy as tnp
    from .._prims.indexing import index_add
    full = list(g.aval.shape)
    a = axis % len(full)
    full[a] = like.aval.shape[a]
    out = tnp.zeros(tuple(full), dtype=g.aval.dtype)
    out = index_add(out, index_tuple(tuple(full), tnp.broadcast_to(idx, g.aval.shape), axis), g)
    extra = tuple(i for i, (o, m) in enumerate(zip(full, like.aval.shape)) if o != m)
    return tnp.sum(out, axis=extra, keepdims=True) if extra else out


LOWERINGS = {"argsort": _argsort,
             "take_along_axis": lower_by_reference(_take_reference),
             "add_along_axis": lower_by_reference(_add_reference)}
