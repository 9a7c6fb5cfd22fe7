"""Small programs for the IREE tests (tlaloc reads their source)."""
import numpy as np


def poly(x, w):
    h = x @ w + 1.0                       # (n, m)
    return (h * h - 0.5 * h).mean(axis=0)


def uses_tanh(x):
    return np.tanh(x).sum()


def uses_sin(x):
    y = x * 2.0
    return np.sin(y) + y


def ints_and_bools(x):
    return x.argmax(), (x > 0).any(), x.astype(np.int32) * 2


def loop_sum(x):
    acc = x * 0.0
    for i in range(4):
        acc = acc + x * i
    return acc.sum()


def step(w, g):
    return w - 0.1 * g
