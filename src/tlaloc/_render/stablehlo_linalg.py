"""StableHLO lowerings of ``solve``, ``inv`` and ``slogdet`` through an LU
factorisation with partial pivoting, written as a ``stablehlo.while`` over the
columns (StableHLO has no LU op; XLA reaches LAPACK only through custom calls,
which IREE and portable artifacts do not have).

Step ``j`` picks the row ``p >= j`` with the largest ``|a[p, j]|`` (the first
such, as LAPACK's ``getrf``), swaps rows ``j`` and ``p`` of ``a`` and of the
right-hand side, and eliminates below the pivot. Batches pivot independently
(rows are chosen with one-hot masks, not dynamic slices). Then ``solve`` is a
``triangular_solve`` with the upper factor, ``inv`` solves against the
identity, and ``slogdet`` reads the factor's diagonal and the swap count.

A singular matrix gives inf/NaN (``solve``, ``inv``) where NumPy raises
``LinAlgError``; ``slogdet`` gives ``(0, -inf)`` as NumPy does.
"""
from __future__ import annotations

import numpy as np

from .stablehlo import I64, out_aval
from .stablehlo_structural import reduce


def _iota(em, shape, dim):
    return em.op("stablehlo.iota", [], (I64, shape), attrs={"iota_dimension": f"{dim} : i64"})


def _lu_solve_state(em, a, b):
    """Eliminate ``a`` (..., n, n) to upper-triangular form, applying the same row
    operations to ``b`` (..., n, k). Returns ``(u, b', swaps)``."""
    n = a.shape[-1]
    batch = a.shape[:-2]
    nb = len(batch)
    sw0 = em.const(0, I64, batch)
    types = [(I64, ()), (a.dtype, a.shape), (b.dtype, b.shape), (I64, batch)]
    state = [em.const(0, I64, ()), a, b, sw0]
    with em.region(types) as ((j, *_), cond):
        em.ret([em.compare("LT", j, em.const(n, I64, ()))])
    with em.region(types) as ((j, m, r, swaps), body):
        cols = _iota(em, m.shape, nb + 1)
        vec = _iota(em, batch + (n,), nb)
        jv = em.broadcast(j, vec.shape, [])
        col = _column(em, m, cols, j)                                              # a[..., :, j]
        cand = em.select(em.compare("GE", vec, jv), em.unary("stablehlo.abs", col),
                         em.const(-1, m.dtype, vec.shape))
        best = reduce(em, cand, [nb], "stablehlo.maximum", -np.inf)
        hit = em.compare("EQ", cand, em.broadcast(best, vec.shape, list(range(nb))))
        p = reduce(em, em.select(hit, vec, em.const(n, I64, vec.shape)), [nb], "stablehlo.minimum", n)
        swapped = []
        for x in (m, r):                        # swap rows j and p
            mj, mp = _rows_equal(em, x.shape, j, []), _rows_equal(em, x.shape, p, list(range(nb)))
            rj, rp = _row(em, x, mj), _row(em, x, mp)
            swapped.append(em.select(mj, rp, em.select(mp, rj, x)))
        m2, r2 = swapped
        pivot_row = _row_vec(em, m2, _rows_equal(em, m2.shape, j, []))               # (..., n)
        piv = reduce(em, em.select(em.compare("EQ", vec, jv), pivot_row, em.const(0, m.dtype, vec.shape)),
                     [nb], "stablehlo.add", 0)
        factor = em.binary("stablehlo.divide", _column(em, m2, cols, j),
                           em.broadcast(piv, vec.shape, list(range(nb))))
        factor = em.select(em.compare("GT", vec, jv), factor, em.const(0, m.dtype, vec.shape))
        out = []
        for x in (m2, r2):                      # x[i] -= factor[i] * x[j] below the pivot
            f = em.broadcast(factor, x.shape, list(range(nb + 1)))
            xj = _row(em, x, _rows_equal(em, x.shape, j, []))
            out.append(em.binary("stablehlo.subtract", x, em.binary("stablehlo.multiply", f, xj)))
        moved = em.convert(em.compare("NE", p, em.broadcast(j, batch, [])), I64)
        em.ret([em.binary("stablehlo.add", j, em.const(1, I64, ())), out[0], out[1],
                em.binary("stablehlo.add", swaps, moved)])
    res = em.op("stablehlo.while", state, types, regions=[cond, body])
    return res[1], res[2], res[3]


def _column(em, m, cols, j):
    nb = len(m.shape) - 2
    pick = em.compare("EQ", cols, em.broadcast(j, m.shape, []))
    return reduce(em, em.select(pick, m, em.const(0, m.dtype, m.shape)), [nb + 1], "stablehlo.add", 0)


def _rows_equal(em, shape, idx, dims):
    """Mask of shape ``shape`` (..., n, k): row index == ``idx`` (a scalar, or one per batch)."""
    nb = len(shape) - 2
    return em.compare("EQ", _iota(em, shape, nb), em.broadcast(idx, shape, dims))


def _row_vec(em, x, mask):
    """The row the mask selects (shape ``(..., k)``)."""
    nb = len(x.shape) - 2
    return reduce(em, em.select(mask, x, em.const(0, x.dtype, x.shape)), [nb], "stablehlo.add", 0)


def _row(em, x, mask):
    """The row the mask selects, broadcast back over the rows (shape of ``x``)."""
    nb = len(x.shape) - 2
    return em.broadcast(_row_vec(em, x, mask), x.shape, list(range(nb)) + [nb + 1])


def _upper_solve(em, u, b):
    return em.op("stablehlo.triangular_solve", [u, b], (b.dtype, b.shape),
                 attrs={"left_side": "true", "lower": "false", "unit_diagonal": "false",
                        "transpose_a": "#stablehlo<transpose NO_TRANSPOSE>"})


def _solve(em, node, a, b):
    dt, sh = out_aval(node)
    av, bv = em.value(a, dt), em.value(b, dt)
    vector = len(bv.shape) == 1
    if vector:
        bv = em.reshape(bv, bv.shape + (1,))
    batch = tuple(np.broadcast_shapes(av.shape[:-2], bv.shape[:-2]))
    av = em.broadcast(av, batch + av.shape[-2:])
    bv = em.broadcast(bv, batch + bv.shape[-2:])
    u, r, _ = _lu_solve_state(em, av, bv)
    return em.reshape(_upper_solve(em, u, r), sh)


def _inv(em, node, a):
    dt, sh = out_aval(node)
    av = em.value(a, dt)
    eye = em.convert(em.compare("EQ", _iota(em, sh, len(sh) - 2), _iota(em, sh, len(sh) - 1)), dt)
    u, r, _ = _lu_solve_state(em, av, eye)
    return _upper_solve(em, u, r)


def _slogdet(em, node, a):
    dt, sh = out_aval(node, 0)
    av = em.value(a, dt)
    nb = len(av.shape) - 2
    u, _, swaps = _lu_solve_state(em, av, em.const(0, dt, av.shape[:-1] + (1,)))
    diag_mask = em.compare("EQ", _iota(em, u.shape, nb), _iota(em, u.shape, nb + 1))
    d = reduce(em, em.select(diag_mask, u, em.const(0, dt, u.shape)), [nb + 1], "stablehlo.add", 0)
    logabs = reduce(em, em.unary("stablehlo.log", em.unary("stablehlo.abs", d)), [nb], "stablehlo.add", 0)
    sign = reduce(em, em.unary("stablehlo.sign", d), [nb], "stablehlo.multiply", 1)
    odd = em.compare("NE", em.binary("stablehlo.remainder", swaps, em.const(2, I64, swaps.shape)),
                     em.const(0, I64, swaps.shape))
    sign = em.select(odd, em.unary("stablehlo.negate", sign), sign)
    return [em.reshape(sign, sh), em.reshape(logabs, out_aval(node, 1)[1])]


LOWERINGS = {"solve": _solve, "inv": _inv, "slogdet": _slogdet}
