"""StableHLO lowerings of scans: cumsum/cumprod/cummax, the product of the
other elements (prod's derivative) and the derivatives of cumprod.

Scans are ``reduce_window`` with a window as long as the axis. The cumprod
derivatives avoid division (exact with zeros): with ``P_j`` the exclusive
prefix product and ``C[j, i] = x_{j+1} ... x_i`` (``i >= j``),

    cumprod_grad:  x̄_j = P_j · Σ_{i ≥ j} C[j, i] ḡ_i
    cumprod_jvp:   ẏ_i = Σ_{j ≤ i} C[j, i] P_j ṫ_j

``C`` is built as an n×n cumprod, so these cost O(n²) per row.
"""
from __future__ import annotations

import numpy as np

from .stablehlo import I64, i64s, out_aval
from .stablehlo_structural import _axes, _extreme, reduce


def cumulative(em, v, axis, op_name, init, reverse=False):
    """Inclusive scan of ``v`` along ``axis`` with ``stablehlo.reduce_window``."""
    n = v.shape[axis]
    if n == 0:             # an empty axis: nothing to scan (a window of 0 does not verify)
        return v
    if reverse:
        v = em.op("stablehlo.reverse", [v], (v.dtype, v.shape), attrs={"dimensions": i64s([axis])})
    r = len(v.shape)
    window = [n if i == axis else 1 for i in range(r)]
    pad = ", ".join(f"[{n - 1 if i == axis else 0}, 0]" for i in range(r))
    body = em.reducer(op_name, v.dtype)
    out = em.op("stablehlo.reduce_window", [v, em.const(init, v.dtype, ())], (v.dtype, v.shape),
                attrs={"window_dimensions": i64s(window), "window_strides": i64s([1] * r),
                       "padding": f"dense<[{pad}]> : tensor<{r}x2xi64>"}, regions=[body])
    if reverse:
        out = em.op("stablehlo.reverse", [out], (v.dtype, v.shape), attrs={"dimensions": i64s([axis])})
    return out


def _cum(op_name, init):
    def rule(em, node, x):
        dt, sh = out_aval(node)
        v = em.value(x, dt)
        start = _extreme(dt, True) if init == "low" else init
        return cumulative(em, v, int(node.params["axis"]) % len(sh), op_name, start, node.params["reverse"])
    return rule


def _prod_others(em, node, x):
    """Product of the other elements along ``axes``: exclusive scans from both ends."""
    dt, sh = out_aval(node)
    v = em.value(x, dt)
    r = len(sh)
    ax = _axes(node.params["axes"], r)
    keep = [i for i in range(r) if i not in ax]
    perm = keep + list(ax)
    t = em.op("stablehlo.transpose", [v], (dt, tuple(sh[i] for i in perm)), attrs={"permutation": i64s(perm)})
    lead = tuple(sh[i] for i in keep)
    n = int(np.prod([sh[i] for i in ax])) if ax else 1
    flat = em.reshape(t, lead + (n,))
    one = em.const(1, dt, ())

    def shifted(scan):       # [1, s0, s1, ..., s_{n-2}]
        low = [0] * len(lead) + [1]
        high = [0] * len(lead) + [-1]
        return em.op("stablehlo.pad", [scan, one], (dt, scan.shape),
                     attrs={"edge_padding_low": i64s(low), "edge_padding_high": i64s(high),
                            "interior_padding": i64s([0] * (len(lead) + 1))})
    axis = len(lead)
    left = shifted(cumulative(em, flat, axis, "stablehlo.multiply", 1))
    rev = em.op("stablehlo.reverse", [flat], (dt, flat.shape), attrs={"dimensions": i64s([axis])})
    right = shifted(cumulative(em, rev, axis, "stablehlo.multiply", 1))
    right = em.op("stablehlo.reverse", [right], (dt, flat.shape), attrs={"dimensions": i64s([axis])})
    res = em.reshape(em.binary("stablehlo.multiply", left, right), t.shape)
    inv = [perm.index(i) for i in range(r)]
    return em.op("stablehlo.transpose", [res], (dt, sh), attrs={"permutation": i64s(inv)})



def _move_last(em, v, axis):
    r = len(v.shape)
    perm = [i for i in range(r) if i != axis] + [axis]
    t = em.op("stablehlo.transpose", [v], (v.dtype, tuple(v.shape[i] for i in perm)),
              attrs={"permutation": i64s(perm)})
    inv = [perm.index(i) for i in range(r)]
    return t, inv


def _exclusive_prefix_product(em, v):
    """``[1, v0, v0 v1, ...]`` along the last axis."""
    r = len(v.shape)
    incl = cumulative(em, v, r - 1, "stablehlo.multiply", 1)
    return em.op("stablehlo.pad", [incl, em.const(1, v.dtype, ())], (v.dtype, v.shape),
                 attrs={"edge_padding_low": i64s([0] * (r - 1) + [1]),
                        "edge_padding_high": i64s([0] * (r - 1) + [-1]),
                        "interior_padding": i64s([0] * r)})


def _segment_products(em, v):
    """``C[..., j, i] = prod_{k=j+1}^{i} v_k`` for ``i >= j`` (1 on the diagonal), 0 below."""
    n = v.shape[-1]
    lead = v.shape[:-1]
    cube = lead + (n, n)
    rows = em.op("stablehlo.iota", [], (I64, cube), attrs={"iota_dimension": f"{len(lead)} : i64"})
    cols = em.op("stablehlo.iota", [], (I64, cube), attrs={"iota_dimension": f"{len(lead) + 1} : i64"})
    xs = em.broadcast(v, cube, list(range(len(lead))) + [len(lead) + 1])
    one = em.const(1, v.dtype, cube)
    t = em.select(em.compare("GT", cols, rows), xs, one)
    c = cumulative(em, t, len(cube) - 1, "stablehlo.multiply", 1)
    return em.select(em.compare("GE", cols, rows), c, em.const(0, v.dtype, cube)), len(lead)


def _cumprod_derivative(transpose: bool):
    def rule(em, node, g, x):
        dt, sh = out_aval(node)
        axis = int(node.params["axis"]) % len(sh)
        gv, xv = em.value(g, dt, sh), em.value(x, dt, sh)
        rev = node.params["reverse"]
        if rev:
            gv = em.op("stablehlo.reverse", [gv], (dt, sh), attrs={"dimensions": i64s([axis])})
            xv = em.op("stablehlo.reverse", [xv], (dt, sh), attrs={"dimensions": i64s([axis])})
        gt, inv = _move_last(em, gv, axis)
        xt, _ = _move_last(em, xv, axis)
        p = _exclusive_prefix_product(em, xt)
        c, nl = _segment_products(em, xt)                     # (..., j, i)
        if transpose:     # cumprod_grad: sum over i of C[j, i] g_i, times P_j
            gb = em.broadcast(gt, c.shape, list(range(nl)) + [nl + 1])
            s = reduce(em, em.binary("stablehlo.multiply", c, gb), [nl + 1], "stablehlo.add", 0)
            out = em.binary("stablehlo.multiply", p, s)
        else:             # cumprod_jvp: sum over j of C[j, i] P_j t_j
            pt = em.binary("stablehlo.multiply", p, gt)
            pb = em.broadcast(pt, c.shape, list(range(nl)) + [nl])
            out = reduce(em, em.binary("stablehlo.multiply", c, pb), [nl], "stablehlo.add", 0)
        out = em.op("stablehlo.transpose", [out], (dt, sh), attrs={"permutation": i64s(inv)})
        if rev:
            out = em.op("stablehlo.reverse", [out], (dt, sh), attrs={"dimensions": i64s([axis])})
        return out
    return rule


LOWERINGS = {
    "cumsum": _cum("stablehlo.add", 0), "cumprod": _cum("stablehlo.multiply", 1),
    "cummax": _cum("stablehlo.maximum", "low"), "prod_others": _prod_others,
    "cumprod_grad": _cumprod_derivative(True), "cumprod_jvp": _cumprod_derivative(False),
}
