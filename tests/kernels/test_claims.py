"""Claiming coarsened ops: off by default, opt-in per program, per target."""
import pytest

import tlaloc as tl
from tlaloc.kernels import KernelRegistry, KernelTemplate, library as L, registry
from tlaloc.kernels.ptx import inst


def test_claiming_is_off_by_default():
    assert not registry.enabled
    assert registry.choose("rms_norm", "nvidia-h100") is None


def test_opt_in_chooses_the_claiming_template():
    with registry.opt_in():
        assert registry.choose("rms_norm", "nvidia-h100") is L.rmsnorm_fwd
        assert registry.choose("paged_attention", "nvidia-h200") is L.paged_attention
        assert registry.choose("rms_norm", "cpu") is None              # not claimed for that target
        assert registry.choose("softmax", "nvidia-h100") is None       # nobody claims it
    assert registry.choose("rms_norm", "nvidia-h100") is None
    assert registry.choose("rms_norm", "nvidia-h100", opt_in=True) is L.rmsnorm_fwd


def test_a_template_can_decline_shapes():
    t = KernelTemplate("t", lambda k: inst("ret")).claim("rms_norm", "cpu", when=lambda dim, **_: dim % 32 == 0)
    reg = KernelRegistry()
    reg.register(t)
    assert reg.choose("rms_norm", "cpu", opt_in=True, dim=64) is t
    assert reg.choose("rms_norm", "cpu", opt_in=True, dim=65) is None
    assert t.claims("rms_norm", "cpu", dim=64) and not t.claims("rope", "cpu")


def test_public_surface():
    assert tl.kernels.registry is registry
    assert "kernels" in tl.__all__
    assert set(L.TEMPLATES) == {"rmsnorm_fwd", "rmsnorm_bwd_dx", "rmsnorm_bwd_dw", "rope", "cross_entropy_fwd",
                                "cross_entropy_bwd", "attention", "paged_attention"}


@pytest.mark.parametrize("name", sorted(L.TEMPLATES))
def test_every_library_kernel_has_a_reference(name):
    assert name in L.reference.REFERENCES
