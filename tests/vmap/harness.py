"""Machinery of the vmap tests: batch one primitive (or a graph) and compare with
a loop over examples.

Kept apart from the test files so the negative controls exercise exactly the
comparison the real tests use.
"""
from __future__ import annotations

import numpy as np

from tlaloc._core import aval as _aval
from tlaloc._core.builder import Builder
from tlaloc._core.interpreter import eval_graph
from tlaloc._core.primitive import REGISTRY
from tlaloc._ad.batching import batch_graph
from tlaloc._ad import vmap as _vmap  # noqa: F401  (registers every batching rule)

RTOL, ATOL = 1e-12, 1e-12


def one_node_graph(name, examples, params):
    """A graph applying primitive ``name`` to inputs typed like ``examples``."""
    prim = REGISTRY[name]
    b = Builder(name=name)
    with b.active():
        ins = [b.new_input(_aval.of(np.asarray(x)), f"x{k}") for k, x in enumerate(examples)]
        out = prim.bind(*ins, **params)
        outs = list(out) if prim.multiple_results else [out]
        return b.finish(outs)


def batch_one(name, operands, params, batched, size, axis=0):
    """Batch primitive ``name`` and compare it with a loop over examples.

    ``operands[k]`` is a list of ``size`` examples when ``batched[k]`` (stacked
    at ``axis``, counted from the end when negative), else one array shared by
    every example. Returns ``(batched outputs moved to axis 0, looped outputs)``.
    """
    prim = REGISTRY[name]
    first = [ops[0] if b else ops for ops, b in zip(operands, batched)]
    graph = one_node_graph(name, first, params)
    arrays, dims, avals = [], [], []
    for ops, b in zip(operands, batched):
        if b:
            d = axis % (np.ndim(ops[0]) + 1)
            arr = np.stack([np.asarray(o) for o in ops], axis=d)
            dims.append(d)
        else:
            arr = np.asarray(ops)
            dims.append(None)
        arrays.append(arr)
        avals.append(_aval.of(arr))
    g, out_dims = batch_graph(graph, dims, avals, size)
    outs = eval_graph(g, *arrays)
    got = [np.moveaxis(np.asarray(o), d, 0) if d is not None else np.broadcast_to(o, (size,) + np.shape(o))
           for o, d in zip(outs, out_dims)]
    want = []
    for i in range(size):
        ex = [ops[i] if b else ops for ops, b in zip(operands, batched)]
        r = prim.impl(*ex, **params)
        want.append(list(r) if prim.multiple_results else [r])
    want = [np.stack([np.asarray(w[k]) for w in want]) for k in range(len(got))]
    return got, want, g


def assert_close(got, want, rtol=RTOL, atol=ATOL):
    for k, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"output {k}: shape {a.shape} != {b.shape}"
        assert a.dtype == b.dtype, f"output {k}: dtype {a.dtype} != {b.dtype}"
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"output {k}")
