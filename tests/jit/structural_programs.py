"""Reductions, scans, shape and linear-algebra primitives for test_structural."""
import numpy as np


def scans(x):
    return (np.cumsum(x, axis=1) * np.cumprod(0.5 + 0.1 * x, axis=0)).sum()


def reductions(x):
    return x.max(axis=0).sum() + x.min() * x.prod(axis=1).sum() + x.std() + x.var(axis=1).sum() + x.mean()


def shapes(x):
    a = np.concatenate([x, x * 2.0], axis=0)
    b = np.pad(x, ((1, 0), (0, 2)))
    c = np.flip(x, 1) + np.swapaxes(x.reshape(2, 3, 2), 0, 1).reshape(3, 4)[:2, :].sum()
    return (a * a).sum() + (b * b).sum() + c.sum() + np.stack([x, x], axis=2).sum()


def contractions(x, y):
    return (np.einsum("ij,jk->ik", x, y) ** 2).sum() + (x @ y @ y.T).sum() + np.einsum("ij,ij->", x, x)


def linalg(a, b):
    spd = a @ a.T + 4.0 * np.eye(3)
    l = np.linalg.cholesky(spd)
    return (l * l).sum() + (np.tril(spd) - np.triu(spd, 1)).sum()


def elementwise_misc(x, y):
    a = np.clip(x, -0.5, 0.7) + np.where(x > y, x, y) + np.round(3.0 * x) + np.floor(x) * np.ceil(y)
    b = np.remainder(x, 0.3) + np.floor_divide(x, 0.3) + np.hypot(x, y) + np.logaddexp(x, y)
    return (a * b).sum() + np.sign(x).sum() + np.isfinite(x / (y * 0.0)).sum()


def int_math(n, m):
    return n // 3 + n % 3 + m // -2 + m % -2 + (n * m) + np.abs(m)


def arg_reductions(x):
    return x.argmax(axis=1), x.argmin(), np.argmax(x[::-1])


def lu_family(a, b):
    m = a @ a.T + np.eye(3)
    x = np.linalg.solve(m, b)
    sign, logdet = np.linalg.slogdet(m)
    return (x * x).sum() + logdet * sign + np.linalg.inv(m).sum()


def empty_scans(x):
    return np.sum(x ** 2) + np.prod(x[3:3]) + np.sum(np.cumsum(x[2:2])) + np.sum(np.cumprod(x[:0]))
