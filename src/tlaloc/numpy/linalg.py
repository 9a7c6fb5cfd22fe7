"""``tlaloc.numpy.linalg``: solve, cholesky, inv, slogdet, det, norm.

Matrices are ``(..., n, n)``. References for the derivative rules are in
``tlaloc/_prims/decompositions.py``.
"""
from __future__ import annotations

import numpy as _np

from .._prims import decompositions as _dec
from ..errors import ArgumentError, ShapeError
from . import sqrt, sum, multiply, abs as _abs, max as _max, exp, log, diagonal


def solve(a, b):
    """x with ``a @ x = b``; a ``(..., n, n)``, b ``(..., n)`` or ``(..., n, k)``."""
    return _dec.solve(a, b)


def cholesky(a):
    """Lower factor L with ``a = L Lᵀ``; a must be symmetric positive definite.
    Eagerly a non-SPD input raises ``numpy.linalg.LinAlgError``."""
    from . import _is_symbolic
    if not _is_symbolic(a):
        _np.linalg.cholesky(a)   # raises LinAlgError on a non-SPD input
    return _dec.cholesky(a)


def inv(a):
    return _dec.inv(a)


def slogdet(a):
    """(sign, log|det a|); differentiable in the second."""
    return _dec.slogdet(a)


def det(a):
    s, l = _dec.slogdet(a)
    return multiply(s, exp(l))


def norm(x, ord=None, axis=None, keepdims=False):
    """The 2-norm of vectors, or the Frobenius norm of matrices (``ord=None``/``'fro'``).

    Args:
      x: array; ``axis`` None (all elements), an int (vector norms) or a pair
        (matrix norms).
      ord: None, 2 (vector norms only) or 'fro' (matrix norms only).
    Returns:
      ``sqrt(sum(x**2))`` over ``axis``; its gradient at 0 is 0, not NaN.
    Raises:
      ArgumentError: ``ord=2`` on a matrix (NumPy's spectral norm, not
        supported), or ``ord`` other than None/2/'fro'.
    """
    if ord not in (None, 2, "fro"):
        raise ShapeError(f"norm: only ord=None/2/'fro' is supported, got {ord!r}")
    if ord == 2 and not isinstance(axis, (int, _np.integer)):
        matrix = axis is not None and len(tuple(axis)) == 2
        if axis is None:
            from . import _rank
            matrix = _rank(x, "norm(ord=2)") == 2
        if matrix:
            raise ArgumentError("norm: ord=2 of a matrix is its spectral norm (largest singular value), "
                                "which tlaloc does not compute; use ord='fro' for the Frobenius norm or "
                                "pass an int axis for vector norms")
    return sqrt(sum(multiply(x, x), axis=axis, keepdims=keepdims))


def triangular_solve(a, b, lower=True, transpose_a=False):
    return _dec.triangular_solve(a, b, lower, transpose_a)


def logdet_spd(a):
    """log det of an SPD matrix via Cholesky: 2 Σ log diag(L)."""
    L = _dec.cholesky(a)
    return multiply(2.0, sum(log(diagonal(L, 0, -2, -1)), axis=-1))
