"""``tlaloc.numpy.linalg``: solve, cholesky, inv, det, slogdet, eigh, eigvalsh, svd,
svdvals, qr, pinv, lstsq, norm, matrix_norm, vector_norm, multi_dot, and the Array API's
matmul, matrix_transpose, diagonal, trace, outer, vecdot, tensordot, cross,
matrix_power, matrix_rank.

Matrices are ``(..., m, n)`` with batch axes leading. References for the
derivative rules are in ``tlaloc/_prims/decompositions.py`` and
``tlaloc/_prims/spectral.py``.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as _np

from .._prims import decompositions as _dec
from .._prims import spectral as _spec
from ..errors import ArgumentError, ShapeError
from . import sqrt, sum, multiply, abs as _abs, max as _max, min as _min, exp, log, diagonal as _diagonal_np


EighResult = namedtuple("EighResult", "eigenvalues eigenvectors")
SVDResult = namedtuple("SVDResult", "U S Vh")
QRResult = namedtuple("QRResult", "Q R")
SlogdetResult = namedtuple("SlogdetResult", "sign logabsdet")


def _named(cls, parts):
    """The Array API's named tuple eagerly; a plain tuple of symbolic values."""
    return cls(*parts) if not _tnp()._is_symbolic(parts[0]) else tuple(parts)


def _tnp():
    from .. import numpy as tnp
    return tnp


def solve(a, b):
    """x with ``a @ x = b``; a ``(..., n, n)``, b ``(..., n)`` or ``(..., n, k)``."""
    return _dec.solve(a, b)


def cholesky(a, upper=False):
    """Lower factor L with ``a = L Lᵀ`` (``upper=True``: Lᵀ); a must be symmetric
    positive definite. Eagerly a non-SPD input raises ``numpy.linalg.LinAlgError``."""
    from . import _is_symbolic
    if not _is_symbolic(a):
        _np.linalg.cholesky(a)   # raises LinAlgError on a non-SPD input
    L = _dec.cholesky(a)
    return _dec.mT(L) if upper else L


def inv(a):
    """The inverse of ``a`` (..., n, n); ā = -a⁻ᵀ ḡ a⁻ᵀ."""
    return _dec.inv(a)


def slogdet(a):
    """(sign, log|det a|); differentiable in the second."""
    return _named(SlogdetResult, _dec.slogdet(a))


def det(a):
    """``det(a)`` (..., n, n) -> (...), as sign · exp(log|det|)."""
    s, l = _dec.slogdet(a)
    return multiply(s, exp(l))


def eigh(a, UPLO="L"):
    """``(eigenvalues (..., n) ascending, eigenvectors (..., n, n) in columns)`` of
    the symmetric ``a``. The input is symmetrised (as jax.numpy); ``UPLO`` is
    accepted for NumPy compatibility. Derivative: Giles (2008) §3.1; repeated
    eigenvalues give inf/NaN eigenvector derivatives."""
    return _named(EighResult, _spec.eigh(a))


def eigvalsh(a, UPLO="L"):
    """Eigenvalues (..., n), ascending, of the symmetric ``a``."""
    return _spec.eigh(a)[0]


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """``(u, s, vh)`` with ``a = u @ diag(s) @ vh``, ``s`` descending (..., k),
    ``k = min(m, n)``; only ``s`` when ``compute_uv=False``. Derivatives: Townsend
    (2016); with ``full_matrices=True`` only for square matrices."""
    if not compute_uv:
        return svdvals(a)
    shape = getattr(getattr(a, "aval", None), "shape", ())
    if full_matrices and (shape is None or not all(isinstance(d, int) for d in shape[-2:])):
        # whether u and vh are square (and have a derivative) depends on m and n: read at the first call
        # (regression: a non-square matrix's derivative failed in NumPy inside the generated code)
        from ..errors import ShapeError
        raise ShapeError("svd with full_matrices=True needs the matrix's shape (its derivative exists only "
                         "for a square matrix)")
    return _named(SVDResult, _spec.svd(a, full_matrices))


def svdvals(a):
    """Singular values (..., k), descending."""
    return _spec.svd(a, False)[1]


def qr(a, mode="reduced"):
    """``(q, r)``: ``'reduced'`` q (..., m, k), r (..., k, n); ``'complete'`` q (..., m, m),
    r (..., m, n); ``'r'`` only r (reduced). Derivatives for every m, n (JAX's rule for a wide
    m < n), except ``'complete'`` with m > n (GradientError). A symbolic ``a`` needs known
    sizes m and n (the derivative differs for m < n): ShapeError otherwise, which the
    front end answers by building at the first call for the arguments' shapes."""
    if mode not in ("reduced", "complete", "r"):
        raise ArgumentError(f"qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    if _tnp()._is_symbolic(a):
        sh = _tnp().shape(a)
        if len(sh) < 2 or not all(type(d) is int for d in sh[-2:]):
            raise ShapeError("qr: the matrix's sizes (m, n) must be known (the derivative of a wide "
                             "m < n matrix differs from a tall one's)")
    if mode == "r":
        return _spec.qr(a, "reduced")[1]
    return _named(QRResult, _spec.qr(a, mode))


def _rcond_default(a, rcond):
    if rcond is not None:
        return rcond
    sh = _tnp().shape(a)
    m, n = sh[-2], sh[-1]
    return 10.0 * max(m, n) * _np.finfo(_np.float64).eps if type(m) is int and type(n) is int else 1e-15


def pinv(a, rcond=None, hermitian=False, *, rtol=None):
    """Moore–Penrose pseudo-inverse (..., n, m) via the reduced SVD: singular
    values at or below ``rcond · max(s)`` count as 0 (NumPy's default cutoff is
    1e-15 relative; the Array API's ``rtol`` default is ``max(m, n) · eps``)."""
    tnp = _tnp()
    cut = rtol if rtol is not None else (1e-15 if rcond is None else rcond)
    u, s, vh = _spec.svd(a, False)
    cut = _per_matrix(cut, s)
    big = tnp.greater(s, multiply(cut, tnp.stop_gradient(_max(s, axis=-1, keepdims=True))))
    s_inv = tnp.where(big, tnp.divide(1.0, tnp.where(big, s, 1.0)), 0.0)
    return tnp.matmul(multiply(_dec.mT(vh), tnp.expand_dims(s_inv, -2)), _dec.mT(u))


def _per_matrix(tol, like):
    """A tolerance per matrix of the batch (...,) as (..., 1), against singular values
    ``like`` (..., k), in their dtype (a threshold, not data: no float-mix refusal)."""
    tnp = _tnp()
    if isinstance(tol, (int, float)):
        return tol
    dt = like.aval.dtype if tnp._is_symbolic(like) else _np.asarray(like).dtype
    tol = tnp.astype(tol, dt)
    return tol if tnp.ndim(tol) == 0 else tnp.expand_dims(tol, -1)


def lstsq(a, b, rcond=None):
    """Least-squares solution of ``a @ x ≈ b`` (a (m, n), b (m,) or (m, k)) through
    ``pinv``: returns ``(x, residuals, rank, s)`` as NumPy (residuals: the squared
    2-norms of ``b - a x`` per column when m > n and a has full rank, else empty)."""
    tnp = _tnp()
    if rcond is None:
        sh = tnp.shape(a)
        cut = multiply(_np.finfo(_np.float64).eps, tnp.maximum(sh[-2], sh[-1]))
    else:
        cut = rcond
    x = tnp.matmul(pinv(a, cut), b)
    s = svdvals(a)
    if not tnp._is_symbolic(a) and not tnp._is_symbolic(b):
        rank = int(_np.sum(s > _np.asarray(cut) * _np.max(s)))
        m, n = _np.shape(a)
        res = _np.sum((b - a @ x) ** 2, axis=0) if (m > n and rank == n) else _np.empty((0,))
        return x, _np.atleast_1d(res) if res.ndim == 0 else res, rank, s
    r = tnp.subtract(b, tnp.matmul(a, x))
    return x, sum(multiply(r, r), axis=0), None, s


def matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
    """The number of singular values above ``tol`` (default ``max(m, n) · eps · max(s)``)."""
    tnp = _tnp()
    s = svdvals(A)
    if tol is None:
        sh = tnp.shape(A)
        r = _per_matrix(rtol, s) if rtol is not None else float(max(sh[-2], sh[-1]) * _np.finfo(_np.float64).eps)
        tol = multiply(r, _max(s, axis=-1, keepdims=True))
    else:
        tol = _per_matrix(tol, s)
    return sum(tnp.astype(tnp.greater(s, tol), _np.int64), axis=-1)


def _sq(x):
    """``x²`` elementwise; ``|x|²`` for a complex array (eagerly)."""
    if not _tnp()._is_symbolic(x) and _np.iscomplexobj(x):
        return _np.abs(x) ** 2
    return multiply(x, x)


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """Vector p-norm over ``axis`` (None: all elements): ``ord`` in ±inf, 0 (count of
    nonzeros) or any nonzero number. Gradient at 0 is 0 (ord 2, not NaN)."""
    tnp = _tnp()
    ax = _abs(x)
    if ord == 2:
        return sqrt(sum(_sq(x), axis=axis, keepdims=keepdims))
    if ord == 1:
        return sum(ax, axis=axis, keepdims=keepdims)
    if ord == _np.inf:
        return _max(ax, axis=axis, keepdims=keepdims)
    if ord == -_np.inf:
        return _min(ax, axis=axis, keepdims=keepdims)
    if ord == 0:
        return sum(tnp.astype(tnp.not_equal(x, 0), ax.dtype if not tnp._is_symbolic(ax) else ax.aval.dtype),
                   axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ArgumentError(f"vector_norm: ord must be a number, got {ord!r}")
    p = float(ord)
    return tnp.power(sum(tnp.power(ax, p), axis=axis, keepdims=keepdims), 1.0 / p)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """Matrix norm over the last two axes: 'fro', 'nuc', ±1 (max/min column sum),
    ±2 (largest/smallest singular value), ±inf (max/min row sum)."""
    return _matrix_norm(x, (-2, -1), keepdims, ord)


def _matrix_norm(x, axes, keepdims, ord):
    tnp = _tnp()
    r = tnp.ndim(x)
    a0, a1 = (int(a) % r for a in axes)
    if ord in ("fro", None):
        return sqrt(sum(_sq(x), axis=(a0, a1), keepdims=keepdims))
    if ord in ("nuc", 2, -2):
        xm = tnp.moveaxis(tnp.moveaxis(x, a0, -2), a1 if a1 > a0 else a1 + 1, -1) if (a0, a1) != (r - 2, r - 1) \
            else x
        s = svdvals(xm)
        out = sum(s, axis=-1) if ord == "nuc" else (_max(s, axis=-1) if ord == 2 else _min(s, axis=-1))
        if keepdims:
            for a in sorted((a0, a1)):
                out = tnp.expand_dims(out, a)
        return out
    if ord in (1, -1, _np.inf, -_np.inf):
        col = ord in (1, -1)
        s = sum(_abs(x), axis=a0 if col else a1, keepdims=True)
        red = _max if ord > 0 else _min
        out = red(s, axis=a1 if col else a0, keepdims=True)
        return out if keepdims else tnp.squeeze(out, axis=(a0, a1))
    raise ArgumentError(f"norm: ord={ord!r} is not a matrix norm; use 'fro', 'nuc', ±1, ±2 or ±inf")


def norm(x, ord=None, axis=None, keepdims=False):
    """NumPy's ``linalg.norm``: a vector norm for an int ``axis`` (or a 1-d ``x``
    with ``axis=None``), a matrix norm for a pair of axes (or a 2-d ``x``);
    ``ord=None`` is the 2-norm / Frobenius norm of all elements.

    Raises:
      ArgumentError: an ``ord`` that is not defined for the kind of norm.
    """
    tnp = _tnp()
    if ord is None and axis is None:
        return sqrt(sum(_sq(x), keepdims=keepdims))
    if axis is None:
        axis = tuple(range(tnp.ndim(x)))
        if len(axis) > 2:
            raise ShapeError("norm: with ord set and axis=None, x must be 1-d or 2-d")
    if isinstance(axis, (int, _np.integer)):
        axis = (int(axis),)
    axis = tuple(axis)
    if len(axis) == 1:
        if isinstance(ord, str):
            raise ArgumentError(f"norm: ord={ord!r} is a matrix norm; pass two axes")
        return vector_norm(x, axis=axis[0], keepdims=keepdims, ord=2 if ord is None else ord)
    if len(axis) == 2:
        return _matrix_norm(x, axis, keepdims, ord)
    raise ShapeError(f"norm: axis must be an int or a pair, got {axis}")


def matrix_transpose(x, /):
    """Swap the last two axes (..., m, n) -> (..., n, m)."""
    return _dec.mT(x)


def diagonal(x, /, *, offset=0):
    """Array API ``linalg.diagonal``: the diagonals of the last two axes, (..., k)."""
    return _diagonal_np(x, offset, -2, -1)


def trace(x, /, *, offset=0, dtype=None):
    """Array API ``linalg.trace``: the sum of each diagonal of the last two axes."""
    out = sum(diagonal(x, offset=offset), axis=-1)
    return out if dtype is None else _tnp().astype(out, dtype)


def matmul(x1, x2, /):
    return _tnp().matmul(x1, x2)


def outer(x1, x2, /):
    return _tnp().outer(x1, x2)


def tensordot(x1, x2, /, *, axes=2):
    return _tnp().tensordot(x1, x2, axes=axes)


def vecdot(x1, x2, /, *, axis=-1):
    """Σ x1·x2 over ``axis`` (broadcast)."""
    return _tnp().vecdot(x1, x2, axis=axis)


def cross(x1, x2, /, *, axis=-1):
    """The cross product of 3-vectors along ``axis``."""
    return _tnp().cross(x1, x2, axis=axis)


def matrix_power(a, n):
    """``a`` (..., m, m) to the integer power ``n`` (negative: of the inverse), by squaring."""
    tnp = _tnp()
    n = int(n)
    if n < 0:
        a, n = inv(a), -n
    if n == 0:
        sh = tnp.shape(a)
        eye = _np.eye(sh[-1]) if type(sh[-1]) is int else None
        if eye is None:
            raise ShapeError("matrix_power: n=0 needs a known matrix size")
        dt = a.aval.dtype if tnp._is_symbolic(a) else _np.asarray(a).dtype
        return tnp.add(tnp.zeros_like(a), eye.astype(dt))
    result, base = None, a
    while n:
        if n & 1:
            result = base if result is None else tnp.matmul(result, base)
        n >>= 1
        if n:
            base = tnp.matmul(base, base)
    return result


def multi_dot(arrays, *, out=None):
    """``arrays[0] @ arrays[1] @ ... @ arrays[-1]`` in the cheapest order (``numpy.linalg.multi_dot``):
    a 1-d first array is a row vector and a 1-d last one a column vector (their axis is dropped
    from the result); the others must be 2-d. Two arrays: ``dot``. The order is NumPy's (the
    matrix-chain optimum, so the same rounding) when the sizes are known, else left to right.
    Derivative: that of the matmuls.

    Raises:
      ValueError: fewer than two arrays, ``out=``. LinAlgError: an inner array not 2-d."""
    tnp = _tnp()
    if out is not None:
        raise ValueError("multi_dot: out= is not supported (tlaloc values are immutable); use the result")
    arrays = [tnp.asarray(a) for a in arrays]
    n = len(arrays)
    if n < 2:
        raise ValueError("multi_dot: Expecting at least two arrays.")
    if n == 2:
        return tnp.dot(arrays[0], arrays[1])
    first, last = tnp.ndim(arrays[0]), tnp.ndim(arrays[-1])
    if first == 1:
        arrays[0] = tnp.expand_dims(arrays[0], 0)
    if last == 1:
        arrays[-1] = tnp.expand_dims(arrays[-1], 1)
    for a in arrays:
        if tnp.ndim(a) != 2:
            raise LinAlgError(f"{tnp.ndim(a)}-dimensional array given. Array must be two-dimensional")
    dims = [tnp.shape(a)[0] for a in arrays] + [tnp.shape(arrays[-1])[1]]
    if all(type(d) is int for d in dims):
        order = _chain_order(dims)
        result = _chain(arrays, order, 0, n - 1)
    else:
        result = arrays[0]
        for a in arrays[1:]:
            result = tnp.matmul(result, a)
    if first == 1 and last == 1:
        return result[0, 0]
    if first == 1 or last == 1:
        return tnp.ravel(result)
    return result


def _chain_order(p):
    """NumPy's matrix-chain order (``_multi_dot_three`` for three, else the dynamic program):
    ``s[i][j]`` is where the product of arrays i..j splits."""
    n = len(p) - 1
    if n == 3:
        cost1 = p[0] * p[2] * (p[1] + p[3])          # (AB)C
        cost2 = p[1] * p[3] * (p[0] + p[2])          # A(BC)
        split = 1 if cost1 < cost2 else 0
        return {(0, 2): split, (0, 1): 0, (1, 2): 1}
    m = {(i, i): 0.0 for i in range(n)}
    s = {}
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            m[i, j] = float("inf")
            for k in range(i, j):
                q = m[i, k] + m[k + 1, j] + p[i] * p[k + 1] * p[j + 1]
                if q < m[i, j]:
                    m[i, j], s[i, j] = q, k
    return s


def _chain(arrays, order, i, j):
    if i == j:
        return arrays[i]
    k = order[i, j]
    return _tnp().matmul(_chain(arrays, order, i, k), _chain(arrays, order, k + 1, j))


def triangular_solve(a, b, lower=True, transpose_a=False):
    return _dec.triangular_solve(a, b, lower, transpose_a)


def logdet_spd(a):
    """log det of an SPD matrix via Cholesky: 2 Σ log diag(L)."""
    L = _dec.cholesky(a)
    return multiply(2.0, sum(log(_diagonal_np(L, 0, -2, -1)), axis=-1))


LinAlgError = _np.linalg.LinAlgError
