"""The ``erf`` primitive: values against scipy, derivatives against JAX float64, every back end."""
import numpy as np
import pytest
import scipy.special

import tlaloc as tl
import tlaloc.numpy as tnp
from tlaloc.errors import NoRuleError

jax = pytest.importorskip("jax")
ml_dtypes = pytest.importorskip("ml_dtypes")

X = np.concatenate([np.linspace(-6.0, 6.0, 1201), [0.0, -0.0, 1e-8, -1e-300, 30.0, -30.0]])


def erf_sum(x):
    return (scipy.special.erf(x * 1.5) * x).sum()          # the user's own spelling: scipy.special.erf


def erf_sum_tnp(x):
    return (tnp.erf(x * 1.5) * x).sum()


def erf_sum_jax(x):
    return (jax.scipy.special.erf(x * 1.5) * x).sum()


@pytest.mark.parametrize("dtype,tol", [(np.float64, 0.0), (np.float32, 0.0), (np.float16, 1e-3),
                                       (ml_dtypes.bfloat16, 8e-3)], ids=["f64", "f32", "f16", "bf16"])
def test_eager_values_keep_the_dtype_and_match_scipy(dtype, tol):
    x = X.astype(dtype)
    got = tnp.erf(x)
    assert got.dtype == np.dtype(dtype)
    want = scipy.special.erf(x.astype(np.float64 if dtype == np.float64 else np.float32))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=tol)
    assert tnp.erf(np.arange(3)).dtype == np.float64


@pytest.mark.parametrize("f", [erf_sum, erf_sum_tnp], ids=["scipy", "tnp"])
def test_grad_matches_jax_float64(f):
    with jax.enable_x64(True):
        want = np.asarray(jax.grad(erf_sum_jax)(X))
        t_want = float(jax.jvp(erf_sum_jax, (X,), (np.ones_like(X),))[1])
    np.testing.assert_allclose(tl.grad(f)(X), want, rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(tl.jit(tl.grad(f))(X), want, rtol=1e-13, atol=1e-300)
    _, t = tl.jvp(f, (X,), (np.ones_like(X),))
    assert float(t) == pytest.approx(t_want, rel=1e-13)


def test_second_derivative_matches_jax():
    with jax.enable_x64(True):
        want = np.asarray(jax.vmap(jax.grad(jax.grad(lambda x: jax.scipy.special.erf(x))))(X[:50]))
    np.testing.assert_allclose(tl.vmap(tl.grad(tl.grad(tnp.erf)))(X[:50]), want, rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 4e-16), (np.float32, 3e-7), (np.float16, 1e-3),
                                       (ml_dtypes.bfloat16, 8e-3)], ids=["f64", "f32", "f16", "bf16"])
def test_compiled_values_match_scipy(dtype, tol):
    x = X.astype(dtype)
    got = np.asarray(tl.jit(tnp.erf)(x))
    assert got.dtype == np.dtype(dtype)
    want = scipy.special.erf(x.astype(np.float64))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=tol)


def test_control_the_f32_tolerance_catches_a_cruder_erf():
    """Negative control: the compiled-f32 tolerance (3e-7) rejects a cheap erf stand-in (tanh(1.2025 x))."""
    x = X.astype(np.float32)
    crude = np.tanh(1.2025 * x.astype(np.float64))            # a common cheap erf stand-in
    assert np.abs(crude - scipy.special.erf(x.astype(np.float64))).max() > 3e-7


def test_vmap_and_rendered_source():
    np.testing.assert_array_equal(tl.vmap(tnp.erf)(X.reshape(-1, 1)), scipy.special.erf(X.reshape(-1, 1)))
    assert "lax.erf(" in tl.source(tl.grad(erf_sum_tnp))


def test_portable_artifact_float32_and_float64_refusal():
    assert len(tl.jit(tnp.erf).lower(X.astype(np.float32)).serialize()) > 0
    with pytest.raises(NoRuleError, match="chlo.*float64 `erf`"):
        tl.jit(tnp.erf).lower(X).serialize()


def test_complex_input_is_refused():
    """Regression: erf(1+1j) silently returned erf(1) (the imaginary part dropped)."""
    from tlaloc.errors import DTypeError
    with pytest.raises(DTypeError, match="erf: x must be real"):
        tnp.erf(np.array([1 + 1j]))
    with pytest.raises(DTypeError, match="erf: x must be real"):
        tnp.erf(1j)
