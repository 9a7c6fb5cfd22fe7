"""Every library kernel's PTX assembles with ptxas for sm_80 and sm_90."""
import re

import pytest

from tlaloc.kernels.ptx import assemble, ptxas_path
from tlaloc.kernels.ptx.ptxas import PtxasError

from .shapes import SMALL, ids

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed (CUDA toolkit)")
EM_CUDA = 190                          # the ELF e_machine of NVIDIA cubins


def assert_cubin_of(spec, cubin):
    """``cubin`` is a CUDA ELF (magic, e_machine) holding the code section of ``spec``'s entry."""
    entries = re.findall(r"\.entry\s+(\w+)", spec.ptx)
    assert len(entries) == 1, f"{spec.name}: PTX entries {entries}"
    assert cubin[:4] == b"\x7fELF", f"{spec.name}: not an ELF file"
    assert int.from_bytes(cubin[18:20], "little") == EM_CUDA, f"{spec.name}: e_machine is not EM_CUDA"
    assert b".text." + entries[0].encode() in cubin, f"{spec.name}: no code section for entry {entries[0]}"


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("template,shape", SMALL, ids=ids())
def test_library_kernel_assembles(template, shape, arch):
    spec = template.specialize(arch=arch, **shape)
    assert_cubin_of(spec, assemble(spec.ptx, arch))


@needs_ptxas
def test_large_shapes_assemble():
    from tlaloc.kernels import library as L
    specs = [L.rmsnorm_fwd.specialize(arch="sm_90", rows=8, dim=4096),
             L.cross_entropy_fwd.specialize(arch="sm_90", rows=8, vocab=128256),
             L.attention.specialize(arch="sm_90", batch=1, heads=32, seq=512, head_dim=128, causal=True),
             L.paged_attention.specialize(arch="sm_90", batch=16, q_heads=32, kv_heads=8, head_dim=128,
                                          num_blocks=2048, block_size=16, max_blocks=128, nwarps=8)]
    for s in specs:
        assert_cubin_of(s, assemble(s.ptx, "sm_90"))


@needs_ptxas
def test_ptxas_errors_are_reported():
    with pytest.raises(PtxasError, match="ptxas -arch=sm_80 failed"):
        assemble(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k() { bogus; }\n", "sm_80")


@needs_ptxas
def test_control_cubin_check_rejects_another_kernel():
    """The check is specific: a cubin of one kernel does not pass as another's."""
    from tlaloc.kernels import library as L
    a = L.rmsnorm_fwd.specialize(arch="sm_90", rows=2, dim=64)
    b = L.rope.specialize(arch="sm_90", tokens=3, heads=2, dim=80, max_pos=10)
    with pytest.raises(AssertionError, match="no code section"):
        assert_cubin_of(b, assemble(a.ptx, "sm_90"))
