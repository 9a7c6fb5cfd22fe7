"""tl.capture: traced model code, reverse mode, compiled per bucket through XLA."""
import dataclasses
import logging

import numpy as np
import pytest

import tlaloc as tl


@dataclasses.dataclass(frozen=True)
class Linear:
    w: np.ndarray
    b: np.ndarray

    def __call__(self, x):
        return x @ self.w + self.b


@dataclasses.dataclass(frozen=True)
class MLP:
    layers: tuple

    def __call__(self, x):
        for layer in self.layers:
            x = np.tanh(layer(x))
        return x


def mse(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).mean()


def _setup():
    rng = np.random.default_rng(0)
    m = MLP((Linear(rng.normal(size=(3, 4)), np.zeros(4)), Linear(rng.normal(size=(4, 1)), np.zeros(1))))
    return m, (rng.normal(size=(5, 3)), rng.normal(size=(5, 1)))


@pytest.mark.parametrize("backend", ["interpreter", "xla"])
def test_capture_matches_ast_grad(backend):
    m, batch = _setup()
    want = tl.grad(mse)(m, batch)
    loss, grads = tl.capture(m, batch, mse, backend=backend).run(m, batch)
    np.testing.assert_allclose(float(np.asarray(loss)), float(mse(m, batch)), rtol=1e-12)
    from tlaloc import _pytree
    for a, b in zip(_pytree.leaves(grads), _pytree.leaves(want)):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-10, atol=1e-12)


def test_new_bucket_is_traced_once(caplog):
    m, batch = _setup()
    step = tl.capture(m, batch, mse, backend="interpreter")
    with caplog.at_level(logging.INFO, logger="tlaloc.compile"):
        step.run(m, batch)
        step.run(m, batch)
        bigger = (np.ones((7, 3)), np.ones((7, 1)))
        step.run(m, bigger)
        step.run(m, bigger)
    traced = [r for r in caplog.records if "traced" in r.getMessage()]
    assert len(traced) == 1          # the example bucket was traced at capture time; (7, 3) once


def test_source_of_a_step_is_python():
    m, batch = _setup()
    src = tl.source(tl.capture(m, batch, mse, backend="interpreter"))
    assert "lax.matmul" in src and "lax.tanh" in src and "return" in src


def branchy(model, batch):
    x, _ = batch
    if model(x).sum() > 0:
        return 1.0
    return 0.0


def test_python_if_on_an_array_points_to_tl_cond():
    m, batch = _setup()
    with pytest.raises(tl.TlalocError, match="tl.cond"):
        tl.capture(m, batch, branchy)


def test_bad_backend_is_refused():
    m, batch = _setup()
    with pytest.raises(tl.ArgumentError, match="backend"):
        tl.capture(m, batch, mse, backend="gpu")
