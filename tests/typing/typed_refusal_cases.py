"""Typed-tensor programs that must be refused at definition time.

Each refused line ends with ``# REFUSE: <marker>``; the test reads the line and
the expression's column from this file.
"""
import numpy as np

import tlaloc as tl
from tlaloc.typing import F32, F64


def broadcast_mismatch(x: F32["batch", "hidden"], y: F32["batch"]):
    return (x + y).sum()                                    # REFUSE: broadcast


def contract_no_shared_name(x: F32["batch", "hidden"], w: F32["seq", "out"]):
    return tl.contract(x, w).sum()                          # REFUSE: contract


def dtype_mix(x: F32["n"], y: F64["n"]):
    return (x * y).sum()                                    # REFUSE: dtype


def matmul_mismatch(x: F32["batch", "hidden"], w: F32["seq", "out"]):
    return (x @ w).sum()                                    # REFUSE: matmul


def einsum_mismatch(x: F32["batch", "hidden"], w: F32["seq", "out"]):
    return np.einsum("ij,jk->ik", x, w).sum()               # REFUSE: einsum


def tensordot_mismatch(x: F32["batch", "hidden"], w: F32["seq", "out"]):
    return np.tensordot(x, w, axes=1).sum()                 # REFUSE: tensordot


def transpose_then_add(x: F32["rows", "cols"]):
    return (x.T + x).sum()                                  # REFUSE: transpose


def reduce_then_broadcast(x: F32["batch", "hidden"], b: F32["hidden"]):
    m = x.sum(axis=1)
    return (m * b).sum()                                    # REFUSE: reduction


def mismatch_in_loop(x: F32["batch", "hidden"], b: F32["batch"]):
    for i in range(3):
        x = x * b                                           # REFUSE: loop
    return x.sum()


def mismatch_in_branch(x: F32["batch", "hidden"], b: F32["batch"]):
    if x.sum() > 0:
        y = x - b                                           # REFUSE: branch
    else:
        y = x
    return y.sum()


def batch_axes_mismatch(x: F32["b", "m", "k"], w: F32["c", "k", "n"]):
    return (x @ w).sum()                                    # REFUSE: batch axes


def contract_without_names(x: F32["batch", "hidden"], w):
    return tl.contract(x, w).sum()                          # REFUSE: unnamed


def named_rank_mismatch(x: F32["batch", "hidden"]):
    y = tl.named(x, "a b c")                                # REFUSE: named rank
    return y.sum()


def mismatch_in_helper(x: F32["batch", "hidden"], b: F32["batch"]):
    return _helper(x, b).sum()


def _helper(u, v):
    return u * v                                            # REFUSE: helper
