"""Matrix decompositions and solves: cholesky, triangular_solve, solve, inv, slogdet.

Operands are square matrices ``(..., n, n)``; batch axes lead.
Derivatives: Murray (2016) for cholesky; Giles (2008) §2.2–2.3 for the rest.
"""
from __future__ import annotations

import numpy as np

from .._core.primitive import Primitive
from ..errors import ShapeError
from ._rules import refuse_float_mix
from .diagonal import diagonal
from .elementwise import add, multiply, negative, safe_mul, subtract
from .linalg import _mm_dtype, _sum2, matmul
from .reductions import reduce_sum
from .selection import select
from .shape_ops import expand_dims, swapaxes, transpose


def _square(op):
    def rule(a, *rest, **params):
        if a.shape is not None and len(a.shape) >= 2:
            n, m = a.shape[-2], a.shape[-1]
            if type(n) is int and type(m) is int and n != m:
                raise ShapeError(f"{op}: a must be square (..., n, n), got {a.shape}")
        return a.shape
    return rule


def _inexact(dtype):
    """NumPy's linalg result dtype: integer and bool matrices give float64."""
    return dtype if dtype is None or dtype.kind not in "biu" else np.dtype(np.float64)


def mT(x):
    """Swap the last two axes."""
    return swapaxes(x, -1, -2)


def _tril_mask_like(a, k=0):
    return tril_mask_p.bind(a, k=k)


tril_mask_p = Primitive("tril_mask", impl=lambda a, *, k: np.broadcast_to(
    np.tri(np.shape(a)[-2], np.shape(a)[-1], k, dtype=bool), np.shape(a)), hlo="stablehlo.iota+compare",
    shape_rule=lambda a, *, k: a.shape, dtype_rule=lambda a, *, k: np.dtype(bool))
tril_mask_p.vjp = lambda g, a, out, k: (None,)
tril_mask_p.jvp = lambda t, a, out, k: None


def tril(x, k=0):
    return select(_tril_mask_like(x, k), x, 0.0)


def _phi(x):
    """Lower triangle with the diagonal halved (Murray's Φ)."""
    return subtract(tril(x), multiply(0.5, diag_part_matrix(x)))


def diag_part_matrix(x):
    """Zero everything but the diagonal."""
    return select(diag_mask_p.bind(x), x, 0.0)


diag_mask_p = Primitive("diag_mask", impl=lambda a: np.broadcast_to(
    np.eye(np.shape(a)[-2], np.shape(a)[-1], dtype=bool), np.shape(a)), hlo="stablehlo.iota+compare",
    shape_rule=lambda a: a.shape, dtype_rule=lambda a: np.dtype(bool))
diag_mask_p.vjp = lambda g, a, out: (None,)
diag_mask_p.jvp = lambda t, a, out: None


# -- cholesky -------------------------------------------------------------------

def _cholesky_impl(a):
    a = np.asarray(a)
    try:
        return np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        pass
    # Some matrix of the batch is not SPD: that matrix alone becomes NaN on and
    # below the diagonal and 0 above it (as JAX/XLA), the others are factored.
    flat = a.reshape((-1,) + a.shape[-2:])
    out = np.empty(flat.shape, _inexact(a.dtype))
    failed = np.where(np.tri(a.shape[-1], dtype=bool), np.nan, 0.0)
    for i, m in enumerate(flat):
        try:
            out[i] = np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            out[i] = failed
    return out.reshape(a.shape)


cholesky_p = Primitive("cholesky", impl=_cholesky_impl, hlo="stablehlo.cholesky", shape_rule=_square("cholesky"),
                       dtype_rule=lambda a: _inexact(a.dtype))


def cholesky(a):
    """Lower Cholesky factor L of an SPD matrix: ``a = L Lᵀ``. A matrix that is not
    SPD gives NaN on and below the diagonal (as JAX/XLA), only for that matrix of
    a batch; ``tnp.linalg.cholesky`` raises instead in eager mode."""
    return cholesky_p.bind(a)


def _cholesky_jvp(t, a, out):
    if t[0] is None:
        return None
    L = out
    # L̇ = L Φ(L⁻¹ Ȧ L⁻ᵀ)   (Murray 2016, eq. 8), Ȧ symmetrised.
    sym = multiply(0.5, add(t[0], mT(t[0])))
    tmp = triangular_solve(L, sym, lower=True, transpose_a=False)
    inner = mT(triangular_solve(L, mT(tmp), lower=True, transpose_a=False))
    return matmul(L, _phi(inner))


def _cholesky_vjp(g, a, out):
    L = out
    # Ā = ½ (S + Sᵀ) with S = L⁻ᵀ Φ(Lᵀ L̄) L⁻¹   (Murray 2016, eq. 10).
    P = _phi(matmul(mT(L), g))
    tmp = triangular_solve(L, P, lower=True, transpose_a=True)              # L⁻ᵀ P
    S = mT(triangular_solve(L, mT(tmp), lower=True, transpose_a=True))     # (L⁻ᵀ (L⁻ᵀ P)ᵀ)ᵀ = L⁻ᵀ P L⁻¹
    return (multiply(0.5, add(S, mT(S))),)


cholesky_p.vjp, cholesky_p.jvp = _cholesky_vjp, _cholesky_jvp


# -- triangular_solve -------------------------------------------------------------

def _tri_solve_impl(a, b, *, lower, transpose_a):
    a, b = np.asarray(a), np.asarray(b)
    try:
        from scipy.linalg import solve_triangular
    except ImportError:                                   # pragma: no cover
        solve_triangular = None
    if a.ndim == 2 and solve_triangular is not None:
        return solve_triangular(a, b, lower=lower, trans=1 if transpose_a else 0, check_finite=False)
    op = np.swapaxes(a, -1, -2) if transpose_a else a
    mask = np.tri(a.shape[-1], dtype=bool) if (lower != transpose_a) else np.tri(a.shape[-1], dtype=bool).T
    return np.linalg.solve(np.where(mask, op, 0), b)


triangular_solve_p = Primitive("triangular_solve",
                               impl=refuse_float_mix("triangular_solve", _tri_solve_impl, ["a", "b"]),
                               hlo="stablehlo.triangular_solve",
                               shape_rule=lambda a, b, **_: b.shape, dtype_rule=_mm_dtype("triangular_solve"))


def triangular_solve(a, b, lower=True, transpose_a=False):
    """Solve ``op(a) x = b`` for ``x`` with ``a`` triangular ``(..., n, n)`` and
    ``b`` ``(..., n, k)``; ``op(a) = aᵀ`` if ``transpose_a``. Only the triangle
    named by ``lower`` is read (StableHLO §triangular_solve, left_side=true)."""
    return triangular_solve_p.bind(a, b, lower=bool(lower), transpose_a=bool(transpose_a))


def _tri_part(x, lower):
    return tril(x) if lower else mT(tril(mT(x)))


def _tri_solve_vjp(g, a, b, out, lower, transpose_a):
    b_bar = triangular_solve(a, g, lower=lower, transpose_a=not transpose_a)
    if transpose_a:
        a_bar = negative(matmul(out, mT(b_bar)))          # x = a⁻ᵀ b  ->  ā = -x b̄ᵀ
    else:
        a_bar = negative(matmul(b_bar, mT(out)))          # x = a⁻¹ b  ->  ā = -b̄ xᵀ
    return _tri_part(a_bar, lower), b_bar


def _tri_solve_jvp(t, a, b, out, lower, transpose_a):
    rhs = t[1]
    if t[0] is not None:
        ta = _tri_part(t[0], lower)
        da = mT(ta) if transpose_a else ta
        rhs = _sum2(rhs, negative(matmul(da, out)))
    return None if rhs is None else triangular_solve(a, rhs, lower=lower, transpose_a=transpose_a)


triangular_solve_p.vjp, triangular_solve_p.jvp = _tri_solve_vjp, _tri_solve_jvp


# -- solve / inv / slogdet ------------------------------------------------------------

def _solve_impl(a, b):
    return np.linalg.solve(a, b)


solve_p = Primitive("solve", impl=refuse_float_mix("linalg.solve", _solve_impl, ["a", "b"]),
                    hlo="stablehlo.custom_call lu",
                    shape_rule=lambda a, b: b.shape, dtype_rule=_mm_dtype("linalg.solve"))


def solve(a, b):
    return solve_p.bind(a, b)


def _solve_vjp(g, a, b, out):
    from .linalg import matmul_t_rhs
    b_bar = solve(mT(a), g)
    # x = a⁻¹ b: ā = -b̄ xᵀ (with vector b handled by matmul's adjoint).
    from .linalg import matmul_t_lhs
    a_bar = negative(matmul_t_lhs(b_bar, out, a))
    return a_bar, b_bar


def _solve_jvp(t, a, b, out):
    rhs = t[1]
    if t[0] is not None:
        rhs = _sum2(rhs, negative(matmul(t[0], out)))
    return None if rhs is None else solve(a, rhs)


solve_p.vjp, solve_p.jvp = _solve_vjp, _solve_jvp

inv_p = Primitive("inv", impl=np.linalg.inv, hlo="stablehlo.custom_call lu", shape_rule=_square("linalg.inv"),
                  dtype_rule=lambda a: _inexact(a.dtype))


def inv(a):
    return inv_p.bind(a)


inv_p.vjp = lambda g, a, out: (negative(matmul(mT(out), matmul(g, mT(out)))),)
inv_p.jvp = lambda t, a, out: None if t[0] is None else negative(matmul(out, matmul(t[0], out)))


def _slogdet_impl(a):
    s, l = np.linalg.slogdet(a)
    return np.asarray(s), np.asarray(l)


slogdet_p = Primitive("slogdet", impl=_slogdet_impl, hlo="stablehlo.custom_call lu", multiple_results=True,
                      shape_rule=lambda a: (a.shape[:-2], a.shape[:-2]) if a.shape is not None else (None, None),
                      dtype_rule=lambda a: (_inexact(a.dtype),) * 2)


def slogdet(a):
    return slogdet_p.bind(a)


def _slogdet_vjp(gs, a, out):
    g = gs[1]
    if g is None:
        return (None,)
    # d log|det a| = tr(a⁻¹ da)  ->  ā = ḡ a⁻ᵀ
    return (safe_mul(expand_dims(expand_dims(g, -1), -1), mT(inv(a))),)


def _slogdet_jvp(t, a, out):
    if t[0] is None:
        return (None, None)
    return (None, reduce_sum(diagonal(solve(a, t[0]), 0, -2, -1), (-1,)))     # tr(a⁻¹ ȧ)


slogdet_p.vjp, slogdet_p.jvp = _slogdet_vjp, _slogdet_jvp
