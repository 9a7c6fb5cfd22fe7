"""Ahead-of-time stages: lower → as_text / compile / serialize; static arguments."""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc._runtime.pjrt import Executable


def f(x, w):
    return np.tanh(x @ w).sum(axis=0)


def test_lower_compile_call():
    x, w = np.ones((4, 3)), np.full((3, 2), 0.1)
    lowered = tl.jit(f).lower(x, w)
    assert lowered.as_text().startswith("module @jit_f")
    assert [str(v.aval) for v in lowered.graph.inputs] == ["f64[4,3]", "f64[3,2]"]
    compiled = lowered.compile()
    np.testing.assert_allclose(np.asarray(compiled(x, w)), f(x, w), rtol=1e-12)
    with pytest.raises(tl.ArgumentError, match="compiled for"):
        compiled(np.ones((5, 3)), w)


def test_serialize_portable_artifact_round_trip(tmp_path):
    x, w = np.ones((4, 3)), np.full((3, 2), 0.1)
    lowered = tl.jit(f).lower(x, w)
    text_before = lowered.as_text()
    path = tmp_path / "f.mlirbc"
    blob = lowered.serialize(path)
    assert path.read_bytes() == blob and blob[:4] == b"ML\xefR"      # MLIR bytecode magic
    assert lowered.as_text() == text_before                          # serialising did not mutate it
    exe = Executable(blob, in_avals=lowered.program.in_avals)
    (out,) = exe(x, w)
    np.testing.assert_allclose(np.asarray(out), f(x, w), rtol=1e-12)


def test_outputs_are_device_arrays_and_feed_back():
    jf = tl.jit(lambda_free_square)
    y = jf(np.arange(3.0))
    assert hasattr(y, "unsafe_buffer_pointer")
    z = jf(y)                                   # a device array passed back stays on the device
    np.testing.assert_array_equal(np.asarray(z), np.arange(3.0) ** 4)


def lambda_free_square(x):
    return x * x


def reshape_by(x, shape, mode):
    y = x.reshape(shape)
    if mode == "sum":
        return y.sum(axis=0)
    return y.max(axis=0)


def test_static_argnums_bind_python_values():
    jf = tl.jit(reshape_by, static_argnums=(1, 2))
    x = np.arange(6.0)
    np.testing.assert_array_equal(np.asarray(jf(x, (2, 3), "sum")), [3.0, 5.0, 7.0])
    np.testing.assert_array_equal(np.asarray(jf(x, (3, 2), "max")), [4.0, 5.0])
    assert jf.cache_size() == 2
    with pytest.raises(tl.ArgumentError, match="hashable"):
        jf(x, [2, 3], "sum")
    compiled = jf.lower(x, (2, 3), "sum").compile()
    np.testing.assert_array_equal(np.asarray(compiled(x, (2, 3), "sum")), [3.0, 5.0, 7.0])
    with pytest.raises(tl.ArgumentError, match="static argument 2"):
        compiled(x, (2, 3), "max")


def test_interpreter_backend_matches():
    x, w = np.ones((4, 3)), np.full((3, 2), 0.1)
    np.testing.assert_allclose(tl.jit(f, backend="interpreter")(x, w), np.asarray(tl.jit(f)(x, w)), rtol=1e-12)
    with pytest.raises(tl.ArgumentError, match="backend"):
        tl.jit(f, backend="tpu")


def test_serialized_artifact_round_trips_through_text_and_both_runtimes(tmp_path):
    from tlaloc._jit.stages import deserialize
    x, w = np.linspace(-1, 1, 12).reshape(4, 3), np.full((3, 2), 0.3)
    df = tl.grad(lambda_free_loss, argnums=(0, 1))
    lowered = tl.jit(df).lower(x, w)
    path = tmp_path / "grad.mlirbc"
    lowered.serialize(path)
    assert path.exists() and path.stat().st_size > 0
    text = deserialize(path.read_bytes())
    assert "func.func public @main" in text
    want = df(x, w)
    for got in (Executable(path.read_bytes(), in_avals=lowered.program.in_avals)(x, w),
                Executable(text, in_avals=lowered.program.in_avals)(x, w)):
        for g, h in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), h, rtol=1e-12)
    try:
        from tlaloc._runtime.iree import Executable as IreeExecutable
        import iree.runtime  # noqa: F401
    except ImportError:
        return
    ir_lowered = tl.jit(df, backend="iree").lower(x.astype(np.float32), w.astype(np.float32))
    ir_text = deserialize(ir_lowered.serialize())
    got = IreeExecutable(ir_text, in_avals=ir_lowered.program.in_avals)(x.astype(np.float32), w.astype(np.float32))
    for g, h in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), h, rtol=1e-5, atol=1e-6)


def lambda_free_loss(x, w):
    return (np.tanh(x @ w) ** 2).sum()


def test_a_sharded_program_is_not_serialized():
    from tlaloc import sharding as shd
    lowered = tl.jit(f, mesh=shd.Mesh({"data": 2}), in_shardings=(shd.P("data"), None)).lower(
        np.ones((4, 3)), np.ones((3, 2)))
    with pytest.raises(tl.NoRuleError, match="no portable form"):
        lowered.serialize()
