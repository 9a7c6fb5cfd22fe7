"""Programs in the shape of autograd-era example code, for ``test_autograd_ports.py``.

Plain NumPy; ``twin.autograd_twin`` rebinds ``np`` to ``autograd.numpy`` for the oracle.
"""
import numpy as np


def gru_like_states(W, U, xs):
    """xs: (time, batch, features). Iterates over the rows of an argument and keeps a list."""
    h = np.zeros((xs.shape[1], U.shape[0]))
    states = [h]
    for x in xs:
        z = 1.0 / (1.0 + np.exp(-(np.dot(x, W) + np.dot(h, U))))
        h = z * h + (1.0 - z) * np.tanh(np.dot(x, W))
        states.append(h)
    return states


def sequence_loss(W, U, xs):
    states = gru_like_states(W, U, xs)
    total = 0.0
    for t in range(1, len(states)):
        total = total + np.sum(states[t] * states[t - 1])
    return total / len(states)


def pair_loss(alpha, beta, counts):
    return np.sum(counts * np.log(alpha) - alpha * beta + np.sin(alpha * beta))


def softplus_sq(x):
    return np.log1p(np.exp(x)) ** 2


def smoothed_cumsum(x):
    return np.cumsum(np.tanh(x))


def quartic_energy(x, A):
    y = np.dot(A, x)
    return np.sum(y ** 4) / 4.0 + np.sum(np.cos(x))
