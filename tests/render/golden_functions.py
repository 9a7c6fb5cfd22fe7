"""Five representative functions whose rendered derivatives are golden files."""
import numpy as np


def mlp_loss(w1, w2, x, y):
    h = np.tanh(x @ w1)
    pred = h @ w2
    err = pred - y
    return np.mean(err ** 2)


def logsumexp_loop(x):
    m = x[0]
    for i in range(1, len(x)):
        if x[i] > m:
            m = x[i]
    s = 0.0
    for i in range(len(x)):
        s = s + np.exp(x[i] - m)
    return m + np.log(s)


def newton_sqrt(a):
    x = a
    while np.abs(x * x - a) > 1e-12:
        x = 0.5 * (x + a / x)
    return x


def scale(v, factor):
    return v * factor


def closure_and_call(x, k):
    def poly(t):
        return t * t + k * t
    total = 0.0
    for i in range(3):
        total = total + scale(poly(x), i + 1.0).sum()
    return total


def histogram_update(x, idx):
    acc = np.zeros(4)
    for j in range(len(idx)):
        acc[idx[j]] += x[j] ** 2
    return (acc * np.arange(1.0, 5.0)).sum()
