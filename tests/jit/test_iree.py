"""tl.jit(f, backend="iree"): the same StableHLO through IREE (llvm-cpu, local-sync).

Float64 is kept (not demoted); an op IREE cannot link in float64 is refused by name,
with the user's line, never run with a wrong answer.
"""
import numpy as np
import pytest

import tlaloc as tl

pytest.importorskip("iree.runtime", reason="backend='iree' needs iree-base-runtime")

from tlaloc import sharding as shd  # noqa: E402
from tlaloc._runtime.iree import strip_for_iree  # noqa: E402

from . import iree_programs as P  # noqa: E402


def _rng():
    return np.random.default_rng(0)


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-12), (np.float32, 1e-5)], ids=["f64", "f32"])
def test_forward_and_grad_match_the_interpreter(dtype, rtol):
    r = _rng()
    x, w = r.normal(size=(5, 3)).astype(dtype), r.normal(size=(3, 2)).astype(dtype)
    got = tl.jit(P.poly, backend="iree")(x, w)
    assert type(got).__name__ == "DeviceArray"
    want = tl.jit(P.poly, backend="interpreter")(x, w)
    assert np.asarray(got).dtype == dtype
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=rtol)
    dpoly = tl.grad(lambda_free_loss, argnums=(0, 1))
    for g, h in zip(tl.jit(dpoly, backend="iree")(x, w), dpoly(x, w)):
        np.testing.assert_allclose(np.asarray(g), h, rtol=rtol, atol=rtol)


def lambda_free_loss(x, w):
    return P.poly(x, w).sum()


def test_float64_tanh_is_refused_by_name_with_the_users_line():
    with pytest.raises(tl.NoRuleError) as e:
        tl.jit(P.uses_tanh, backend="iree")(np.ones(3))
    msg = str(e.value)
    assert "IREE (llvm-cpu) cannot compile `tanh` in float64" in msg
    assert "iree_programs.py:" in msg                    # where the user wrote it
    assert "backend='xla'" in msg


def test_float64_sin_is_refused_and_float32_runs():
    with pytest.raises(tl.NoRuleError, match="cannot compile `sin` in float64"):
        tl.jit(P.uses_sin, backend="iree")(np.ones(3))
    x = np.linspace(-1.0, 1.0, 5).astype(np.float32)
    np.testing.assert_allclose(np.asarray(tl.jit(P.uses_sin, backend="iree")(x)), P.uses_sin(x), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tl.jit(P.uses_tanh, backend="iree")(x)), P.uses_tanh(x), rtol=1e-6)


def test_int_bool_outputs_loops_and_device_arrays_fed_back():
    x = np.array([0.5, 3.2, -1.0])
    for a, b in zip(tl.jit(P.ints_and_bools, backend="iree")(x), P.ints_and_bools(x)):
        np.testing.assert_array_equal(np.asarray(a), b)
    jf = tl.jit(P.loop_sum, backend="iree")
    np.testing.assert_allclose(np.asarray(jf(x)), P.loop_sum(x), rtol=1e-12)
    step = tl.jit(P.step, backend="iree", donate_argnums=0)       # donation: ignored by IREE, still correct
    w = step(np.ones(4), np.ones(4))
    w = step(w, np.ones(4))                                       # a device array passed back in
    assert type(w).__name__ == "DeviceArray"
    np.testing.assert_allclose(np.asarray(w), np.full(4, 0.8), rtol=1e-12)
    assert step.cache_size() == 1


def test_shardy_annotations_are_stripped_for_iree():
    mesh = shd.Mesh({"data": 2})
    jf = tl.jit(P.poly, backend="iree", mesh=mesh, in_shardings=(shd.P("data"), None))
    x, w = np.ones((4, 3)), np.full((3, 2), 0.5)
    lowered = jf.lower(x, w)
    assert "sdy.sharding" in lowered.as_text()
    stripped = strip_for_iree(lowered.as_text())
    assert "sdy." not in stripped and "mhlo.num_partitions = 1" in stripped
    np.testing.assert_allclose(np.asarray(jf(x, w)), P.poly(x, w), rtol=1e-12)


def test_ahead_of_time_stages():
    x, w = np.ones((4, 3)), np.full((3, 2), 0.1)
    lowered = tl.jit(P.poly, backend="iree").lower(x, w)
    assert lowered.backend == "iree" and lowered.as_text().startswith("module @jit_poly")
    compiled = lowered.compile()
    np.testing.assert_allclose(np.asarray(compiled(x, w)), P.poly(x, w), rtol=1e-12)
    assert compiled.executable.vmfb[:8]                             # the IREE module's bytes
    with pytest.raises(tl.ArgumentError, match="compiled for"):
        compiled(np.ones((5, 3)), w)


def test_iree_runs_on_the_cpu_only():
    with pytest.raises(tl.ArgumentError, match="llvm-cpu"):
        tl.jit(P.poly, backend="iree", platform="cuda")


def test_hessian_of_a_while_in_a_for_compiles_and_matches_jax():
    # regression: IREE's stream partitioning refused ("circular dependency") the negative-index
    # wrap (i < 0 ? i + n : i) of a for loop's index feeding two slices next to a bounded while;
    # the index of a non-negative range is no longer wrapped (stablehlo_index._index_val)
    from tests.ad import cases
    from . import ad_jax
    case, x = cases.BY_NAME["while_in_for"], np.array([0.5, 1.2])
    got = np.asarray(tl.jit(tl.hessian(case.fn), backend="iree")(x))
    ad_jax.close(got, ad_jax.hessian(case, (x,), 0), np.float64, "hessian of while_in_for on IREE")


def test_a_for_index_is_wrapped_only_where_it_may_be_negative():
    def fwd(x):
        s = 0.0
        for i in range(3):
            s = s + x[i]
        return s

    def back(x):
        s = 0.0
        for i in range(1, -3, -1):          # 1, 0, -1, -2: x[-1], x[-2] read from the end
            s = s * 2.0 + x[i]
        return s
    x = np.array([1.0, 2.0, 3.0])
    assert "stablehlo.select" not in tl.jit(fwd).lower(x).as_text()
    assert "stablehlo.select" in tl.jit(back).lower(x).as_text()
    np.testing.assert_allclose(np.asarray(tl.jit(back, backend="iree")(x)), back(x), rtol=1e-15)
