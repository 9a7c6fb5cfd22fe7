"""Spectral decompositions: ``eigh``, ``svd`` and ``qr`` of ``(..., m, n)`` matrices
(batch axes lead, real floating dtypes).

* ``eigh(a) -> (w (..., n), v (..., n, n))``, eigenvalues ascending, eigenvectors in
  the columns. The input is symmetrised first, ``(a + aᵀ) / 2``, as
  ``jax.numpy.linalg.eigh`` (NumPy reads only the lower triangle: the same for a
  symmetric ``a``).
* ``svd(a, full_matrices) -> (u (..., m, k), s (..., k), vh (..., k, n))``,
  ``k = min(m, n)`` (``u``/``vh`` square when ``full_matrices``).
* ``qr(a, mode) -> (q, r)``: ``mode='reduced'`` gives ``q (..., m, k)``, ``r (..., k, n)``;
  ``'complete'`` gives ``q (..., m, m)``, ``r (..., m, n)``.

Derivatives (each the transpose of the JVP, written out):
  * eigh: ``ẇ = diag(VᵀȦV)``, ``V̇ = V (F ∘ VᵀȦV)`` with ``F_ij = 1/(w_j - w_i)``
    (``F_ii = 0``); Giles (2008), "An extended collection of matrix derivative
    results", §3.1; JAX's ``eigh_jvp_rule``.
  * svd (reduced): Townsend (2016), "Differentiating the singular value
    decomposition", with ``F_ij = 1/(s_j² - s_i²)`` and the projection terms for
    non-square matrices; JAX's ``svd_jvp_rule``.
  * qr (reduced, m >= n): the JVP of Townsend's "QR derivative" note (as JAX's
    ``qr_jvp_rule``); the VJP ``Ā = (Q̄ + Q copyltu(M)) R⁻ᵀ``, ``M = R R̄ᵀ - Q̄ᵀQ``
    (Liao et al. 2019, "Differentiable programming tensor networks", eq. 12).
    Wide (m < n, either mode), as JAX's rule: ``A = [A1 A2]``, ``R = [R1 R2]`` with
    ``A1 = Q R1`` a square QR and ``R2 = Qᵀ A2``, so ``Ṙ2 = Q̇ᵀ A2 + Qᵀ Ȧ2``, and the VJP
    is its transpose (``Ā2 = Q R̄2``, ``Q̄ += A2 R̄2ᵀ``, then the square rule on ``A1``).
Repeated eigenvalues or singular values make ``F`` infinite: the derivative of the
vectors is then not defined and comes out inf/NaN (as in JAX); the values' own
derivative stays finite. ``svd`` with ``full_matrices`` on a non-square matrix,
and ``qr`` with mode='complete' and m > n, have no derivative here: refused by
name at the user's line (``GradientError``; JAX defines the latter).

None of the three lowers to StableHLO (it has no such op; XLA reaches LAPACK
only through custom calls that IREE and the artifacts lack): ``tl.jit`` refuses
them by name.
"""
from __future__ import annotations

import numpy as np

from .._core.primitive import Primitive
from ..errors import GradientError
from .broadcasting import zeros_like
from .decompositions import _inexact, diag_mask_p, mT, tril, triangular_solve
from .diagonal import diagonal
from .elementwise import add, divide, equal, multiply, negative, subtract
from .linalg import matmul
from .selection import select
from .shape_ops import concatenate, expand_dims
from .slicing import static_slice


def _diag(m):
    """The diagonal of ``m`` (..., n, n) as (..., n)."""
    return diagonal(m, 0, -2, -1)


def _off_diag_inverse(d):
    """``1 / d`` off the diagonal of ``d`` (..., n, n), 0 on it."""
    on = diag_mask_p.bind(d)
    return select(on, 0.0, divide(1.0, select(on, 1.0, d)))


def _col_scale(m, v):
    """``m @ diag(v)``: column j of ``m`` (..., r, n) times ``v[..., j]``."""
    return multiply(m, expand_dims(v, -2))


def _add(*xs):
    xs = [x for x in xs if x is not None]
    out = xs[0]
    for x in xs[1:]:
        out = add(out, x)
    return out


# -- eigh ----------------------------------------------------------------------------------

def _sym(a):
    return multiply(0.5, add(a, mT(a)))


def _eigh_impl(a):
    a = np.asarray(a)
    w, v = np.linalg.eigh(0.5 * (a + np.swapaxes(a, -1, -2)))
    return w, v


def _eigh_shape(a):
    if a.shape is None:
        return None, None
    return a.shape[:-1], a.shape


eigh_p = Primitive("eigh", impl=_eigh_impl, hlo=None, multiple_results=True, shape_rule=_eigh_shape,
                   dtype_rule=lambda a: (_inexact(a.dtype),) * 2)


def eigh(a):
    """``(w, v)`` of the symmetric ``a`` (..., n, n); see the module docstring."""
    return tuple(eigh_p.bind(a))


def _eigh_F(w):
    return _off_diag_inverse(subtract(expand_dims(w, -2), expand_dims(w, -1)))   # 1/(w_j - w_i)


def _eigh_jvp(t, a, out):
    if t[0] is None:
        return (None, None)
    w, v = out
    m = matmul(mT(v), matmul(_sym(t[0]), v))                  # Vᵀ Ȧ V  (..., n, n)
    return _diag(m), matmul(v, multiply(_eigh_F(w), m))


def _eigh_vjp(gs, a, out):
    w, v = out
    g_w, g_v = gs
    inner = None
    if g_v is not None:
        inner = multiply(_eigh_F(w), matmul(mT(v), g_v))     # F ∘ VᵀV̄
    if g_w is not None:
        d = multiply(diag_mask_p.bind(v), expand_dims(g_w, -2))   # diag(w̄)
        inner = d if inner is None else add(inner, d)
    if inner is None:
        return (None,)
    return (_sym(matmul(v, matmul(inner, mT(v)))),)


eigh_p.jvp, eigh_p.vjp = _eigh_jvp, _eigh_vjp


# -- svd ------------------------------------------------------------------------------------

def _svd_impl(a, *, full_matrices):
    u, s, vh = np.linalg.svd(np.asarray(a), full_matrices=full_matrices)
    return u, s, vh


def _svd_shape(a, *, full_matrices):
    if a.shape is None:
        return None, None, None
    *b, m, n = a.shape
    b = tuple(b)
    k = min(m, n) if type(m) is int and type(n) is int else None
    if full_matrices:
        return b + (m, m), b + (k,), b + (n, n)
    return b + (m, k), b + (k,), b + (k, n)


svd_p = Primitive("svd", impl=_svd_impl, hlo=None, multiple_results=True, shape_rule=_svd_shape,
                  dtype_rule=lambda a, **_: (_inexact(a.dtype),) * 3)


def svd(a, full_matrices=True):
    """``(u, s, vh)`` with ``a = u @ diag(s) @ vh``; see the module docstring."""
    return tuple(svd_p.bind(a, full_matrices=bool(full_matrices)))


def _svd_refuse_full(a, out, full_matrices):
    if not full_matrices:
        return
    m, n = _last_two(a)
    if type(m) is int and type(n) is int and m != n:
        raise GradientError("svd: no derivative with full_matrices=True on a non-square matrix (the extra "
                            "singular vectors are not unique); call svd(a, full_matrices=False)")


def _last_two(a):
    """The last two sizes of ``a`` where known at transform time, else (None, None).
    Unknown sizes are checked at run time: the triangular solves and products of
    the rules refuse the shapes they cannot take."""
    shape = a.aval.shape if hasattr(a, "aval") else np.shape(a)
    return (None, None) if shape is None or len(shape) < 2 else tuple(shape[-2:])


def _svd_parts(s, u, vh):
    sd = expand_dims(s, -2)                                        # (..., 1, k): s_j
    F = _off_diag_inverse(multiply(add(sd, mT(sd)), subtract(sd, mT(sd))))   # 1/(s_j² - s_i²)
    zero = equal(s, 0.0)
    s_inv = select(zero, 0.0, divide(1.0, select(zero, 1.0, s)))
    return F, s_inv, mT(vh)


def _svd_jvp(t, a, out, full_matrices):
    if t[0] is None:
        return (None, None, None)
    _svd_refuse_full(a, out, full_matrices)
    u, s, vh = out
    F, s_inv, v = _svd_parts(s, u, vh)
    da = t[0]
    dS = matmul(mT(u), matmul(da, v))                                  # Uᵀ Ȧ V  (..., k, k)
    ds = _diag(dS)
    dSS, SdS = _col_scale(dS, s), mT(_col_scale(mT(dS), s))            # dS S, S dS
    dav, dahu = matmul(da, v), matmul(mT(da), u)
    du = add(matmul(u, multiply(F, add(dSS, mT(dSS)))),
             _col_scale(subtract(dav, matmul(u, matmul(mT(u), dav))), s_inv))
    dv = add(matmul(v, multiply(F, add(SdS, mT(SdS)))),
             _col_scale(subtract(dahu, matmul(v, matmul(vh, dahu))), s_inv))
    return du, ds, mT(dv)


def _svd_vjp(gs, a, out, full_matrices):
    _svd_refuse_full(a, out, full_matrices)
    u, s, vh = out
    g_u, g_s, g_vh = gs
    F, s_inv, v = _svd_parts(s, u, vh)
    dS, terms = None, []
    if g_s is not None:
        dS = multiply(diag_mask_p.bind(matmul(mT(u), u)), expand_dims(g_s, -2))   # diag(s̄)
    if g_u is not None:
        G = multiply(F, matmul(mT(u), g_u))
        dS = _add(dS, _col_scale(add(G, mT(G)), s))                    # (G + Gᵀ) S
        proj = subtract(g_u, matmul(u, matmul(mT(u), g_u)))            # (I - UUᵀ) Ū
        terms.append(matmul(_col_scale(proj, s_inv), vh))              # (I - UUᵀ) Ū S⁻¹ Vᵀ
    if g_vh is not None:
        g_v = mT(g_vh)
        H = multiply(F, matmul(vh, g_v))
        dS = _add(dS, mT(_col_scale(mT(add(H, mT(H))), s)))           # S (H + Hᵀ)
        proj = subtract(g_v, matmul(v, matmul(vh, g_v)))               # (I - VVᵀ) V̄
        terms.append(matmul(_col_scale(u, s_inv), mT(proj)))           # U S⁻¹ V̄ᵀ (I - VVᵀ)
    if dS is not None:
        terms.append(matmul(u, matmul(dS, vh)))
    return (_add(*terms) if terms else None,)


svd_p.jvp, svd_p.vjp = _svd_jvp, _svd_vjp


# -- qr --------------------------------------------------------------------------------------

def _qr_impl(a, *, mode):
    q, r = np.linalg.qr(np.asarray(a), mode=mode)
    return q, r


def _qr_shape(a, *, mode):
    if a.shape is None:
        return None, None
    *b, m, n = a.shape
    b = tuple(b)
    k = min(m, n) if type(m) is int and type(n) is int else None
    if mode == "complete":
        return b + (m, m), b + (m, n)
    return b + (m, k), b + (k, n)


qr_p = Primitive("qr", impl=_qr_impl, hlo=None, multiple_results=True, shape_rule=_qr_shape,
                 dtype_rule=lambda a, **_: (_inexact(a.dtype),) * 2)


def qr(a, mode="reduced"):
    """``(q, r)`` with ``a = q @ r``, ``q`` orthonormal columns, ``r`` upper triangular."""
    return tuple(qr_p.bind(a, mode=str(mode)))


def _qr_check(a, mode):
    """The matrix's ``(m, n)``, or GradientError where the derivative is not defined here."""
    m, n = _last_two(a)
    if type(m) is int and type(n) is int and mode == "complete" and m > n:
        raise GradientError(f"{_where()}qr: the derivative of mode='complete' with m > n is not "
                            f"implemented (shape (..., {m}, {n})); use mode='reduced' (the first {n} columns "
                            f"of q, the top {n} rows of r)")
    return m, n


def _where() -> str:
    """``file:line:col: `` of the user's line whose derivative is being built, if any."""
    from .._core.builder import _stack
    loc = _stack()[-1].loc if _stack() else None
    return f"{loc}: " if loc is not None else ""


def _right_rinv(x, r):
    """``x @ r⁻¹`` for upper-triangular ``r``."""
    return mT(triangular_solve(r, mT(x), lower=False, transpose_a=True))


def _columns(x, lo, hi):
    """``x[..., :, lo:hi]`` (x's shape known)."""
    shape = x.aval.shape if hasattr(x, "aval") else np.shape(x)
    return static_slice(x, (0,) * (len(shape) - 1) + (lo,), tuple(shape[:-1]) + (hi,))


def _wide(m, n) -> bool:
    return type(m) is int and type(n) is int and m < n


def _qr_jvp(t, a, out, mode):
    if t[0] is None:
        return (None, None)
    m, n = _qr_check(a, mode)
    q, r = out
    if not _wide(m, n):
        return _thin_qr_jvp(q, r, t[0])
    # m < n (JAX's qr_jvp_rule): a = [a1 a2] with a1 m x m, r = [r1 r2]; a1 = q r1 is a square QR,
    # and r2 = qᵀ a2, so ṙ2 = q̇ᵀ a2 + qᵀ ȧ2
    dq, dr1 = _thin_qr_jvp(q, _columns(r, 0, m), _columns(t[0], 0, m))
    dr2 = add(matmul(mT(dq), _columns(a, m, n)), matmul(mT(q), _columns(t[0], m, n)))
    return dq, concatenate([dr1, dr2], -1)


def _thin_qr_jvp(q, r, dx):
    dx_rinv = _right_rinv(dx, r)
    qt_dx_rinv = matmul(mT(q), dx_rinv)
    low = tril(qt_dx_rinv, -1)
    do = subtract(low, mT(low))                                         # skew-symmetric
    dq = add(matmul(q, subtract(do, qt_dx_rinv)), dx_rinv)
    dr = matmul(subtract(qt_dx_rinv, do), r)
    return dq, dr


def _qr_vjp(gs, a, out, mode):
    m, n = _qr_check(a, mode)
    q, r = out
    g_q, g_r = gs
    if not _wide(m, n) or (g_q is None and g_r is None):
        return (_thin_qr_vjp(q, r, g_q, g_r),)
    # the transpose of the wide JVP: r2 = qᵀ a2 gives ā2 = q r̄2 and adds a2 r̄2ᵀ to q̄
    if g_r is None:
        return (concatenate([_thin_qr_vjp(q, _columns(r, 0, m), g_q, None),
                             zeros_like(_columns(a, m, n))], -1),)
    g_r2 = _columns(g_r, m, n)
    x2_g = matmul(_columns(a, m, n), mT(g_r2))
    g_q = x2_g if g_q is None else add(g_q, x2_g)
    a1_bar = _thin_qr_vjp(q, _columns(r, 0, m), g_q, _columns(g_r, 0, m))
    return (concatenate([a1_bar, matmul(q, g_r2)], -1),)


def _thin_qr_vjp(q, r, g_q, g_r):
    m = None
    if g_r is not None:
        m = matmul(r, mT(g_r))
    if g_q is not None:
        m = negative(matmul(mT(g_q), q)) if m is None else subtract(m, matmul(mT(g_q), q))
    if m is None:
        return None
    copyltu = add(tril(m), mT(tril(m, -1)))
    b = matmul(q, copyltu) if g_q is None else add(g_q, matmul(q, copyltu))
    return mT(triangular_solve(r, mT(b), lower=False, transpose_a=False))      # b R⁻ᵀ


qr_p.jvp, qr_p.vjp = _qr_jvp, _qr_vjp

__all__ = ["eigh", "svd", "qr", "eigh_p", "svd_p", "qr_p"]
