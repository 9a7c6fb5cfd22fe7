"""The NumPy names of issue 15 §1 (and the order statistics, NaN-reductions, ``where=``, pad
modes, interp and kron) under every transform, against JAX (float64).

Each program of ``programs.py`` runs under ``tl.vjp`` (a random cotangent) and
``tl.jvp`` (a random tangent), against its JAX twin (``jax.vjp``, ``jax.jvp``:
values and derivatives); its eager value, checked there, is then the oracle of
``tl.vmap`` (a loop over a batch of 3) and ``tl.jit``. JAX's op-by-op compiles
dominated the run time, so JAX runs twice per program only, each through one ``jax.jit`` where
the twin traces (``tests/jit/jax_twin.py``). Inputs avoid ties and kinks (tests of those are in
``test_surface_edges.py``).
"""
import functools

import jax
import numpy as np
import pytest

import tlaloc as tl

from tests.jit.jax_twin import call

from . import programs as P

jax.config.update("jax_enable_x64", True)

RTOL, ATOL = 1e-9, 1e-11
rng = np.random.default_rng(15)
X = rng.standard_normal((3, 4))
XB = rng.standard_normal((3, 3, 4))
NAMES = sorted(P.T)


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL)


def _vjp_of(f):
    """(x, cotangent) -> (f(x), the cotangent pulled back to x), one function for ``jax.jit``."""
    return lambda x, ct: (f(x), jax.vjp(f, x)[1](ct)[0])


@pytest.mark.parametrize("name", NAMES)
def test_vjp(name):
    t_out, t_back = tl.vjp(P.T[name], X)
    ct = rng.standard_normal(np.shape(t_out))            # JAX's output shape: asserted equal by close()
    out, want = call(("vjp", name), lambda: _vjp_of(P.J[name]), X, ct)
    close(t_out, out)
    close(t_back(ct)[0], want)


@pytest.mark.parametrize("name", NAMES)
def test_jvp(name):
    t = rng.standard_normal(X.shape)
    out, dout = call(("jvp", name), lambda: functools.partial(jax.jvp, P.J[name]), (X,), (t,))
    t_out, t_dout = tl.jvp(P.T[name], (X,), (t,))
    close(t_out, out)
    close(t_dout, dout)


@pytest.mark.parametrize("name", NAMES)
def test_vmap(name):
    close(tl.vmap(P.T[name])(XB), np.stack([P.T[name](x) for x in XB]))


JIT_REFUSED = {"eigh", "svd", "qr", "pinv", "norms"}      # LAPACK-only decompositions: refused by name


@pytest.mark.parametrize("name", NAMES)
def test_jit(name):
    if name in JIT_REFUSED:
        with pytest.raises(tl.NoRuleError, match="no StableHLO lowering rule for `(svd|eigh|qr)`"):
            tl.jit(P.T[name])(X)
        return
    close(tl.jit(P.T[name])(X), P.T[name](X))


def test_eager_values_match_jax_negative_control():
    """The eager value is the vmap/jit oracle: it matches JAX (checked in test_vjp), and a
    program that differs from its twin is seen."""
    with pytest.raises(AssertionError):
        close(P.T["roll"](X), P.J["roll_flat"](X).reshape(X.shape))


def test_negative_control_the_comparison_sees_a_wrong_derivative():
    out, back = jax.vjp(P.J["sort"], X)
    ct = np.ones_like(out)
    wrong = back(ct)[0] * (1 + 1e-7)
    with pytest.raises(AssertionError):
        close(tl.vjp(P.T["sort"], X)[1](ct)[0], wrong)
