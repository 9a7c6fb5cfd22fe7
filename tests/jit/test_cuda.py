"""The same path on the CUDA PJRT plugin, where a GPU and the plugin exist."""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc._runtime.pjrt import has_platform

pytestmark = pytest.mark.skipif(not has_platform("cuda"), reason="no CUDA PJRT backend on this machine")


def f(x, w):
    return np.tanh(x @ w).sum()


def test_cuda_matches_cpu():
    x, w = np.random.default_rng(0).normal(size=(8, 4)), np.ones(4)
    got = tl.jit(f, platform="cuda")(x, w)
    np.testing.assert_allclose(np.asarray(got), np.asarray(tl.jit(f)(x, w)), rtol=1e-12)
    g = tl.jit(tl.grad(f), platform="cuda")(x, w)
    np.testing.assert_allclose(np.asarray(g), tl.grad(f)(x, w), rtol=1e-12)
