"""Programs for the vmap tests, each written once over a NumPy-like module:
``make(numpy)`` gives the functions tlaloc lowers from source (and that also
run eagerly as plain NumPy, the loop oracle), ``make(jax.numpy)`` the JAX
twins. Control flow on per-example values has hand-written JAX twins (JAX
needs ``lax.cond``/``lax.while_loop`` there).
"""
import jax
import jax.numpy as jnp
import numpy as onp
import numpy as np


def make(np):
    def elementwise(x, y):
        return np.tanh(x) * y + np.exp(-x ** 2) / (1.0 + y ** 2)

    def reductions(x):
        return np.sum(x * x, axis=1) + np.max(x, axis=0).sum() - np.prod(np.abs(x) + 0.5) + np.mean(x)

    def logsumexp(z):
        m = np.max(z)
        return m + np.log(np.sum(np.exp(z - m)))

    def mlp(w1, b1, w2, x):
        return np.tanh(x @ w1 + b1) @ w2

    def matvec(a, v):
        return a @ v + v @ a.T @ a

    def index_scalar(x, i):
        return x[i] * 2.0 + x[:, 1].sum() + x[i, 2]

    def index_rows(x, idx):
        return np.take(x, idx, axis=0).sum(axis=1) + x[idx, 1]

    def solve(a, b):
        return np.linalg.solve(a @ a.T + 3.0 * np.eye(3), b)

    def chol_logdet(a):
        m = a @ a.T + 3.0 * np.eye(3)
        lo = np.linalg.cholesky(m)
        return 2.0 * np.sum(np.log(np.diagonal(lo))) - np.linalg.slogdet(m)[1] + np.linalg.inv(m).sum()

    def contractions(x, y):
        return np.einsum("ij,jk->ik", x, x.T) + np.einsum("i,i->", y, y)

    def scans(x):
        return np.cumsum(x, axis=0) * 1.5, np.argmax(x, axis=1)

    def shapes(x):
        z = np.concatenate([x, x * 2.0], axis=0)
        return z.reshape(-1)[::2] + z.T.reshape(-1)[1::2], np.flip(x, axis=1)

    def where_clip(x):
        return np.where(x > 0, x, 0.1 * x) + np.clip(x, -0.5, 0.5)

    def static_loop(x, w):
        s = 0.0
        for i in range(3):
            s = np.tanh(s * w + x[i])
        return s

    return {k: v for k, v in locals().items() if callable(v) and k != "np"}


T, J = make(onp), make(jnp)


# -- writes, and control flow on per-example values (tlaloc source, JAX twin) -----------------------

def update(x, i):
    y = x * 1.0
    y[i] = 0.5
    y[1:3] += x[0]
    return y


def j_update(x, i):
    return x.at[i].set(0.5).at[1:3].add(x[0])


def if_branch(x):
    if x.sum() > 0:
        y = onp.sqrt(x * x + 1.0)
    else:
        y = -x ** 3
    return y * 2.0


def j_if_branch(x):
    return jax.lax.cond(x.sum() > 0, lambda x: jnp.sqrt(x * x + 1.0), lambda x: -x ** 3, x) * 2.0


def halve(x):
    n = 0.0
    while x > 1.0:
        x = x / 2.0
        n = n + 1.0
    return x * n + x


def j_halve(x):
    x, n = jax.lax.while_loop(lambda c: c[0] > 1.0, lambda c: (c[0] / 2.0, c[1] + 1.0), (x, 0.0))
    return x * n + x


def powsum(x, n):
    s = 0.0
    for i in range(n):
        s = s + x * s + x
    return s


def j_powsum(x, n):
    return jax.lax.fori_loop(0, n, lambda i, s: s + x * s + x, 0.0 * x)


def dist(a, b):
    return onp.sqrt(onp.sum((a - b) ** 2))


def j_dist(a, b):
    return jnp.sqrt(jnp.sum((a - b) ** 2))


def first_positive_run(x):
    s = 0.0
    for i in range(5):
        if x[i] > 1.0:
            break
        s = s + x[i] * x[i]
    return s


def early_return(x):
    for i in range(4):
        if x[i] < 0.0:
            return x[i] * 10.0
    return x.sum()


def nan_branch(x):
    if x.sum() > 0:
        y = x * x
    else:
        y = np.log(-x)          # NaN for positive entries: computed (and dropped) when the sum is > 0
    return y
