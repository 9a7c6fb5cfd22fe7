"""Small programs for the edge-case tests (tlaloc transforms them from source)."""
import numpy as np

from tlaloc import F64


def sort_weighted(x):
    return np.sum(np.sort(x) * np.arange(5.0))


def sort_desc_weighted(x):
    return np.sum(np.sort(x, descending=True) * np.arange(5.0))


def arccosh_sum(x):
    return np.sum(np.arccosh(x))


def copysign_sum(x, y):
    return np.sum(np.copysign(x, y) * np.arange(4.0))


def signbit_of(x):
    return np.signbit(x)


def dot_scalar_loss(m):
    return np.sum(np.dot(m, 1.5))


def linspace_loss(a, b):
    return np.sum(np.linspace(a * 2.0, b, 5) ** 2)


def eigvals_loss(a: F64['n', 'n']):
    return np.sum(np.linalg.eigvalsh(a) * np.array([1.0, 2.0, 3.0]))


def nextafter_inside(x):
    return np.nextafter(x, 2.0)


def qr_wide(a: F64[2, 3]):
    q, r = np.linalg.qr(a)
    return np.sum(r)


def logaddexp_of(x, y):
    return np.logaddexp(x, y)


def sign_of(x):
    return np.sign(x)


def svd_frobenius(a: F64['n', 'm']):
    return np.sum(np.linalg.svd(a, compute_uv=False) ** 2)


def qr_loss(a: F64['n', 'm']):
    q, r = np.linalg.qr(a)
    return np.sum(r * r * np.array([1.0, 2.0, 3.0])) + np.sum(q[:, 0] * np.diagonal(r)[0])


def fft_inside(x):
    return np.fft.fft(x)


def unique_inside(x):
    return np.unique_values(x)


def dot_nd(a, b):
    return np.sum(np.dot(a, b) ** 2)


def inner_2d(a, v):
    return np.sum(np.inner(a, a) ** 2) + np.sum(np.inner(a, v))


def rounded_weights(x):
    return np.sum(np.round(x, 1) * x + np.around(x, -1) * x)


def einsum_implicit(a):
    return np.sum(np.einsum("ij,kj", a, a) ** 2) + np.einsum("ij,ij", a, a)
