"""Kernels as XLA FFI targets. On the CPU platform the simulator is the launcher,
which tests the pure-Python FFI handler (metadata handshake, buffers, errors)
without a GPU; the CUDA tests skip by name where there is no driver."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")

from tlaloc.kernels import custom_call_text, ffi_target_name, gpu, library as L, simulate  # noqa: E402

HAVE_CUDA, WHY = gpu.available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason=f"no CUDA device: {WHY}")


def _rms_case():
    spec = L.rmsnorm_fwd.specialize(arch="sm_90", rows=4, dim=96, threads=64)
    rng = np.random.default_rng(1)
    return spec, [rng.standard_normal((4, 96)).astype(np.float32), rng.standard_normal(96).astype(np.float32)]


def _paged_case():
    spec = L.paged_attention.specialize(arch="sm_90", batch=2, q_heads=4, kv_heads=2, head_dim=32, num_blocks=6,
                                        block_size=4, max_blocks=3)
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 4, 32)).astype(np.float32)
    kc, vc = (rng.standard_normal((6, 4, 2, 32)).astype(np.float32) for _ in range(2))
    return spec, [q, kc, vc, np.array([[1, 4, 2], [5, 0, 0]], np.int32), np.array([9, 3], np.int32)]


@pytest.mark.parametrize("case", [_rms_case, _paged_case], ids=["rmsnorm_fwd", "paged_attention"])
def test_simulated_kernel_as_a_cpu_ffi_target_inside_jit(case):
    spec, xs = case()
    name = gpu.register_simulated(spec)
    got = jax.jit(gpu.ffi_call(spec, name))(*xs)
    for g, w in zip(got, simulate(spec, *xs)):
        np.testing.assert_array_equal(np.asarray(g), w)


def test_ffi_handler_reports_bad_buffers_as_an_xla_error():
    spec, xs = _rms_case()
    name = gpu.register_simulated(spec, name="tlaloc_rms_wrong_shapes")
    bad = jax.jit(lambda x: gpu.ffi_call(spec, name)(x, x))
    with pytest.raises(Exception, match=r"tlaloc kernel: ValueError: input w: expected float32\[96\], "
                                        r"got float32\[4, 96\]"):
        bad(xs[0])


def test_custom_call_text_parses():
    from tlaloc._render.stablehlo import parse
    spec, _ = _rms_case()
    call = custom_call_text(spec, [("%arg0", "tensor<4x96xf32>"), ("%arg1", "tensor<96xf32>")],
                            ["tensor<4x96xf32>", "tensor<4xf32>"])
    text = ("func.func @main(%arg0: tensor<4x96xf32>, %arg1: tensor<96xf32>) -> (tensor<4x96xf32>, tensor<4xf32>) {\n"
            f"  %0:2 = {call}\n  return %0#0, %0#1 : tensor<4x96xf32>, tensor<4xf32>\n}}")
    assert f"@{ffi_target_name(spec)}" in str(parse(text))
    assert ffi_target_name(spec) == ffi_target_name(L.rmsnorm_fwd.specialize(arch="sm_90", rows=4, dim=96,
                                                                            threads=64))


def test_without_a_driver_the_gpu_path_says_why():
    if HAVE_CUDA:
        pytest.skip("a CUDA device is present")
    spec, xs = _rms_case()
    with pytest.raises(gpu.CudaUnavailable):
        gpu.driver.run(spec, *xs)


@needs_cuda
@pytest.mark.parametrize("case", [_rms_case, _paged_case], ids=["rmsnorm_fwd", "paged_attention"])
def test_cuda_launch_matches_the_simulator(case):
    spec, xs = case()
    for g, w in zip(gpu.driver.run(spec, *xs), simulate(spec, *xs)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * np.abs(w).max())


@needs_cuda
def test_cuda_ffi_target_inside_jit():
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("jax has no GPU backend here")
    spec, xs = _rms_case()
    name = gpu.register_kernel(spec)
    got = jax.jit(gpu.ffi_call(spec, name))(*[jax.device_put(x, jax.devices("gpu")[0]) for x in xs])
    for g, w in zip(got, simulate(spec, *xs)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
