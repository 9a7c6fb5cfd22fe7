"""Single primitives, bound directly into a graph, compiled against eval_graph."""
import numpy as np
import pytest

from tlaloc._core.aval import of
from tlaloc._core.builder import Builder
from tlaloc._core.interpreter import eval_graph
from tlaloc._core.rules import ensure_rules
from tlaloc._core.primitive import REGISTRY
from tlaloc._core.specialize import specialize
from tlaloc._render.stablehlo import emit_module
from tlaloc._runtime.pjrt import Executable

R = np.random.default_rng(0)
X = R.normal(size=(3, 4))
Y = R.normal(size=(3, 4))
Z = X.copy()
Z[1, 2] = 0.0

ensure_rules()     # every primitive and rule, whatever this file is run with (it once depended on import order)


def _graph(name, n_args, **params):
    b = Builder(name=name)
    with b.active():
        ins = [b.new_input(hint=f"a{k}") for k in range(n_args)]
        out = REGISTRY[name].bind(*ins, **params)
        outs = list(out) if REGISTRY[name].multiple_results else [out]
        return b.finish(outs)


CASES = [
    ("cumsum", (X,), dict(axis=1, reverse=True)),
    ("cumprod", (X,), dict(axis=0, reverse=False)),
    ("cummax", (X,), dict(axis=1, reverse=True)),
    ("prod_others", (Z,), dict(axes=(1,))),
    ("prod_others", (Z,), dict(axes=None)),
    ("cumprod_grad", (Y, Z), dict(axis=1, reverse=False)),
    ("cumprod_grad", (Y, Z), dict(axis=0, reverse=True)),
    ("cumprod_jvp", (Y, Z), dict(axis=1, reverse=True)),
    ("argmax", (X,), dict(axis=None, keepdims=False)),
    ("argmin", (X,), dict(axis=0, keepdims=True)),
    ("tril_mask", (X,), dict(k=1)),
    ("diag_mask", (X,), {}),
    ("dynamic_slice", (X, np.int64(2), np.int64(-1)), dict(sizes=(2, 2))),
    ("dynamic_update_slice", (X, Y[:2, :2], np.int64(1), np.int64(3)), {}),
    ("gather", (X, np.array([[3, 0], [1, 1]])), dict(axis=1)),
    ("scatter_add", (X, np.array([0, 0, 2]), R.normal(size=(3, 4))), dict(axis=0)),
    ("split_like", (X, Y[:, :1], Y[:, :3]), dict(axis=1)),
    ("iota", (), dict(shape=(2, 3), dtype=np.dtype(np.int32), dimension=1)),
    ("integer_pow", (X,), dict(y=-3)),
    ("reduce_any", (X > 0.5,), dict(axes=(1,), keepdims=True)),
    ("triangular_solve", (np.tril(X[:, :3]) + 3 * np.eye(3), Y), dict(lower=True, transpose_a=True)),
]


@pytest.mark.parametrize("name,args,params", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_primitive(name, args, params):
    g = _graph(name, len(args), **params)
    want = eval_graph(g, *args)
    sg = specialize(g, [of(np.asarray(a)) for a in args])
    got = Executable(emit_module(sg, name=name))(*args)
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
