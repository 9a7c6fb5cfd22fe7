"""tlaloc.scipy.linalg, multivariate_normal and dirichlet through SciPy's spelling: values against
SciPy, gradients against jax.scipy (float64) under grad, vmap and jit; refusals by name."""
import numpy as np
import pytest
import scipy.linalg
from scipy.linalg import cho_factor, cho_solve, solve_triangular
from scipy.stats import dirichlet, multivariate_normal

import tlaloc as tl
from tlaloc.errors import NoRuleError

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402
import jax.scipy.stats as jst  # noqa: E402

rng = np.random.default_rng(0)
M = rng.standard_normal((4, 4))
A = M @ M.T + 4 * np.eye(4)
B = rng.standard_normal((4, 2))
v = rng.standard_normal(4)
X = rng.standard_normal((5, 4))
T = np.triu(M) + 3 * np.eye(4)


def chol_solve(A, b):
    c, low = cho_factor(A)
    return cho_solve((c, low), b)


def chol_solve_lower(A, b):
    c, low = cho_factor(A, lower=True)
    return cho_solve((c, low), b)


def tri_solve(T, b):
    return solve_triangular(T, b) + solve_triangular(T, b, trans=1) + solve_triangular(T, b, unit_diagonal=True)


def chol_upper(A):
    return scipy.linalg.cholesky(A)


def expm(A):
    return scipy.linalg.expm(A)


def sqrtm(A):
    return scipy.linalg.sqrtm(A)


def logm(A):
    return scipy.linalg.logm(A)


def mvn(X, A):
    return multivariate_normal.logpdf(X, np.arange(4.0) * 0.1, A)


def mvn_diag(X, d):
    return multivariate_normal.logpdf(X, np.zeros(4), d)


def jax_tri(T, b):
    return (jsl.solve_triangular(T, b) + jsl.solve_triangular(T, b, trans=1)
            + jsl.solve_triangular(T, b, unit_diagonal=True))


CASES = {   # name: (program, args, scipy value, jax program)
    "cho_solve": (chol_solve, (A, B), lambda a, b: scipy.linalg.cho_solve(scipy.linalg.cho_factor(a), b),
                  lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b)),
    "cho_solve(lower, vector)": (chol_solve_lower, (A, v),
                                 lambda a, b: scipy.linalg.cho_solve(scipy.linalg.cho_factor(a, lower=True), b),
                                 lambda a, b: jsl.cho_solve(jsl.cho_factor(a, lower=True), b)),
    "solve_triangular": (tri_solve, (T, B), lambda t, b: (scipy.linalg.solve_triangular(t, b)
                                                          + scipy.linalg.solve_triangular(t, b, trans=1)
                                                          + scipy.linalg.solve_triangular(t, b, unit_diagonal=True)),
                         jax_tri),
    "cholesky": (chol_upper, (A,), scipy.linalg.cholesky, jsl.cholesky),
    "expm": (expm, (0.3 * M,), scipy.linalg.expm, jsl.expm),
    "expm(scaled)": (expm, (9.0 * M,), scipy.linalg.expm, jsl.expm),
    "multivariate_normal": (mvn, (X, A), lambda x, a: multivariate_normal.logpdf(x, np.arange(4.0) * 0.1, a),
                            lambda x, a: jst.multivariate_normal.logpdf(x, jnp.arange(4.0) * 0.1, a)),
}


def _weights(out):
    return np.cos(np.arange(np.size(out)) + 0.5).reshape(np.shape(out))


@pytest.mark.parametrize("name", sorted(CASES))
def test_value_and_gradients(name):
    prog, args, ref, jref = CASES[name]
    want = ref(*args)
    rtol = 1e-11 if name.startswith("expm") else 1e-12
    np.testing.assert_allclose(prog(*args), want, rtol=rtol, atol=1e-13)
    if name not in JIT_KNOWN_FAILURES:
        np.testing.assert_allclose(tl.jit(prog)(*args), want, rtol=rtol, atol=1e-13)
    w = _weights(want)
    argnums = tuple(range(len(args)))
    _, vjp = tl.vjp(prog, *args)
    got = vjp(w)
    with jax.enable_x64(True):
        _, jvjp = jax.vjp(jref, *args)
        jwant = jvjp(jnp.asarray(w))
    for g, j in zip(got, jwant):
        j = np.asarray(j)
        if name in ("cholesky", "cho_solve", "cho_solve(lower, vector)", "multivariate_normal"):
            # SPD inputs: only the symmetric part of a cotangent is defined (both symmetrise differently)
            g, j = g + np.swapaxes(g, -1, -2) if g.ndim == 2 and g.shape[0] == g.shape[1] else g, \
                j + np.swapaxes(j, -1, -2) if j.ndim == 2 and j.shape[0] == j.shape[1] else j
        np.testing.assert_allclose(g, j, rtol=1e-9, atol=1e-11)
    assert argnums


JIT_KNOWN_FAILURES = ()


def test_multivariate_normal_diagonal_cov():
    """A concrete 1-D cov is the diagonal, as SciPy. (Inside grad, a cov argument of unknown rank is
    taken as (d, d); a 1-D one then fails loudly in cholesky. Open: tl.jit of the diagonal path emits
    a stablehlo.iota with a negative iota_dimension.)"""
    d = np.array([0.5, 1.0, 2.0, 3.0])
    got = tl.scipy.stats.multivariate_normal.logpdf(X, np.zeros(4), d)
    np.testing.assert_allclose(got, multivariate_normal.logpdf(X, np.zeros(4), np.diag(d)), rtol=1e-12)


NONSYM = 3.0 * np.eye(4) + 0.7 * M                      # eigenvalues off the negative real axis
MATRIX_FUNCTIONS = {"sqrtm": (sqrtm, scipy.linalg.sqrtm), "logm": (logm, scipy.linalg.logm)}


def _frechet_sqrt(S, E):
    return scipy.linalg.solve_sylvester(S, S, E)               # S L + L S = E


def _frechet_log(L, E):
    """d log(A)[E]: the D with expm_frechet(L, D) = E, solved column by column of vec."""
    n = L.shape[0]
    K = np.stack([scipy.linalg.expm_frechet(L, np.eye(n * n)[k].reshape(n, n), compute_expm=False).ravel()
                  for k in range(n * n)], axis=1)
    return np.linalg.solve(K, E.ravel()).reshape(n, n)


@pytest.mark.parametrize("name,which", [("sqrtm", "spd"), ("sqrtm", "nonsymmetric"), ("logm", "nonsymmetric")])
def test_sqrtm_logm_values_and_frechet_derivatives(name, which):
    prog, ref = MATRIX_FUNCTIONS[name]
    a = A if which == "spd" else NONSYM
    want = ref(a)
    np.testing.assert_allclose(prog(a), want, rtol=1e-12, atol=1e-13 * np.abs(want).max())
    np.testing.assert_allclose(tl.jit(prog)(a), want, rtol=1e-12, atol=1e-13 * np.abs(want).max())
    E = np.cos(np.arange(16.0)).reshape(4, 4)
    _, tangent = tl.jvp(prog, (a,), (E,))
    oracle = _frechet_sqrt(want, E) if name == "sqrtm" else _frechet_log(want, E)
    np.testing.assert_allclose(tangent, oracle, rtol=1e-10, atol=1e-12 * np.abs(oracle).max())
    _, vjp = tl.vjp(prog, a)
    G = np.sin(np.arange(16.0)).reshape(4, 4)
    (a_bar,) = vjp(G)
    assert np.sum(a_bar * E) == pytest.approx(np.sum(G * oracle), rel=1e-10)   # <Ā, E> = <G, L(E)>


def mvn_sum(X, A):
    return mvn(X, A).sum()


def test_multivariate_normal_grad_jit_and_vmap():
    gx, ga = tl.grad(mvn_sum, argnums=(0, 1))(X, A)
    jx, ja = tl.jit(tl.grad(mvn_sum, argnums=(0, 1)))(X, A)
    np.testing.assert_allclose(jx, gx, rtol=1e-12)
    np.testing.assert_allclose(ja, ga, rtol=1e-11)
    per = tl.vmap(mvn, in_axes=(0, None))(X[:, None, :], A)
    np.testing.assert_allclose(per[:, 0], multivariate_normal.logpdf(X, np.arange(4.0) * 0.1, A), rtol=1e-12)


def dir_logpdf(x, alpha):
    return dirichlet.logpdf(x, alpha)


def test_dirichlet():
    x = np.array([[0.2, 0.5], [0.3, 0.1], [0.5, 0.4]])          # components on the first axis, as SciPy
    alpha = np.array([1.5, 2.0, 3.5])
    np.testing.assert_allclose(dir_logpdf(x, alpha), dirichlet.logpdf(x, alpha), rtol=1e-12)
    np.testing.assert_allclose(tl.jit(dir_logpdf)(x, alpha), dirichlet.logpdf(x, alpha), rtol=1e-12)
    with jax.enable_x64(True):
        want = np.asarray(jax.grad(lambda a: jst.dirichlet.logpdf(jnp.asarray(x), a).sum())(jnp.asarray(alpha)))
    got = tl.grad(lambda_free_sum, argnums=1)(x, alpha)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    from tlaloc.errors import ArgumentError
    with pytest.raises(ArgumentError, match="simplex"):
        tl.scipy.stats.dirichlet.logpdf(np.array([0.5, 0.6]), np.array([1.0, 2.0]))


def lambda_free_sum(x, alpha):
    return dir_logpdf(x, alpha).sum()


def uses_mvn_cdf(x):
    return multivariate_normal.cdf(x, np.zeros(2)).sum()


@pytest.mark.parametrize("fn,what", [(uses_mvn_cdf, "multivariate_normal.cdf")])
def test_refusals_at_the_users_line(fn, what):
    with pytest.raises(NoRuleError) as e:
        tl.grad(fn)(np.eye(2))
    assert what in str(e.value)
    assert f"test_linalg_multivariate.py:{fn.__code__.co_firstlineno + 1}:" in str(e.value)
