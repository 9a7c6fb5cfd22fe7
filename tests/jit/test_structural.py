"""Reductions, scans, shapes, contractions, linear algebra and elementwise corners
through tl.jit against the interpreter (forward and, where defined, gradients)."""
import numpy as np
import pytest

import tlaloc as tl

from . import structural_programs as S

R = np.random.default_rng(0)

TABLE = [
    ("scans", S.scans, (R.normal(size=(3, 4)),), 0),
    ("reductions", S.reductions, (R.normal(size=(3, 4)),), 0),
    ("shapes", S.shapes, (R.normal(size=(3, 4)),), 0),
    ("contractions", S.contractions, (R.normal(size=(3, 4)), R.normal(size=(4, 5))), (0, 1)),
    ("linalg", S.linalg, (R.normal(size=(3, 3)), R.normal(size=3)), 0),
    ("lu_family", S.lu_family, (R.normal(size=(3, 3)), R.normal(size=(3, 2))), (0, 1)),
    ("elementwise_misc", S.elementwise_misc, (R.normal(size=7), R.normal(size=7)), None),
    ("int_math", S.int_math, (np.arange(-5, 6), np.arange(11) - 3), None),
    ("arg_reductions", S.arg_reductions, (R.normal(size=(3, 4)),), None),
]


@pytest.mark.parametrize("name,fn,args,argnums", TABLE, ids=[t[0] for t in TABLE])
def test_forward_and_grad(name, fn, args, argnums):
    want = tl.jit(fn, backend="interpreter")(*args)
    got = tl.jit(fn)(*args)
    for g, w in zip(tl._pytree.flatten(got)[0], tl._pytree.flatten(want)[0]):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    if argnums is None:
        return
    df = tl.grad(fn, argnums=argnums)
    for g, w in zip(tl._pytree.flatten(tl.jit(df)(*args))[0], tl._pytree.flatten(df(*args))[0]):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-11, atol=1e-12)


def test_scans_and_prod_over_an_empty_axis_compile():
    # was: GraphError "expects window to have positive value for 0-th window dimension, but got 0"
    # (prod's derivative and cumsum/cumprod are reduce_window scans with a window as long as the axis)
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    x = np.arange(1.0, 7.0)
    twin = lambda x: (jnp.sum(x ** 2) + jnp.prod(x[3:3]) + jnp.sum(jnp.cumsum(x[2:2]))
                      + jnp.sum(jnp.cumprod(x[:0])))
    want = jax.grad(twin)(x)
    assert not np.allclose(want, np.ones(6))                 # negative control
    np.testing.assert_array_equal(tl.jit(tl.grad(S.empty_scans))(x), want)
    assert tl.jit(S.empty_scans)(x) == twin(x) == 92.0
