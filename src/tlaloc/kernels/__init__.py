"""``tlaloc.kernels``: hand-written kernels beside the compiler's own code.

=================  ===========================================================
``ptx``            a PTX DSL: one checked call per instruction, emitted as text
``sim``            a CPU simulator of that PTX (threads, warps, shared memory)
``library``        RMSNorm fwd/bwd, RoPE, cross-entropy fwd/bwd, attention,
                   paged attention (GQA), with ``tlaloc.numpy`` references
``registry``       which template may claim a coarsened op (off by default)
``mosaic_kernel``  a Pallas kernel's Mosaic payload as a DXIR op (TPU)
``gpu``            loading PTX with the CUDA driver; XLA FFI registration
=================  ===========================================================

Importing this package needs neither jax nor a GPU; ``gpu`` and the Mosaic
export import them when first used.
"""
from . import ptx, sim, library
from .ptx import KernelTemplate, PtxError
from .sim import SimError, simulate
from .claims import KernelRegistry, custom_call_text, ffi_target_name, registry
from .mosaic import mosaic_kernel

GPU_TARGETS = ("nvidia-a100", "nvidia-h100", "nvidia-h200")
for _template, _op in ((library.rmsnorm_fwd, "rms_norm"), (library.rope, "rope"),
                       (library.cross_entropy_fwd, "cross_entropy"), (library.attention, "attention"),
                       (library.paged_attention, "paged_attention")):
    _template.claim(_op, *GPU_TARGETS)
    registry.register(_template)

__all__ = ["ptx", "sim", "library", "KernelTemplate", "PtxError", "SimError", "simulate", "registry",
           "KernelRegistry", "custom_call_text", "ffi_target_name", "mosaic_kernel", "GPU_TARGETS"]
