"""Programs with subscript assignment and ``a[i] += v`` (functional semantics
in tlaloc; in NumPy they write in place), each next to a JAX ``.at[]`` twin.

Repeated indices accumulate when the writes happen one per loop trip. The
generators in ``cases.py`` pass copies, so the in-place NumPy runs used by the
central-difference check never see each other's writes.
"""
import jax.numpy as jnp
import numpy as np


def f_setitem_loop(x, w):
    a = np.zeros_like(x)
    for i in range(len(x)):
        a[i] = x[i] * w[i] + a[i - 1] * 0.5      # reads what the previous trip wrote
    return (a * a).sum()


def j_setitem_loop(x, w):
    a = jnp.zeros_like(x)
    for i in range(len(x)):
        a = a.at[i].set(x[i] * w[i] + a[i - 1] * 0.5)
    return (a * a).sum()


def f_addat_repeated(x, idx):
    # idx: int array with repeats -> a[idx[k]] accumulates several x[k]
    a = np.zeros(3)
    for k in range(len(idx)):
        a[idx[k]] += x[k] * x[k]
    return (a * np.array([1.0, 2.0, 3.0]) * a).sum()


def j_addat_repeated(x, idx):
    a = jnp.zeros(3)
    for k in range(len(idx)):
        a = a.at[idx[k]].add(x[k] * x[k])
    return (a * jnp.array([1.0, 2.0, 3.0]) * a).sum()


def f_augassign_ops_subscript(x):
    a = x * 1.0
    for i in range(1, len(a)):
        a[i] *= a[i - 1]
        a[i] -= 0.1
    a[0] /= 2.0
    return (a * a).sum()


def j_augassign_ops_subscript(x):
    a = x * 1.0
    for i in range(1, len(a)):
        a = a.at[i].multiply(a[i - 1])
        a = a.at[i].add(-0.1)
    a = a.at[0].divide(2.0)
    return (a * a).sum()


def f_setitem_slices(m, v):
    # m: (n, k) with n >= 3, v: (k,)
    a = m * 1.0
    a[0] = v * 2.0
    a[1:3] = a[1:3] * v
    a[:, 0] = np.tanh(a[:, 1])
    a[-1, -1] += v[0]
    return (a * a).sum()


def j_setitem_slices(m, v):
    a = m * 1.0
    a = a.at[0].set(v * 2.0)
    a = a.at[1:3].set(a[1:3] * v)
    a = a.at[:, 0].set(jnp.tanh(a[:, 1]))
    a = a.at[-1, -1].add(v[0])
    return (a * a).sum()


def f_write_argument(x):
    # writes into the argument itself (a copy in tlaloc; the caller's array in NumPy)
    x[0] = x[0] * x[1]
    x[1:] = np.sin(x[1:])
    return (x * x).sum()


def j_write_argument(x):
    x = x.at[0].set(x[0] * x[1])
    x = x.at[1:].set(jnp.sin(x[1:]))
    return (x * x).sum()


def f_setitem_in_branch(x, w):
    a = np.zeros_like(x)
    for i in range(len(x)):
        if x[i] > 0:
            a[i] = x[i] ** 2
        else:
            a[len(x) - 1 - i] += x[i]
    return (a * w).sum() + a.sum() ** 2


def j_setitem_in_branch(x, w):
    a = jnp.zeros_like(x)
    for i in range(len(x)):
        if x[i] > 0:
            a = a.at[i].set(x[i] ** 2)
        else:
            a = a.at[len(x) - 1 - i].add(x[i])
    return (a * w).sum() + a.sum() ** 2


def f_alias_write(a):
    # NumPy: b is a, so the write is visible through a
    b = a
    b[0] = 5.0 * b[0]
    return (a * a).sum()


def j_alias_write(a):
    a = a.at[0].set(5.0 * a[0])
    return (a * a).sum()


def _last_writes(idx):
    """Positions k of ``idx`` whose write survives NumPy's ``a[idx] = v`` (last one wins)."""
    last = {int(k): pos for pos, k in enumerate(np.asarray(idx))}
    return np.array(sorted(last.values()), dtype=np.int64)


def f_setitem_fancy_repeated(x, idx):
    # a vectorized write with repeated indices: the last write wins, earlier ones get no gradient
    a = np.zeros(3)
    a[idx] = x * 2.0
    return (a * a * np.array([1.0, 2.0, 3.0])).sum()


def j_setitem_fancy_repeated(x, idx):
    keep = _last_writes(idx)
    a = jnp.zeros(3).at[np.asarray(idx)[keep]].set(x[keep] * 2.0)
    return (a * a * jnp.array([1.0, 2.0, 3.0])).sum()


def f_addat_fancy_repeated(x, idx):
    # NumPy's buffered `a[idx] += v`: a[idx] = a[idx] + v, so repeats do NOT accumulate
    a = np.ones(3)
    a[idx] += x
    return (a * a * np.array([1.0, 2.0, 3.0])).sum()


def j_addat_fancy_repeated(x, idx):
    keep = _last_writes(idx)
    i = np.asarray(idx)[keep]
    a = jnp.ones(3)
    a = a.at[i].set(a[i] + x[keep])
    return (a * a * jnp.array([1.0, 2.0, 3.0])).sum()


def f_setitem_2d_loops(m, v):
    # a[i, j] += ... in a double loop; writes land on every element of a column several times
    a = np.zeros_like(m)
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            a[i, j] += m[i, j] * v[j]
            a[0, j] += m[i, j] * 0.5
    return (a * a).sum()


def j_setitem_2d_loops(m, v):
    a = jnp.zeros_like(m)
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            a = a.at[i, j].add(m[i, j] * v[j])
            a = a.at[0, j].add(m[i, j] * 0.5)
    return (a * a).sum()
