"""Forward programs and their gradients through tl.jit (StableHLO → XLA) against
the interpreter on the same DXIR (rtol 1e-12 in float64, 1e-5 in float32) and
against JAX float64 on the same source over ``jax.numpy`` (``jax_twin.py``):
rtol 1e-10 for float64 results, 1e-4 for float32 ones (float32 rounding of a
float64 oracle; a flipped sign or a dropped term is off by O(1)). The interpreter
alone cannot be the oracle: it runs the same derivative rules as compiled code."""
import numpy as np
import pytest

import tlaloc as tl

from . import programs as P
from .jax_twin import as_jax, call, jax, to_numpy, twin

JAX_RTOL = {np.dtype(np.float64): 1e-10, np.dtype(np.float32): 1e-4}


def _rng(seed=0):
    return np.random.default_rng(seed)


def _onehot(r, n, c):
    return np.eye(c)[r.integers(0, c, n)]


# (name, fn, args(rng), argnums for grad, or None: forward only)
TABLE = [
    ("mlp", P.mlp, lambda r: (r.normal(size=(5, 3)), r.normal(size=(3, 4)), r.normal(size=4), r.normal(size=4)),
     (0, 1, 2, 3)),
    ("softmax_xent", P.softmax_xent, lambda r: (r.normal(size=(5, 4)), _onehot(r, 5, 4)), 0),
    ("unary_mix", P.unary_mix, lambda r: (r.normal(size=7),), 0),
    ("if_else+", P.if_else, lambda r: (np.abs(r.normal(size=5)) + 0.1,), 0),
    ("if_else-", P.if_else, lambda r: (-np.abs(r.normal(size=5)) - 0.1,), 0),
    ("if_elif", P.if_elif, lambda r: (np.array([0.3, -0.2, 0.5]), np.array([0.1, 0.4, -0.3])), (0, 1)),
    ("for_branch", P.for_branch, lambda r: (r.normal(size=(6, 3)), r.normal(size=3)), (0, 1)),
    ("for_rows", P.for_rows, lambda r: (r.normal(size=(4, 3)), r.normal(size=3)), (0, 1)),
    ("for_range_forms", P.for_range_forms, lambda r: (r.normal(size=7),), 0),
    ("nested_loops", P.nested_loops, lambda r: (r.normal(size=(3, 4)), r.normal(size=4)), (0, 1)),
    ("for_break", P.for_break, lambda r: (np.array([0.5, 0.2, 1.5, 0.3]),), 0),
    ("setitem_loop", P.setitem_loop, lambda r: (r.normal(size=5), r.normal(size=5)), (0, 1)),
    ("indexing", P.indexing, lambda r: (r.normal(size=(4, 5)),), 0),
    ("while_forward", P.while_forward, lambda r: (np.abs(r.normal(size=3)) + 1.0,), None),
    ("while_bounded", P.while_bounded, lambda r: (np.array([0.3, -0.2, 0.5]),), 0),
]


def _leaves(x):
    return tl._pytree.flatten(x)[0]


def _close(got, want, rtol):
    g, w = _leaves(got), _leaves(want)
    assert len(g) == len(w)
    for a, b in zip(g, w):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)


def _close_to_jax(got, want, dtype):
    g, w = _leaves(got), _leaves(to_numpy(want))
    assert len(g) == len(w)
    rtol = JAX_RTOL[np.dtype(dtype)]
    for a, b in zip(g, w):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape
        if a.dtype.kind == "f":
            scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
            np.testing.assert_allclose(a.astype(np.float64), b, rtol=rtol, atol=rtol * scale)
        else:
            np.testing.assert_array_equal(a, b)


def _cast(args, dtype):
    return tuple(a.astype(dtype) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args)


@pytest.mark.parametrize("name,fn,make,argnums", TABLE, ids=[t[0] for t in TABLE])
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-12), (np.float32, 1e-5)], ids=["f64", "f32"])
def test_forward(name, fn, make, argnums, dtype, rtol):
    args = _cast(make(_rng()), dtype)
    want = tl.jit(fn, backend="interpreter")(*args)
    got = tl.jit(fn)(*args)
    _close(got, want, rtol)
    for g, w in zip(_leaves(got), _leaves(want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype
    _close_to_jax(got, call((name, None), lambda: twin(fn), *as_jax(args)), dtype)


@pytest.mark.parametrize("name,fn,make,argnums", [t for t in TABLE if t[3] is not None],
                         ids=[t[0] for t in TABLE if t[3] is not None])
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-12), (np.float32, 1e-5)], ids=["f64", "f32"])
def test_grad(name, fn, make, argnums, dtype, rtol):
    args = _cast(make(_rng(1)), dtype)
    df = tl.grad(fn, argnums=argnums)
    try:
        want = df(*args)
    except tl.TlalocError as e:          # the reference refuses (e.g. a float32/float64 mix): so must jit
        with pytest.raises(type(e)):
            tl.jit(df)(*args)
        return
    got = tl.jit(df)(*args)
    _close(got, want, rtol)
    _close_to_jax(got, call((name, argnums), lambda: jax.grad(twin(fn), argnums=argnums), *as_jax(args)), dtype)


def test_value_and_grad_structure():
    r = _rng(2)
    args = (r.normal(size=(5, 3)), r.normal(size=(3, 4)), r.normal(size=4), r.normal(size=4))
    vg = tl.value_and_grad(P.mlp, argnums=(1, 3))
    (v, (g1, g3)), (v2, (h1, h3)) = vg(*args), tl.jit(vg)(*args)
    _close((v2, h1, h3), (v, g1, g3), 1e-12)


def test_pytree_arguments_and_outputs():
    def f(params, x):
        h = np.tanh(x @ params["w"] + params["b"])
        return {"out": h.sum(), "h": h}

    r = _rng(3)
    params = {"w": r.normal(size=(3, 2)), "b": r.normal(size=2)}
    x = r.normal(size=(4, 3))
    got = tl.jit(f)(params, x)
    want = tl.jit(f, backend="interpreter")(params, x)
    assert set(got) == {"out", "h"}
    _close(got, want, 1e-12)


def test_closure_array_is_read_at_call_time():
    w = np.array([1.0, 2.0, 3.0])

    def f(x):
        return (x * w).sum()

    jf = tl.jit(f)
    x = np.ones(3)
    assert float(jf(x)) == 6.0
    w[:] = [0.0, 0.0, 1.0]
    assert float(jf(x)) == 1.0


def test_int_and_bool_outputs():
    def f(x):
        return x.argmax(), (x > 0).any(), x.astype(np.int32) * 2

    x = np.array([0.5, 3.2, -1.0])
    got = tl.jit(f)(x)
    want = tl.jit(f, backend="interpreter")(x)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
