"""Straight-line programs for the reverse-mode table, each next to its JAX twin.

``f_<name>`` is the program under test (plain NumPy, as a user writes it);
``j_<name>`` is its twin in ``jax.numpy``, differentiated by JAX as the oracle.
Keep each pair side by side so a reader can check them against each other.
"""
import jax
import jax.numpy as jnp
import numpy as np

import tlaloc.numpy as tnp


# -- assignment, augmented assignment, tuple unpacking -----------------------------

def f_assign_chain(x, w):
    h = x @ w                   # (n, k)
    y = np.tanh(h)
    z = y * y
    return z.sum()


def j_assign_chain(x, w):
    return (jnp.tanh(x @ w) ** 2).sum()


def f_augassign(x, y):
    s = x * 2.0
    s += y
    s *= x
    s -= 1.5
    s /= 3.0
    s **= 2
    return s.sum()


def j_augassign(x, y):
    return ((((x * 2.0 + y) * x - 1.5) / 3.0) ** 2).sum()


def f_tuple_unpack(x, y):
    a, b = x * 2.0, x + y
    b, a = a, b                 # swap
    (c, d), e = (a * b, a - b), y
    return (c * d + e).sum()


def j_tuple_unpack(x, y):
    a, b = x + y, x * 2.0
    return ((a * b) * (a - b) + y).sum()


# -- arithmetic, ** and @ ---------------------------------------------------------

def f_arith(x, y):
    a = x + y - x * y / (y * y + 1.0)
    b = -a + 3.0 ** x - x ** 3 + (x * x + 1.0) ** 0.5
    c = (y * y + 0.5) ** x      # array base and array exponent
    return (a * b + c).sum()


def j_arith(x, y):
    a = x + y - x * y / (y * y + 1.0)
    b = -a + 3.0 ** x - x ** 3 + (x * x + 1.0) ** 0.5
    c = (y * y + 0.5) ** x
    return (a * b + c).sum()


def f_unary_math(x):
    p = x * x + 0.5             # positive
    u = 0.9 * np.tanh(x)        # in (-1, 1)
    terms = (np.exp(x) + np.log(p) + np.sin(x) * np.cos(x) + np.sqrt(p) + np.abs(x)
             + np.log1p(p) + np.expm1(u) + np.arctan(x) + np.sinh(u) + np.cosh(u)
             + np.arcsin(u) + np.arctanh(u) + tnp.sigmoid(x) + np.tan(u) + np.square(x))
    return terms.sum()


def j_unary_math(x):
    p = x * x + 0.5
    u = 0.9 * jnp.tanh(x)
    terms = (jnp.exp(x) + jnp.log(p) + jnp.sin(x) * jnp.cos(x) + jnp.sqrt(p) + jnp.abs(x)
             + jnp.log1p(p) + jnp.expm1(u) + jnp.arctan(x) + jnp.sinh(u) + jnp.cosh(u)
             + jnp.arcsin(u) + jnp.arctanh(u) + jax.nn.sigmoid(x) + jnp.tan(u) + jnp.square(x))
    return terms.sum()


def f_compare_where(x, y):
    a = np.where(x > y, x * y, x - y)
    b = np.where(x <= 0.1, np.exp(x), y * y)
    c = np.where(x != y, a, b) + np.where(x == x, 1.0, 0.0) * y
    d = (x >= y) * x + (x < y) * y   # booleans as 0/1 masks
    return (a + b * c + d).sum()


def j_compare_where(x, y):
    a = jnp.where(x > y, x * y, x - y)
    b = jnp.where(x <= 0.1, jnp.exp(x), y * y)
    c = jnp.where(x != y, a, b) + jnp.where(x == x, 1.0, 0.0) * y
    d = (x >= y) * x + (x < y) * y
    return (a + b * c + d).sum()


def f_max_min_noties(x, y):
    return (np.maximum(x, y) * np.minimum(x, 2.0 * y)).sum() + np.maximum(x, 0.0).sum()


def j_max_min_noties(x, y):
    return (jnp.maximum(x, y) * jnp.minimum(x, 2.0 * y)).sum() + jnp.maximum(x, 0.0).sum()


# -- broadcasting and reductions ----------------------------------------------------

def f_broadcast_keepdims(x, b, c):
    # x: (n, k), b: (k,), c: (n, 1)
    centered = x - x.mean(axis=1, keepdims=True)          # (n, k)
    scaled = centered / (x * x).sum(axis=0, keepdims=True)  # (n, k)
    z = scaled * b + c                                    # (n, k)
    return (z * z).sum(axis=-1).sum() + np.sum(z, axis=0).max()


def j_broadcast_keepdims(x, b, c):
    centered = x - x.mean(axis=1, keepdims=True)
    scaled = centered / (x * x).sum(axis=0, keepdims=True)
    z = scaled * b + c
    return (z * z).sum(axis=-1).sum() + jnp.sum(z, axis=0).max()


def f_reductions(x):
    # x: (n, k) with distinct entries (no ties in max/min)
    return (x.sum() + x.mean(axis=0).sum() + x.max(axis=1).sum() + np.min(x)
            + np.prod(x[0]) + x.var() + x.std(axis=0).sum() + np.mean(x, axis=(0, 1)))


def j_reductions(x):
    return (x.sum() + x.mean(axis=0).sum() + x.max(axis=1).sum() + jnp.min(x)
            + jnp.prod(x[0]) + x.var() + x.std(axis=0).sum() + jnp.mean(x, axis=(0, 1)))


def f_softmax_xent(logits, y):
    # logits: (n, c), y: (n, c) one-hot weights
    m = logits.max(axis=1, keepdims=True)
    z = logits - m
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -(y * logp).sum() / logits.shape[0]


def j_softmax_xent(logits, y):
    return -(y * jax.nn.log_softmax(logits, axis=1)).sum() / logits.shape[0]


# -- matmul, including 1-D operands ---------------------------------------------------

def f_matmul_1d(v, m, u):
    # v: (n,), m: (n, k), u: (k,)
    a = v @ m                   # (k,)    vector @ matrix
    b = m @ u                   # (n,)    matrix @ vector
    c = v @ v                   # ()      vector @ vector
    d = m.T @ m                 # (k, k)
    return (a * u).sum() + (b * v).sum() * c + u @ d @ u + np.dot(v, b)


def j_matmul_1d(v, m, u):
    a = v @ m
    b = m @ u
    c = v @ v
    d = m.T @ m
    return (a * u).sum() + (b * v).sum() * c + u @ d @ u + jnp.dot(v, b)


def f_matmul_batched(a, b):
    # a: (B, n, k), b: (k, m)
    return np.tanh(a @ b).sum()


def j_matmul_batched(a, b):
    return jnp.tanh(a @ b).sum()


# -- subscripts and slices (reads) --------------------------------------------------------

def f_subscript_read(x):
    # x: (n, k), n >= 4, k >= 3
    return (x[0, 0] * x[-1, 1] + x[1:3].sum() + x[::2, 1:].sum() * x[:, 2].sum()
            + (x[1] * x[2]).sum() + x[..., 0].sum() + x[None, 1, :].sum() + x[-2:, -1].prod())


def j_subscript_read(x):
    return (x[0, 0] * x[-1, 1] + x[1:3].sum() + x[::2, 1:].sum() * x[:, 2].sum()
            + (x[1] * x[2]).sum() + x[..., 0].sum() + x[None, 1, :].sum() + x[-2:, -1].prod())


def f_gather_repeated(x, idx, w):
    # idx: int array with repeated entries -> the gradient accumulates; w: (len(idx),)
    g = x[idx]
    return (g * g * w).sum()


def j_gather_repeated(x, idx, w):
    g = x[idx]
    return (g * g * w).sum()


def f_shape_ops(x):
    # x: (n, k)
    y = x.reshape(-1)
    z = np.concatenate([y, y[::-1] * 2.0])
    w = np.stack([x, x * x], axis=0).transpose(1, 2, 0)   # (n, k, 2)
    return (z * z).sum() + (w[..., 1] * np.expand_dims(x[:, 0], 1)).sum()


def j_shape_ops(x):
    y = x.reshape(-1)
    z = jnp.concatenate([y, y[::-1] * 2.0])
    w = jnp.stack([x, x * x], axis=0).transpose(1, 2, 0)
    return (z * z).sum() + (w[..., 1] * jnp.expand_dims(x[:, 0], 1)).sum()


# -- a 0-d argument and a scalar output built from it -----------------------------------

def f_scalar_arg(s, x):
    return np.exp(s) * (x * s).sum() + s ** 3


def j_scalar_arg(s, x):
    return jnp.exp(s) * (x * s).sum() + s ** 3


# -- tlaloc.numpy spelled out, and stop_gradient -----------------------------------------------

def f_tnp_library(x, v):
    # x: (n, k), v: (k,)
    a = tnp.logsumexp(x, axis=1).sum() + (tnp.softmax(x, axis=-1) * v).sum()
    b = (tnp.log_softmax(x, axis=0) ** 2).mean() + tnp.einsum("nk,k->n", x, v).sum()
    c = tnp.cumsum(v, axis=0).prod() + tnp.logaddexp(x[0], v).sum() + np.trace(np.outer(v, v))
    return a + b + c + tnp.var(x, axis=0).sum()


def j_tnp_library(x, v):
    a = jax.scipy.special.logsumexp(x, axis=1).sum() + (jax.nn.softmax(x, axis=-1) * v).sum()
    b = (jax.nn.log_softmax(x, axis=0) ** 2).mean() + jnp.einsum("nk,k->n", x, v).sum()
    c = jnp.cumsum(v, axis=0).prod() + jnp.logaddexp(x[0], v).sum() + jnp.trace(jnp.outer(v, v))
    return a + b + c + jnp.var(x, axis=0).sum()


def f_stop_gradient(x):
    m = tnp.stop_gradient(x.mean())
    return ((x - m) ** 2).sum() * tnp.stop_gradient(x[0]) + x[0]


def j_stop_gradient(x):
    m = jax.lax.stop_gradient(x.mean())
    return ((x - m) ** 2).sum() * jax.lax.stop_gradient(x[0]) + x[0]


def f_arange_weights(x):
    # np.arange with a length read from the argument's shape
    return (x * np.arange(len(x))).sum() + (x[::-1] * x * np.arange(1, x.shape[0] + 1)).sum()


def j_arange_weights(x):
    return (x * jnp.arange(len(x))).sum() + (x[::-1] * x * jnp.arange(1, x.shape[0] + 1)).sum()
