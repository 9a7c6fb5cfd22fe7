"""tlaloc.scipy.special and .stats through the user's own SciPy spelling: values against SciPy
(1e-12 in float64), derivatives against JAX float64 under grad, jvp, vmap and jit, swept across
special points; conventions at the special points against analytic values."""
import numpy as np
import pytest
import scipy.integrate
import scipy.special as ss
import scipy.stats as st

import tlaloc as tl
from tlaloc.errors import NoRuleError

from . import programs as P

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import jax.scipy.special as js  # noqa: E402
import jax.scipy.stats as jst  # noqa: E402

SWEEP = np.array([-30.5, -7.3, -2.5, -1.0, -0.5, -1e-300, 0.0, 1e-8, 0.25, 0.5, 1.0, 2.0, 6.5, 40.0])
POS = np.array([1e-8, 0.05, 0.5, 1.0, 1.5, 2.0, 3.7, 10.0, 50.0, 170.0])
NEG = np.array([-3.7, -2.25, -0.5, -0.1])          # off the poles (and a + 2.5 off them too)
UNIT = np.array([1e-12, 0.01, 0.25, 0.3, 0.5, 0.5 + 1e-9, 0.7, 0.75, 0.99, 1.0 - 1e-12])
TAILS = np.array([-60.0, -38.0, -30.0, -29.9, -20.0, -5.0, 0.0, 5.0, 6.0, 6.1, 8.0, 12.0])

# name: (program, scipy reference, jax reference, points)
TABLE = {
    "expit": (P.expit, ss.expit, js.expit, SWEEP),
    "logit": (P.logit, ss.logit, js.logit, UNIT),
    "gammaln": (P.gammaln, ss.gammaln, js.gammaln, np.concatenate([POS, NEG])),
    "digamma": (P.digamma, ss.digamma, js.digamma, np.concatenate([POS[:-1], NEG])),
    "polygamma1": (P.polygamma1, lambda x: ss.polygamma(1, x), lambda x: js.polygamma(1, x), POS[1:-1]),
    "polygamma3": (P.polygamma3, lambda x: ss.polygamma(3, x), lambda x: js.polygamma(3, x), POS[1:-1]),
    "erf": (P.erf, ss.erf, js.erf, SWEEP),
    "erfc": (P.erfc, ss.erfc, js.erfc, SWEEP[1:]),
    "ndtr": (P.ndtr, ss.ndtr, js.ndtr, SWEEP),
    "log_ndtr": (P.log_ndtr, ss.log_ndtr, js.log_ndtr, TAILS),
    "xlogy_x": (P.xlogy_x, lambda x: ss.xlogy(x, 2.5), lambda x: js.xlogy(x, 2.5), SWEEP),
    "xlogy_y": (P.xlogy_y, lambda x: ss.xlogy(1.5, x), lambda x: js.xlogy(1.5, x), POS),
    "xlog1py_x": (P.xlog1py_x, lambda x: ss.xlog1py(x, 0.5), lambda x: js.xlog1py(x, 0.5), SWEEP),
    "xlog1py_y": (P.xlog1py_y, lambda x: ss.xlog1py(-2.0, x), lambda x: js.xlog1py(-2.0, x), UNIT - 0.5),
    "gamma": (P.gamma_fn, ss.gamma, js.gamma, np.concatenate([POS[:-1], NEG])),
    "beta": (P.beta_a, lambda x: ss.beta(x, 2.5), lambda x: js.beta(x, 2.5), np.concatenate([POS[:-2], NEG])),
    "betaln": (P.betaln_b, lambda x: ss.betaln(0.7, x), lambda x: js.betaln(0.7, x), POS[:-1]),
    "norm.logpdf": (P.norm_logpdf, lambda x: st.norm.logpdf(x, 0.3, 1.7), lambda x: jst.norm.logpdf(x, 0.3, 1.7),
                    SWEEP),
    "norm.pdf": (P.norm_pdf, lambda x: st.norm.pdf(x, 0.3, 1.7), lambda x: jst.norm.pdf(x, 0.3, 1.7), SWEEP),
    "norm.cdf": (P.norm_cdf, lambda x: st.norm.cdf(x, -0.2, 0.8), lambda x: jst.norm.cdf(x, -0.2, 0.8), SWEEP),
    "norm.logcdf": (P.norm_logcdf, lambda x: st.norm.logcdf(x, 0.1, 1.3), lambda x: jst.norm.logcdf(x, 0.1, 1.3),
                    TAILS),
    "norm.scale": (P.norm_scale, lambda x: st.norm.logpdf(0.4, 0.1, x), lambda x: jst.norm.logpdf(0.4, 0.1, x),
                   POS),
    "norm(frozen)": (P.frozen_norm, lambda x: st.norm(0.5, 2.0).logpdf(x), lambda x: jst.norm.logpdf(x, 0.5, 2.0),
                     SWEEP),
    "t.logpdf": (P.t_logpdf, lambda x: st.t.logpdf(x, 3.5, 0.2, 1.4), lambda x: jst.t.logpdf(x, 3.5, 0.2, 1.4),
                 SWEEP),
    "t.df": (P.t_df, lambda x: st.t.logpdf(0.7, x), lambda x: jst.t.logpdf(0.7, x), POS[1:]),
    "gamma.logpdf": (P.gamma_logpdf, lambda x: st.gamma.logpdf(x, 2.5, scale=1.5),
                     lambda x: jst.gamma.logpdf(x, 2.5, scale=1.5), POS),
    "gamma.a": (P.gamma_a, lambda x: st.gamma.logpdf(1.3, x), lambda x: jst.gamma.logpdf(1.3, x), POS[1:-1]),
    "beta.logpdf": (P.beta_logpdf, lambda x: st.beta.logpdf(x, 2.5, 1.5), lambda x: jst.beta.logpdf(x, 2.5, 1.5),
                    UNIT[1:-1]),
    "beta.ab": (P.beta_ab, lambda x: st.beta.logpdf(0.3, x, 2.0 * x), lambda x: jst.beta.logpdf(0.3, x, 2.0 * x),
                POS[1:-2]),
    "poisson.logpmf": (P.poisson_logpmf, lambda x: st.poisson.logpmf(3, x), lambda x: jst.poisson.logpmf(3, x),
                       POS[1:]),
    "poisson.pmf": (P.poisson_pmf, lambda x: st.poisson.pmf(4.0, x), lambda x: jst.poisson.pmf(4.0, x), POS[1:-1]),
}
VECTOR = {   # functions of the whole vector
    "softmax": (P.softmax, ss.softmax, js.softmax),
    "log_softmax": (P.log_softmax, ss.log_softmax, js.log_softmax),
    "logsumexp": (P.logsumexp_all, lambda x: ss.logsumexp(x) * np.ones(1), lambda x: js.logsumexp(x) * jnp.ones(1)),
    "logsumexp(b=)": (P.logsumexp_b, lambda x: ss.logsumexp(x, b=P.B5) * np.ones(1),
                      lambda x: js.logsumexp(x, b=jnp.asarray(P.B5)) * jnp.ones(1)),
}


# Where JAX's own derivative is measurably wrong, an analytic oracle replaces it (checked against
# mpmath): JAX's log_ndtr uses a 3-term asymptotic series below x = -20 (derivative off by 4e-9 at
# x = -20, 1.6e-10 at -29.9), and its betaln's derivative is off by 1.7e-6 at b = 10.
def _dlog_ndtr(x):
    return np.exp(-0.5 * x * x - 0.5 * np.log(2 * np.pi) - ss.log_ndtr(x))


ORACLE = {
    "log_ndtr": _dlog_ndtr,
    "norm.logcdf": lambda x: _dlog_ndtr((x - 0.1) / 1.3) / 1.3,
    "betaln": lambda x: ss.digamma(x) - ss.digamma(0.7 + x),
    "beta": lambda x: ss.beta(x, 2.5) * (ss.digamma(x) - ss.digamma(x + 2.5)),
    "beta.ab": lambda x: (np.log(0.3) + 2 * np.log(0.7)
                          - (ss.digamma(x) + 2 * ss.digamma(2 * x) - 3 * ss.digamma(3 * x))),
}


def test_oracles_agree_with_mpmath():
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    for x in (-38.0, -29.9, -20.0, 3.0):
        want = float(mp.diff(lambda s: mp.log(mp.ncdf(s)), x))
        assert _dlog_ndtr(np.array([x]))[0] == pytest.approx(want, rel=1e-12)
    want = float(mp.diff(lambda b: mp.log(mp.beta(0.7, b)), 10))
    assert ORACLE["betaln"](np.array([10.0]))[0] == pytest.approx(want, rel=1e-13)


def _jax_elementwise_grad(fn, x):
    with jax.enable_x64(True):
        return np.asarray(jax.vmap(jax.grad(lambda v: fn(v)))(jnp.asarray(x)))


@pytest.mark.parametrize("name", sorted(TABLE))
def test_value_equals_scipy(name):
    prog, ref, _, x = TABLE[name]
    want = ref(x)
    np.testing.assert_allclose(prog(x), want, rtol=1e-12, atol=0)                  # eager
    np.testing.assert_allclose(tl.jit(prog)(x), want, rtol=1e-12, atol=1e-300)     # compiled (XLA)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_grad_jvp_vmap_jit_equal_jax(name):
    prog, _, jref, x = TABLE[name]
    want = ORACLE[name](x) if name in ORACLE else _jax_elementwise_grad(jref, x)
    total = P.sum_of(prog)
    np.testing.assert_allclose(tl.grad(total)(x), want, rtol=RTOL, atol=1e-300)
    np.testing.assert_allclose(tl.jit(tl.grad(total))(x), want, rtol=RTOL, atol=1e-300)
    np.testing.assert_allclose(tl.vmap(tl.grad(prog))(x), want, rtol=RTOL, atol=1e-300)
    _, tangent = tl.jvp(prog, (x,), (np.ones_like(x),))
    np.testing.assert_allclose(tangent, want, rtol=RTOL, atol=1e-300)


RTOL = 5e-11


@pytest.mark.parametrize("name", sorted(VECTOR))
def test_vector_functions(name):
    prog, ref, jref = VECTOR[name]
    x = np.array([-3.0, 0.5, 0.5, 2.0, 10.0])                                       # a tie included
    np.testing.assert_allclose(prog(x), ref(x), rtol=1e-12, atol=0)
    np.testing.assert_allclose(tl.jit(prog)(x), ref(x), rtol=1e-12, atol=0)
    with jax.enable_x64(True):
        J = np.asarray(jax.jacrev(jref)(jnp.asarray(x)))
    np.testing.assert_allclose(tl.jacrev(prog)(x), J, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(tl.jacfwd(prog)(x), J, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(tl.vmap(prog)(np.stack([x, x[::-1]])), np.stack([ref(x), ref(x[::-1])]),
                               rtol=1e-12)


def test_control_the_gradient_tolerance_catches_a_wrong_rule():
    """Negative control: digamma's derivative taken as the finite difference with h=1e-4, or JAX's
    log_ndtr derivative at -20, is off by more than the tolerance used above."""
    x = POS[1:-1]
    fd = (ss.digamma(x + 1e-4) - ss.digamma(x - 1e-4)) / 2e-4
    assert np.max(np.abs(fd - ss.polygamma(1, x)) / np.abs(ss.polygamma(1, x))) > RTOL
    jax_d = _jax_elementwise_grad(js.log_ndtr, np.array([-20.0]))[0]
    assert abs(jax_d / _dlog_ndtr(np.array([-20.0]))[0] - 1) > RTOL


# -- conventions at special points, against analytic values ------------------------------------------

def xlogy_sum(x, y):
    return xlogy(x, y).sum()


xlogy = ss.xlogy


def test_xlogy_at_zero():
    x, y = np.array([0.0, 0.0, 2.0]), np.array([0.0, 3.0, 0.0])
    assert list(P.xlogy_x(np.zeros(1))) == [0.0]
    gx, gy = tl.grad(xlogy_sum, argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, [-np.inf, np.log(3.0), -np.inf])   # d/dx = log y (JAX too)
    np.testing.assert_array_equal(gy[:2], [0.0, 0.0])                    # d/dy = x/y, 0/0 = 0 (JAX: NaN)
    assert gy[2] == np.inf
    assert np.isnan(ss.xlogy(0.0, np.nan)) and np.isnan(P.xlogy_y(np.array([np.nan]))[0])


def lse(x):
    return ss.logsumexp(x)


def test_logsumexp_of_all_minus_inf():
    x = np.full(3, -np.inf)
    assert lse(x) == -np.inf and tl.grad(lse)(x).tolist() == [0.0, 0.0, 0.0]
    assert tl.grad(lse)(np.array([np.inf, 0.0]))[1] == 0.0
    np.testing.assert_allclose(tl.grad(lse)(np.array([0.0, np.log(3.0)])), [0.25, 0.75], rtol=1e-15)


def lse_sign(x):
    out, sign = ss.logsumexp(x, b=np.array([1.0, -2.0]), return_sign=True)
    return out * sign


def test_logsumexp_return_sign_and_keepdims():
    x = np.array([0.3, 0.1])
    want, sgn = ss.logsumexp(x, b=np.array([1.0, -2.0]), return_sign=True)
    assert lse_sign(x) == pytest.approx(want * sgn, rel=1e-14)
    from tlaloc.scipy import special as S
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(S.logsumexp(m, axis=1, keepdims=True), ss.logsumexp(m, axis=1, keepdims=True),
                               rtol=1e-14)
    np.testing.assert_allclose(S.logsumexp(m, axis=0), ss.logsumexp(m, axis=0), rtol=1e-14)


def test_log_ndtr_far_tails():
    """log Φ(x) = -x²/2 - log(-x) - ½log 2π + log(1 - 1/x² + 3/x⁴ - ...) for x → -∞ (A&S 26.2.12),
    derivative -x - 1/x + O(1/x³); log Φ(40) rounds to -0 with a finite derivative."""
    x = np.array([-1e3, -1e5])
    want = -x * x / 2 - np.log(-x) - 0.5 * np.log(2 * np.pi) + np.log1p(-1 / x**2 + 3 / x**4)
    np.testing.assert_allclose(P.log_ndtr(x), want, rtol=1e-14)
    np.testing.assert_allclose(tl.grad(P.sum_of(P.log_ndtr))(x), -x - 1 / x, rtol=1e-9)
    assert P.log_ndtr(np.array([40.0]))[0] == 0.0 and np.isfinite(tl.grad(P.sum_of(P.log_ndtr))(np.array([40.0])))


def test_gamma_at_the_poles():
    np.testing.assert_array_equal(P.gamma_fn(np.array([0.0, -0.0, 172.0])), [np.inf, -np.inf, np.inf])
    assert np.isnan(P.gamma_fn(np.array([-1.0, -2.0]))).all()
    np.testing.assert_array_equal(tl.jit(P.gamma_fn)(np.array([0.0, -0.0, 172.0])), [np.inf, -np.inf, np.inf])
    assert np.isnan(tl.jit(P.gamma_fn)(np.array([-1.0, -2.0]))).all()


def test_gamma_values_are_scipys_bit_for_bit():
    """Regression: gamma was ``sign · exp(gammaln)`` eagerly too, 4 ulp off at Γ(5) = 24 (24.000000000000004)
    and up to ~3e-13 relative on (-20, 100): now scipy's own values; compiled, JAX's formula."""
    x = np.concatenate([np.arange(1.0, 24.0), np.random.default_rng(0).uniform(-20.0, 100.0, 400),
                        [0.5, -1.5, 171.5, 171.7]])
    got = P.gamma_fn(x)
    np.testing.assert_array_equal(got, ss.gamma(x))
    assert got[4] == 24.0 and not np.array_equal(np.sign(ss.gammaln(x)), got)     # control: a different array differs
    value, g = tl.value_and_grad(lambda v: np.sum(ss.gamma(v)))(x[:30])
    assert value == np.sum(ss.gamma(x[:30]))
    np.testing.assert_allclose(g, _jax_elementwise_grad(js.gamma, x[:30]), rtol=RTOL)
    with jax.enable_x64(True):
        np.testing.assert_allclose(tl.jit(P.gamma_fn)(x), np.asarray(js.gamma(jnp.asarray(x))), rtol=1e-14)


# -- refusals ---------------------------------------------------------------------------------------

def uses_t_cdf(x):
    return st.t.cdf(x, 3.0).sum()


def uses_odeint(x):
    return scipy.integrate.odeint(lambda y, s: -y, x, np.linspace(0.0, 1.0, 3)).sum()


def uses_gammainc(x):
    return ss.gammainc(2.0, x).sum()


@pytest.mark.parametrize("fn,what", [(uses_t_cdf, "scipy.stats.t.cdf"), (uses_odeint, "odeint's `func` must be a function defined with `def`"),
                                     (uses_gammainc, "gammainc")])
def test_refused_by_name_at_the_users_line(fn, what):
    with pytest.raises(NoRuleError if fn is uses_t_cdf else tl.FenceError) as e:
        tl.grad(fn)(np.ones(2))
    msg = str(e.value)
    assert what in msg and "test_special.py:" in msg
    line = fn.__code__.co_firstlineno + 1
    assert f"test_special.py:{line}:" in msg


def mixed(x):
    return (ss.gammaln(x).sum() + st.norm.logcdf(x, 0.2, 1.5).sum() + ss.logsumexp(x)
            + ss.xlogy(x, x + 1.0).sum() + ss.polygamma(1, x).sum())


def mixed_jax(x):
    return (js.gammaln(x).sum() + jst.norm.logcdf(x, 0.2, 1.5).sum() + js.logsumexp(x)
            + js.xlogy(x, x + 1.0).sum() + js.polygamma(1, x).sum())


def test_hessian_equals_jax():
    x = np.array([0.5, 1.5, 3.0])
    with jax.enable_x64(True):
        want = np.asarray(jax.hessian(mixed_jax)(jnp.asarray(x)))
    np.testing.assert_allclose(tl.hessian(mixed)(x), want, rtol=1e-12, atol=1e-14)


def special_f32(x):
    return ss.gammaln(x) + ss.digamma(x) + ss.polygamma(1, x) + ss.erfc(x)


def test_float32_compiles_and_serialize_names_the_chlo_ops():
    """float32 keeps its dtype under jit (XLA's chlo expansions, ~5e-7 relative here); a portable
    artifact cannot hold chlo ops, and serialize says which."""
    x = np.linspace(0.1, 6.0, 7).astype(np.float32)
    got = tl.jit(special_f32)(x)
    want = special_f32(x.astype(np.float64))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    with pytest.raises(NoRuleError, match="chlo.digamma.*chlo.erfc.*chlo.lgamma.*chlo.polygamma"):
        tl.jit(special_f32).lower(x).serialize()


def test_frozen_distribution_with_array_parameters():
    # `norm(theta[0], theta[1])` crashed inside the front end: AttributeError: 'norm_gen' object has no
    # attribute '__name__'
    theta, x = np.array([0.3, 1.7]), np.array([0.1, -0.4, 2.2, 0.9])
    want = jax.grad(lambda t: jst.norm.logpdf(x, t[0], t[1]).sum())(theta)
    assert not np.allclose(want, 0.0)                              # negative control: a real gradient
    np.testing.assert_allclose(tl.grad(P.frozen_norm_of_params)(theta, x), want, rtol=1e-12)
    np.testing.assert_allclose(tl.jit(tl.grad(P.frozen_norm_of_params))(theta, x), want, rtol=1e-12)
