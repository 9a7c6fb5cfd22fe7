"""Annotated programs for the call-time and propagation tests."""
import numpy as np

import tlaloc as tl
from tlaloc.typing import F32, F64, I64


def layer(x: F64["batch", "hidden"], w: F64["hidden", "out"], b: F64["out"]):
    h = np.tanh(tl.contract(x, w) + b)
    return (h * h).sum()


def fixed_and_named(x: F64[3, "n"], y: F64["n"]):
    return (x * y).sum()


def leading_dims(x: F64["*batch", "n"], y: F64["*batch", "n"]):
    return (x * y).sum()


def any_leading(x: F64[..., "n"], s: F64[()]):
    return (x * s).sum()


def broadcastable(x: F64["batch", "n"], y: F64["#batch", "n"]):
    return (x * y).sum()


def computed_size(x: F64["n"], y: F64["n+1"]):
    return x.sum() + y.sum()


def anonymous(x: F64["_", "n"], y: F64["_other", "n"]):
    return x.sum() + y.sum()


def with_int(x: F64["n"], k: I64[()]):
    return (x * k).sum()


def string_annotations(x: "F64['batch hidden']", w: "F64['hidden out']"):
    return tl.contract(x, w).sum()


def propagates(x: F32["batch", "hidden"], w: F32["hidden", "out"], b: F32["out"]):
    h = tl.contract(x, w)                 # batch, out
    h = h + b                             # batch, out
    t = h.T                               # out, batch
    s = t.sum(axis=1)                     # out
    r = h[0]                              # out
    e = h[:, None, :]                     # batch, _, out
    m = x.mean(axis=0, keepdims=True)     # _, hidden
    return h, t, s, r, e, m


def loop_keeps_names(x: F32["batch", "hidden"], b: F32["hidden"]):
    for i in range(3):
        x = np.tanh(x * b)
    return x


def renamed(x: F32["batch", "hidden"]):
    y = tl.named(x, "rows cols")
    return y + y


def reshape_names(x: F32[2, 3]):
    y = tl.named(x, "a b")
    return y.reshape(2, 1, 3), y.reshape(3, 2)
