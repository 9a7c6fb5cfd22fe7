"""Subscript programs for test_indexing (tlaloc reads their source)."""
import numpy as np


def basic_slices(x):
    return x[1:, ::2]


def negative_step(x):
    return x[::-1, 1]


def newaxis_and_reverse(x):
    return x[-1, None, 3:0:-2]


def dynamic_row(x, i):
    return x[i]


def dynamic_column(x, i):
    return x[:, i]


def int_array(x, idx):
    return x[idx]


def int_array_then_slice(x, idx):
    return x[idx, 1:]


def non_adjacent(x, a, b):
    return x[a, :, b]


def adjacent(x, a, b):
    return x[:, a, b]


def ellipsis_last(x):
    return x[..., 0]


def set_slice(x, v):
    y = x * 1.0
    y[1:3] = v
    return y


def add_fancy(x, idx, v):
    y = x * 1.0
    y[idx] += v
    return y


def set_dynamic_strided(x, i, v):
    y = x * 1.0
    y[i, ::2] = v
    return y


def take_and_diag(x, idx):
    return np.take(x, idx, axis=1).sum() + np.diagonal(x).sum() + np.trace(x, 1)
