"""Every library kernel's PTX assembles with ptxas for sm_80 and sm_90."""
import pytest

from tlaloc.kernels.ptx import assemble, ptxas_path
from tlaloc.kernels.ptx.ptxas import PtxasError

from .shapes import SMALL, ids

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed (CUDA toolkit)")


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("template,shape", SMALL, ids=ids())
def test_library_kernel_assembles(template, shape, arch):
    cubin = assemble(template.specialize(arch=arch, **shape).ptx, arch)
    assert cubin[:4] == b"\x7fELF"


@needs_ptxas
def test_large_shapes_assemble():
    from tlaloc.kernels import library as L
    specs = [L.rmsnorm_fwd.specialize(arch="sm_90", rows=8, dim=4096),
             L.cross_entropy_fwd.specialize(arch="sm_90", rows=8, vocab=128256),
             L.attention.specialize(arch="sm_90", batch=1, heads=32, seq=512, head_dim=128, causal=True),
             L.paged_attention.specialize(arch="sm_90", batch=16, q_heads=32, kv_heads=8, head_dim=128,
                                          num_blocks=2048, block_size=16, max_blocks=128, nwarps=8)]
    for s in specs:
        assemble(s.ptx, "sm_90")


@needs_ptxas
def test_ptxas_errors_are_reported():
    with pytest.raises(PtxasError, match="ptxas -arch=sm_80 failed"):
        assemble(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k() { bogus; }\n", "sm_80")
