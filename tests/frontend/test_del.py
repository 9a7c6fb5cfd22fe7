"""``del name`` in the straight-line body: rendered derivatives ``del`` their dead
temporaries (to free memory as they go), and must stay source that tlaloc can
differentiate again. Reading a deleted name is refused with its location; ``del``
inside a branch is refused (tests/frontend/test_refusals.py)."""
import importlib.util

import numpy as np
import pytest

import tlaloc as tl


def loss(w, x):
    return np.sum(np.tanh(x @ w) ** 2)


def deletes_a_temporary(x):
    y = x * 2.0
    z = np.sin(y)
    del y
    return z.sum()


def reads_after_del(x):
    y = x * 2.0
    del y
    return y.sum()


def test_del_of_a_temporary_is_lowered():
    x = np.array([0.1, -0.4, 2.0])
    np.testing.assert_allclose(tl.grad(deletes_a_temporary)(x), 2.0 * np.cos(2.0 * x), rtol=1e-14)


def test_reading_a_deleted_name_is_refused_with_its_location():
    with pytest.raises(tl.FenceError, match=r"`y` is read after `del y` at line"):
        tl.grad(reads_after_del)


def test_a_rendered_derivative_can_be_differentiated_again(tmp_path):
    g = tl.grad(loss)
    src = tl.source(g)
    assert "    del " in src
    path = tmp_path / "rendered_loss.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("rendered_loss", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rendered = getattr(module, g.__name__)

    def first(w, x):
        return rendered(w, x)[0].sum()

    def first_direct(w, x):
        return g(w, x).sum()

    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    np.testing.assert_allclose(tl.grad(first)(w, x), tl.grad(first_direct)(w, x), rtol=1e-12)
