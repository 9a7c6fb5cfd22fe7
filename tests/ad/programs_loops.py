"""Loop programs (for over range() with data-dependent trip counts, while on
values, break, continue, return from anywhere, loop-carried overwrites) for the
reverse-mode table, each next to its JAX twin (the same code over
``jax.numpy``; JAX's eager ``grad`` runs the loops on concrete values).
"""
import jax.numpy as jnp
import numpy as np


# -- for over range() with a data-dependent trip count -------------------------------

def f_for_branch(x, w):
    y = np.tanh(x @ w)          # (n,)
    s = 0.0
    for i in range(len(y)):
        if y[i] > 0:
            s = s + y[i] ** 2
        else:
            s = s - y[i]
    return s


def j_for_branch(x, w):
    y = jnp.tanh(x @ w)
    s = 0.0
    for i in range(len(y)):
        if y[i] > 0:
            s = s + y[i] ** 2
        else:
            s = s - y[i]
    return s


def f_for_shape0_overwrite(x, a):
    # y is overwritten every trip: y = y * x[i] (the adjoint needs every old y)
    y = a
    for i in range(x.shape[0]):
        y = y * x[i] + np.sin(y)
    return y.sum()


def j_for_shape0_overwrite(x, a):
    y = a
    for i in range(x.shape[0]):
        y = y * x[i] + jnp.sin(y)
    return y.sum()


def f_for_range_forms(x):
    s = 0.0
    for i in range(1, len(x)):
        s = s + x[i] * x[i - 1]
    for i in range(len(x) - 1, -1, -2):
        s = s * 0.5 + x[i]
    for i in range(0, len(x), 3):
        s = s + np.cos(x[i]) * i
    return s


def j_for_range_forms(x):
    s = 0.0
    for i in range(1, len(x)):
        s = s + x[i] * x[i - 1]
    for i in range(len(x) - 1, -1, -2):
        s = s * 0.5 + x[i]
    for i in range(0, len(x), 3):
        s = s + jnp.cos(x[i]) * i
    return s


def f_for_over_rows(m, v):
    acc = v * 0.0
    for row in m:
        acc = np.tanh(acc + row * v)
    return acc.sum()


def j_for_over_rows(m, v):
    acc = v * 0.0
    for row in m:
        acc = jnp.tanh(acc + row * v)
    return acc.sum()


def f_nested_loops(a, b):
    # a: (n, k), b: (k,); a double loop that also reads the outer loop's carry
    total = 0.0
    for i in range(a.shape[0]):
        row = 0.0
        for j in range(a.shape[1]):
            row = row + a[i, j] * b[j] + total * 0.1
        total = total + np.tanh(row)
    return total


def j_nested_loops(a, b):
    total = 0.0
    for i in range(a.shape[0]):
        row = 0.0
        for j in range(a.shape[1]):
            row = row + a[i, j] * b[j] + total * 0.1
        total = total + jnp.tanh(row)
    return total


def f_loop_static_unrolled(x):
    # a loop over a static Python sequence (unrolled by the front end)
    s = x * 0.0
    for c in (0.5, -1.0, 2.0):
        s = s * x + c
    for k in [1, 2]:
        s = s + x ** k
    return s.sum()


def j_loop_static_unrolled(x):
    s = x * 0.0
    for c in (0.5, -1.0, 2.0):
        s = s * x + c
    for k in [1, 2]:
        s = s + x ** k
    return s.sum()


# -- break, continue, return anywhere ------------------------------------------------------

def f_for_break(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] < 0:
            break
        s = s + x[i] ** 2
    return s + x[0]


def j_for_break(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] < 0:
            break
        s = s + x[i] ** 2
    return s + x[0]


def f_for_continue(x, w):
    s = 0.0
    for i in range(len(x)):
        if x[i] * w[i] < 0:
            continue
        s = s + x[i] * w[i] * x[i]
    return s


def j_for_continue(x, w):
    s = 0.0
    for i in range(len(x)):
        if x[i] * w[i] < 0:
            continue
        s = s + x[i] * w[i] * x[i]
    return s


def f_return_in_branch(x):
    if x[0] > 0:
        return x[0] * x.sum()
    y = x * x
    if y.sum() > 3.0:
        return np.sqrt(y.sum())
    return y.sum() * 0.5


def j_return_in_branch(x):
    if x[0] > 0:
        return x[0] * x.sum()
    y = x * x
    if y.sum() > 3.0:
        return jnp.sqrt(y.sum())
    return y.sum() * 0.5


def f_return_in_loop(x):
    # returns from inside the loop at the first entry above 1, else falls through
    for i in range(len(x)):
        if x[i] > 1.0:
            return x[i] * 3.0
    return x.sum()


def j_return_in_loop(x):
    for i in range(len(x)):
        if x[i] > 1.0:
            return x[i] * 3.0
    return x.sum()


def f_return_in_loop_acc(x):
    # returns an accumulated value from inside the loop
    s = 0.0
    for i in range(len(x)):
        s = s + x[i] * x[i]
        if s > 2.0:
            return s * x[0]
    return s


def j_return_in_loop_acc(x):
    s = 0.0
    for i in range(len(x)):
        s = s + x[i] * x[i]
        if s > 2.0:
            return s * x[0]
    return s


# -- logsumexp with loops, if and a running max ------------------------------------------------

def f_logsumexp_loop(x):
    m = x[0]
    for i in range(1, len(x)):
        if x[i] > m:
            m = x[i]
    s = 0.0
    for i in range(len(x)):
        s = s + np.exp(x[i] - m)
    return m + np.log(s)


def j_logsumexp_loop(x):
    m = x[0]
    for i in range(1, len(x)):
        if x[i] > m:
            m = x[i]
    s = 0.0
    for i in range(len(x)):
        s = s + jnp.exp(x[i] - m)
    return m + jnp.log(s)


def f_running_max_only(x):
    # the running max itself: its gradient is one-hot at the argmax (non-zero)
    m = x[0]
    for i in range(1, len(x)):
        if x[i] > m:
            m = x[i]
    return m * m


def j_running_max_only(x):
    m = x[0]
    for i in range(1, len(x)):
        if x[i] > m:
            m = x[i]
    return m * m


# -- combinations -------------------------------------------------------------------------------

def f_for_elem_break(x):
    # `for v in x` over an array's elements, with a break
    s = 0.0
    for v in x:
        if v < -1.0:
            break
        s = s + v * v
    return s


def j_for_elem_break(x):
    s = 0.0
    for v in x:
        if v < -1.0:
            break
        s = s + v * v
    return s


def f_return_nested_loops(m):
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            if m[i, j] > 1.0:
                return m[i, j] * m[i].sum()
    return (m * m).sum()


def j_return_nested_loops(m):
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            if m[i, j] > 1.0:
                return m[i, j] * m[i].sum()
    return (m * m).sum()


def f_break_continue_mix(x, w):
    # continue and break in one loop, and a break in an inner loop only
    s = 0.0
    for i in range(len(x)):
        if x[i] < -1.5:
            break
        if x[i] < 0:
            continue
        for j in range(len(w)):
            if w[j] * x[i] > 1.0:
                break
            s = s + w[j] * x[i]
    return s


def j_break_continue_mix(x, w):
    s = 0.0
    for i in range(len(x)):
        if x[i] < -1.5:
            break
        if x[i] < 0:
            continue
        for j in range(len(w)):
            if w[j] * x[i] > 1.0:
                break
            s = s + w[j] * x[i]
    return s


def f_tuple_carry(x):
    # a tuple of carries updated together (a Fibonacci-like recurrence)
    a, b = x[0], x[1]
    for i in range(len(x)):
        a, b = b, a * 0.5 + b * x[i]
    return a + b


def j_tuple_carry(x):
    a, b = x[0], x[1]
    for i in range(len(x)):
        a, b = b, a * 0.5 + b * x[i]
    return a + b


def f_last_after_loop(x):
    # the value a loop left behind, read after the loop
    last = x[0]
    for i in range(len(x)):
        last = x[i] * 2.0 + last * 0.0
    return last * x[0]


def j_last_after_loop(x):
    last = x[0]
    for i in range(len(x)):
        last = x[i] * 2.0 + last * 0.0
    return last * x[0]
