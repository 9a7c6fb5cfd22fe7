"""``tlaloc.scipy.linalg``: general and structured solves, ``inv``, ``det``, Cholesky factors
and solves, triangular solves, ``expm``, ``sqrtm``, ``logm``.

Matrices are ``(..., n, n)`` float arrays (batch axes lead); right-hand sides
``(..., n)`` or ``(..., n, k)``. Derivatives come from the primitives
``cholesky`` (Murray 2016) and ``triangular_solve`` (Giles 2008), see
``_prims/decompositions.py``; ``expm`` is a composition of matmuls and a solve,
so its derivative is that of the algorithm (Al-Mohy & Higham 2009 show that
this Fréchet derivative of the Padé approximant is accurate to the same order);
``sqrtm`` and ``logm`` are iterations (Denman–Beavers; inverse scaling and
squaring) whose derivatives converge to the Fréchet derivatives.
"""
from __future__ import annotations

import numpy as _np

from .. import numpy as tnp
from .._prims import decompositions as _dec
from ..errors import ArgumentError

__all__ = ["solve", "inv", "det", "cholesky", "cho_factor", "cho_solve", "solve_triangular", "expm", "sqrtm",
           "logm"]


def _finite(op, *arrays):
    """SciPy's ``check_finite`` (eagerly; symbolic values are not checked)."""
    for x in arrays:
        if not tnp._is_symbolic(x) and not _np.all(_np.isfinite(x)):
            raise ValueError(f"{op}: array must not contain infs or NaNs")


_SYMMETRIC = ("sym", "symmetric", "her", "hermitian", "pos", "positive definite")


def _read_as(op, a, assume_a, lower, allowed):
    """The matrix SciPy's solver for ``assume_a`` reads: the whole of ``a`` (general, banded), the
    ``lower``/upper triangle mirrored (sym, her, pos), a triangle, the diagonal or the three
    central diagonals."""
    if assume_a not in allowed:
        raise NotImplementedError(f"{op}: assume_a={assume_a!r} is not supported; use one of "
                                  f"{', '.join(repr(x) for x in allowed)}")
    if tnp._is_symbolic(lower):
        raise ArgumentError(f"{op}: lower must be a Python bool (static), not an array value")
    lower = bool(lower)
    if not tnp._is_symbolic(a) and _np.iscomplexobj(a) and assume_a in ("her", "hermitian"):
        raise NotImplementedError(f"{op}: assume_a={assume_a!r} with complex input is not supported")
    if assume_a in _SYMMETRIC:
        t = tnp.tril(a) if lower else tnp.triu(a)
        strict = tnp.tril(a, -1) if lower else tnp.triu(a, 1)
        return tnp.add(t, _dec.mT(strict))
    if assume_a == "upper triangular":
        return tnp.triu(a)
    if assume_a == "lower triangular":
        return tnp.tril(a)
    if assume_a == "diagonal":
        return tnp.where(_dec.diag_mask_p.bind(a), a, 0.0)
    if assume_a == "tridiagonal":
        return tnp.triu(tnp.tril(a, 1), -1)
    return a


def _positive_definite(op, a, assume_a):
    if assume_a in ("pos", "positive definite") and not tnp._is_symbolic(a):
        try:
            _np.linalg.cholesky(a)
        except _np.linalg.LinAlgError:
            raise _np.linalg.LinAlgError(f"{op}: the leading minor of the matrix is not positive "
                                         f"definite (assume_a={assume_a!r})") from None


_SOLVE_KINDS = (None, "gen", "general", "banded", "sym", "symmetric", "her", "hermitian", "pos",
                "positive definite", "diagonal", "tridiagonal", "upper triangular", "lower triangular")


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True, assume_a=None,
          transposed=False):
    """``x`` with ``a @ x = b`` (``a.T @ x = b`` with ``transposed``), as ``scipy.linalg.solve``:
    ``a`` ``(..., n, n)``, ``b`` ``(n,)``, ``(..., n)`` with ``b.ndim == 1`` only, or ``(..., n, k)``.

    ``assume_a`` picks which entries of ``a`` are read, as SciPy's dedicated solvers do: all of
    them (None, 'gen', 'banded'), the upper (``lower=False``) or lower triangle mirrored ('sym',
    'her', 'pos'), one triangle ('upper triangular', 'lower triangular'), the diagonal
    ('diagonal') or the three central diagonals ('tridiagonal'). That matrix is then solved by
    ``tlaloc.numpy.linalg.solve`` (LU; SciPy's structured LAPACK routines agree to rounding), so the
    derivative is that of SciPy's function: nothing flows to the entries it ignores. 'pos' on a
    concrete matrix that is not positive definite raises ``LinAlgError``, as SciPy.

    Raises:
      NotImplementedError: an unknown ``assume_a``, 'her' with complex input.
      ValueError: (eagerly, ``check_finite``) infs or NaNs. LinAlgError: a singular matrix."""
    if check_finite:
        _finite("solve", a, b)
    m = _read_as("solve", a, assume_a, lower, _SOLVE_KINDS)
    _positive_definite("solve", m, assume_a)
    if transposed:
        if not tnp._is_symbolic(a) and _np.iscomplexobj(a):
            raise NotImplementedError("solve: transposed=True with a complex matrix (as SciPy)")
        m = _dec.mT(m)
    return tnp.linalg.solve(m, b)


_INV_KINDS = (None, "gen", "general", "sym", "her", "pos", "upper triangular", "lower triangular")


def inv(a, overwrite_a=False, check_finite=True, *, assume_a=None, lower=False):
    """The inverse of ``a`` ``(..., n, n)``, as ``scipy.linalg.inv``; ``assume_a`` ('sym', 'her',
    'pos': the ``lower``/upper triangle mirrored; 'upper triangular', 'lower triangular') picks
    the entries read, as in ``solve``. Derivative ``-a⁻ᵀ ḡ a⁻ᵀ`` on those entries.

    Raises:
      NotImplementedError: another ``assume_a``. ValueError: (eagerly) infs or NaNs.
      LinAlgError: a singular matrix."""
    if check_finite:
        _finite("inv", a)
    m = _read_as("inv", a, assume_a, lower, _INV_KINDS)
    _positive_definite("inv", m, assume_a)
    return tnp.linalg.inv(m)


def det(a, overwrite_a=False, check_finite=True):
    """The determinant of ``a`` ``(..., n, n)`` -> ``(...)``, as ``scipy.linalg.det`` (0 for a
    singular matrix); ``sign * exp(log|det|)``, so within a few ulp of LAPACK's LU product.
    Derivative ``det(a) a⁻ᵀ``."""
    if check_finite:
        _finite("det", a)
    return tnp.linalg.det(a)


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """The Cholesky factor of SPD ``a``: upper ``U`` with ``a = Uᵀ U`` (SciPy's default), or lower
    ``L`` with ``a = L Lᵀ``. Concrete non-SPD input raises ``numpy.linalg.LinAlgError``."""
    L = tnp.linalg.cholesky(a)
    return L if lower else _dec.mT(L)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """``(c, lower)`` for ``cho_solve``. Unlike SciPy, the unused triangle of ``c`` is 0 (SciPy
    leaves ``a``'s entries there); only the used triangle is read."""
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """``x`` with ``a x = b`` from ``(c, lower) = cho_factor(a)``: two triangular solves."""
    c, lower = c_and_lower
    if not isinstance(lower, bool):
        raise ArgumentError(f"cho_solve: the factor's `lower` flag must be a Python bool (static), got {lower!r}")
    def solve(rhs):
        y = _dec.triangular_solve(c, rhs, lower, not lower)
        return _dec.triangular_solve(c, y, lower, lower)
    return _on_columns(solve, b, c)


def _rank(x):
    """The rank of ``x`` if known now (always for arrays; for symbolic values once shapes are known)."""
    if tnp._is_symbolic(x):
        return x.aval.rank
    return tnp.ndim(x)


def identity_like(a):
    """The identity shaped like the square matrix ``a`` (no need to know its size now)."""
    return tnp.where(_dec.diag_mask_p.bind(a), 1.0, tnp.multiply(a, 0.0))


def _on_columns(solve, b, a):
    """``solve`` (which takes ``(n, k)`` right-hand sides) applied to ``b`` of shape ``(n,)`` or ``(n, k)``.

    When ``b``'s rank is not known yet (inside ``grad`` before the first call), ``solve`` is applied
    to the identity and the result multiplies ``b`` (same value to rounding)."""
    r = _rank(b)
    if r is None:
        return tnp.matmul(solve(identity_like(a)), b)
    if r == 1:
        return solve(tnp.reshape(b, (-1, 1)))[..., 0]
    return solve(b)


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, check_finite=True):
    """``x`` with ``op(a) x = b``, ``op`` = identity (``trans=0``/``'N'``) or transpose (1, 2, ``'T'``,
    ``'C'``; real matrices). Only the ``lower``/upper triangle of ``a`` is read; with
    ``unit_diagonal`` its diagonal is taken as 1."""
    codes = {0: False, "N": False, 1: True, "T": True, 2: True, "C": True}
    if trans not in codes:
        raise ArgumentError(f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    if unit_diagonal:
        a = tnp.where(_dec.diag_mask_p.bind(a), 1.0, a)
    return _on_columns(lambda rhs: _dec.triangular_solve(a, rhs, bool(lower), codes[trans]), b, a)


# -- expm: Padé [13/13] with scaling and squaring (Higham 2005, Algorithm 2.3) -----------------------

_B13 = (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800., 129060195264000.,
        10559470521600., 670442572800., 33522128640., 1323241920., 40840800., 960960., 16380., 182., 1.)
_THETA13 = 5.371920351148152
_MAX_SQUARINGS = 30


def expm(A):
    """``exp(A)`` for square ``A`` (n, n), float64.

    Scales ``A`` by ``2^-s`` with ``s = max(0, ⌈log2(‖A‖₁/θ₁₃)⌉)``, takes the [13/13] Padé
    approximant and squares ``s`` times (at most 30: ``‖A‖₁`` up to about 5.8e9). ``s`` is
    a value, so the squarings are 30 masked steps: each squares or keeps its input."""
    norm1 = tnp.max(tnp.sum(tnp.abs(A), axis=-2))
    s = tnp.maximum(tnp.ceil(tnp.log2(tnp.divide(tnp.stop_gradient(norm1), _THETA13))), 0.0)
    s = tnp.stop_gradient(tnp.where(tnp.isfinite(s), s, 0.0))
    As = tnp.divide(A, tnp.power(2.0, s))
    eye = identity_like(A)
    A2 = tnp.matmul(As, As)
    A4 = tnp.matmul(A2, A2)
    A6 = tnp.matmul(A4, A2)
    b = _B13
    u_in = tnp.matmul(A6, b[13] * A6 + b[11] * A4 + b[9] * A2) + b[7] * A6 + b[5] * A4 + b[3] * A2 + b[1] * eye
    U = tnp.matmul(As, u_in)
    V = tnp.matmul(A6, b[12] * A6 + b[10] * A4 + b[8] * A2) + b[6] * A6 + b[4] * A4 + b[2] * A2 + b[0] * eye
    R = tnp.linalg.solve(V - U, U + V)
    for k in range(_MAX_SQUARINGS):
        R = tnp.where(tnp.less(float(k), s), tnp.matmul(R, R), R)
    return R


# -- sqrtm / logm: scaled Denman–Beavers iteration, inverse scaling and squaring --------------------

_DB_STEPS = 12
_LOG_ROOTS = 6
_LOG_TERMS = 12


def _db_sqrt(A, steps=_DB_STEPS):
    """The principal square root by the scaled product-form Denman–Beavers iteration (Higham,
    "Functions of Matrices", 2008, eq. 6.29): ``M₀ = Y₀ = A``, ``μ = |det M|^(-1/2n)``,
    ``Y ← μ Y (I + μ⁻² M⁻¹)/2``, ``M ← (I + (μ² M + μ⁻² M⁻¹)/2)/2``; Y → A^½, M → I,
    typically in 5-7 steps; 12 are run by default (converged steps leave Y unchanged; a spectrum
    spread over e^±30 needs them all and is then good to about 1e-9). The scalings μ are
    any positive numbers for the limit, so no derivative flows through them."""
    eye = identity_like(A)
    n = tnp.trace(eye)
    M, Y = A, A
    for _ in range(steps):
        _, logdet = tnp.linalg.slogdet(M)
        mu = tnp.stop_gradient(tnp.exp(tnp.divide(logdet, tnp.multiply(-2.0, n))))
        Mi = tnp.linalg.inv(M)
        Y = tnp.multiply(0.5, tnp.matmul(Y, tnp.add(tnp.multiply(mu, eye), tnp.divide(Mi, mu))))
        M = tnp.multiply(0.5, tnp.add(eye, tnp.multiply(0.5, tnp.add(tnp.multiply(tnp.multiply(mu, mu), M),
                                                                        tnp.divide(Mi, tnp.multiply(mu, mu))))))
    return Y


def sqrtm(A, disp=True, blocksize=64):
    """The principal square root ``X`` (``X @ X = A``) of a real ``(n, n)`` matrix with no
    eigenvalue on the closed negative real axis, by the scaled Denman–Beavers iteration (SciPy
    uses a Schur method; the two agree to about 1e-15 relative on such matrices).
    The derivative is that of the iteration, which converges to the Fréchet derivative
    (the solution ``L`` of ``X L + L X = E``)."""
    return _db_sqrt(A)


def logm(A, disp=True):
    """The principal logarithm of a real ``(n, n)`` matrix with no eigenvalue on the closed negative
    real axis: inverse scaling and squaring (Kenney & Laub 1989; Higham 2008 §11.5): ``X = A^(1/64)``
    by six square roots, then ``log X = 2 atanh(Z)``, ``Z = (X - I)(X + I)⁻¹``, summed to ``Z²³``,
    times 64. About 1e-14 relative to SciPy for well-conditioned A, 1e-11 for a spectrum spread over
    e^±10; worse beyond. Derivative: that of the
    algorithm (converges to the Fréchet derivative of log)."""
    X = A
    for k in range(_LOG_ROOTS):          # each root halves the spread of the spectrum: fewer steps after the first
        X = _db_sqrt(X, _DB_STEPS if k == 0 else 8)
    eye = identity_like(A)
    Z = tnp.matmul(tnp.subtract(X, eye), tnp.linalg.inv(tnp.add(X, eye)))
    Z2 = tnp.matmul(Z, Z)
    acc, power = Z, Z
    for j in range(1, _LOG_TERMS):
        power = tnp.matmul(power, Z2)
        acc = tnp.add(acc, tnp.divide(power, 2.0 * j + 1.0))
    return tnp.multiply(2.0 ** (_LOG_ROOTS + 1), acc)
