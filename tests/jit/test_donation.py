"""donate_argnums: the donated buffer is updated in place (same pointer); reusing it is refused."""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc._runtime.pjrt import device_put


def step(w, g):
    return w - 0.1 * g


def test_donated_buffer_is_updated_in_place():
    jstep = tl.jit(step, donate_argnums=0)
    assert "tf.aliasing_output = 0 : i32" in jstep.lower(np.ones(64), np.ones(64)).as_text()
    w = device_put(np.arange(64.0))
    g = device_put(np.ones(64))
    for _ in range(3):
        w.block_until_ready()
        before = w.unsafe_buffer_pointer()
        w_new = jstep(w, g)
        assert w_new.unsafe_buffer_pointer() == before
        assert w.is_deleted()
        w = w_new
    np.testing.assert_allclose(np.asarray(w), np.arange(64.0) - 0.3, rtol=1e-12)


def test_reusing_a_donated_array_is_refused():
    jstep = tl.jit(step, donate_argnums=0)
    w = device_put(np.ones(8))
    jstep(w, np.ones(8))
    with pytest.raises(tl.ArgumentError, match="donated to an earlier call"):
        jstep(w, np.ones(8))


def test_without_donation_inputs_survive():
    jstep = tl.jit(step)
    w = device_put(np.ones(8))
    jstep(w, np.ones(8))
    assert not w.is_deleted()
    np.testing.assert_array_equal(np.asarray(jstep(w, np.ones(8))), np.full(8, 0.9))


def test_numpy_argument_can_be_donated():
    out = tl.jit(step, donate_argnums=0)(np.ones(4), np.ones(4))
    np.testing.assert_allclose(np.asarray(out), np.full(4, 0.9))
