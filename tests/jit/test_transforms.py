"""tl.jit of forward mode, batching and Jacobians: tl.jvp, tl.vmap, tl.jacfwd,
tl.jacrev and tl.hessian compile to one program each (Jacobians as a vmap over
the basis) and equal their eager results."""
import numpy as np
import pytest

import tlaloc as tl


def f(x, w):
    return np.tanh(x @ w).sum()


def g(x, w):
    return np.sin(x) * w.sum() + x * x                   # R^n -> R^n


def mlp(params, x):
    h = np.tanh(x @ params["w"] + params["b"])
    return {"out": h.sum(), "h": h}


def _r():
    return np.random.default_rng(0)


def _close(got, want, rtol=1e-12):
    ga, wa = tl._pytree.flatten(got)[0], tl._pytree.flatten(want)[0]
    assert len(ga) == len(wa)
    for a, b in zip(ga, wa):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=rtol)


def test_jvp_with_pytrees():
    r = _r()
    params = {"w": r.normal(size=(3, 2)), "b": r.normal(size=2)}
    x = r.normal(size=(4, 3))
    dparams = {"w": r.normal(size=(3, 2)), "b": r.normal(size=2)}
    t = tl.jvp(mlp)
    jt = tl.jit(t)
    got = jt((params, x), (dparams, np.zeros_like(x)))
    want = t((params, x), (dparams, np.zeros_like(x)))
    assert set(got[0]) == {"out", "h"} and set(got[1]) == {"out", "h"}
    _close(got, want)
    with pytest.raises(tl.ArgumentError, match="tuple of primals"):
        jt(params, x)


def test_vmap_axes_and_vmap_of_grad():
    r = _r()
    xs, w = r.normal(size=(4, 3, 5)), r.normal(size=5)
    t = tl.vmap(f, in_axes=(0, None))
    _close(tl.jit(t)(xs, w), t(xs, w))
    per_example = tl.vmap(tl.grad(f, argnums=1), in_axes=(0, None))
    _close(tl.jit(per_example)(xs, w), per_example(xs, w))
    moved = tl.vmap(g, in_axes=(1, None), out_axes=1)
    xt = r.normal(size=(6, 4))
    _close(tl.jit(moved)(xt, w), moved(xt, w))


@pytest.mark.parametrize("make", [tl.jacfwd, tl.jacrev], ids=["jacfwd", "jacrev"])
def test_jacobians_are_one_program(make):
    r = _r()
    x, w = r.normal(size=4), r.normal(size=3)
    for argnums in (0, 1, (0, 1)):
        t = make(g, argnums=argnums)
        jt = tl.jit(t)
        _close(jt(x, w), t(x, w))
        assert jt.cache_size() == 1
    lowered = tl.jit(make(g)).lower(x, w)
    assert "stablehlo.while" not in lowered.as_text()     # no loop over the basis: it is batched


def test_hessian_of_matmul_tanh():
    r = _r()
    x, w = r.normal(size=(5, 3)), r.normal(size=3)
    for argnums in (0, 1):
        t = tl.hessian(f, argnums=argnums)
        got = tl.jit(t)(x, w)
        _close(got, t(x, w))
        n = x.size if argnums == 0 else w.size
        h = np.asarray(got).reshape(n, n)
        np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-12)        # symmetric


def test_jacobians_take_pytree_arguments():
    """Once refused ("array arguments"); now JAX's structure: a dict of Jacobians, one per leaf."""
    r = _r()
    params = {"w": r.normal(size=(3, 2)), "b": r.normal(size=2)}
    x = r.normal(size=(4, 3))
    jac = tl.jit(tl.jacfwd(lambda_free_loss))(params, x)
    eager = tl.jacrev(lambda_free_loss)(params, x)
    assert set(jac) == {"w", "b"}
    out_shape = np.shape(lambda_free_loss(params, x))
    for k in params:
        assert np.shape(jac[k]) == out_shape + params[k].shape
        np.testing.assert_allclose(np.asarray(jac[k]), eager[k], rtol=1e-12, atol=1e-12)


def lambda_free_loss(params, x):
    return mlp(params, x)["out"]


def _dot_of_vectors(v, m):
    return np.dot(v, m @ v)              # np.dot needs its operands' ranks: lowered per signature


def test_jit_of_jvp_lowers_for_the_shapes_when_the_code_needs_them():
    # regression: tl.jit(tl.jvp(f)) ignored the argument shapes, so np.dot (whose meaning depends on
    # the ranks) raised ShapeNeeded although eager tl.jvp and tl.jit(tl.grad) worked
    v, m, tv = np.array([0.5, -1.0, 2.0]), np.arange(9.0).reshape(3, 3) / 10, np.array([1.0, 0.0, -2.0])
    tm = np.ones((3, 3))
    out, tangent = tl.jit(tl.jvp(_dot_of_vectors))((v, m), (tv, tm))
    want_out, want_tangent = tl.jvp(_dot_of_vectors)((v, m), (tv, tm))
    # analytic: d(vᵀMv) = tvᵀ(M + Mᵀ)v + vᵀ tM v
    analytic = tv @ (m + m.T) @ v + v @ tm @ v
    np.testing.assert_allclose(np.asarray(out), v @ m @ v, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(tangent), analytic, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(tangent), want_tangent, rtol=1e-12)
    assert abs(float(tangent) - (analytic + 1e-6)) > 1e-7          # the tolerance sees a 1e-6 error
