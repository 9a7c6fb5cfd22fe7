"""Programs for the jit-vs-interpreter table: straight-line code, if/elif/else,
for over range() (static bounds once shapes are known), while, break/continue,
indexing and bounded tl.while_loop.

tlaloc reads their source, so each is a plain module-level function.
"""
import numpy as np

import tlaloc as tl


def mlp(x, w1, b1, w2):
    h = np.tanh(x @ w1 + b1)                  # (n, h)
    out = h @ w2                              # (n,)
    return (out * out).mean() + 0.01 * (w1 * w1).sum()


def softmax_xent(logits, onehot):
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -(onehot * logp).sum(axis=1).mean()


def unary_mix(x):
    a = np.sqrt(np.abs(x) + 1.0) * np.log1p(x * x) + np.expm1(0.1 * x)
    b = np.arctan(x) + np.sinh(0.5 * x) - np.cosh(0.3 * x) + np.arcsinh(x)
    c = np.arcsin(0.5 * np.tanh(x)) + np.arccos(0.4 * np.tanh(x)) + np.arctanh(0.3 * np.tanh(x))
    return (a * b + c + x ** 3 + np.maximum(x, 0.1) * np.minimum(x, -0.2)).sum()


def if_else(x):
    if x.sum() > 0:
        y = x * 2.0 + x ** 2
    else:
        y = -x ** 3
    return (y * x).sum()


def if_elif(x, w):
    t = x @ w
    if t > 1.0:
        r = t * t
    elif t > -1.0:
        r = np.sin(t) * x[0]
    else:
        r = np.exp(t) + w[1]
    return r


def for_branch(x, w):
    y = np.tanh(x @ w)
    s = 0.0
    for i in range(len(y)):
        if y[i] > 0:
            s = s + y[i] ** 2
        else:
            s = s - y[i]
    return s


def for_rows(m, v):
    acc = v * 0.0
    for row in m:
        acc = np.tanh(acc + row * v)
    return acc.sum()


def for_range_forms(x):
    s = 0.0
    for i in range(1, len(x)):
        s = s + x[i] * x[i - 1]
    for i in range(len(x) - 1, -1, -2):
        s = s * 0.5 + x[i]
    for i in range(0, len(x), 3):
        s = s + np.cos(x[i]) * i
    return s


def nested_loops(m, v):
    total = 0.0
    for i in range(m.shape[0]):
        row = 0.0
        for j in range(m.shape[1]):
            row = row + np.sin(m[i, j] * v[j])
        total = total + row * row
    return total


def for_break(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 1.0:
            break
        s = s + x[i] * x[i]
    return s


def setitem_loop(x, w):
    a = np.zeros_like(x)
    for i in range(len(x)):
        a[i] = x[i] * w[i] + a[i - 1] * 0.5
    return (a * a).sum()


def indexing(x):
    a = x[1:, ::2].sum() + x[-1, :].sum() * 2.0
    b = x[:, None, 1] * x[0]
    c = x[np.array([2, 0, 2]), 1:3]
    d = x[::-1, -2]
    return a + b.sum() + (c * c).sum() + (d * d).sum()


def while_forward(x):
    n = 0
    while x.sum() > 0.1:
        x = x * 0.5
        n = n + 1
    return x, n


def while_bounded(x):
    def cond(c):
        return c[1] < 5.0

    def body(c):
        return (c[0] * 1.5 + np.sin(c[0]), c[1] + 1.0)
    y, n = tl.while_loop(cond, body, (x, 0.0), max_trips=8)
    return (y * y).sum()


def while_overflow(x):
    def cond(c):
        return c[1] < 20.0

    def body(c):
        return (c[0] * 0.5, c[1] + 1.0)
    y, n = tl.while_loop(cond, body, (x, 0.0), max_trips=8)
    return (y * y).sum()


def while_unbounded_grad(x):
    while (x * x).sum() > 0.5:
        x = x * 0.7
    return x.sum()
