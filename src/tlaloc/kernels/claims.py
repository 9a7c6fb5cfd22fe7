"""Which kernel may replace a coarsened op on a target: claiming, off by default.

The jit's recognizers turn patterns (attention, RMSNorm, RoPE, cross-entropy,
paged attention) into coarsened ops. A ``KernelTemplate`` may *claim* such an op
for a target (``template.claim("rms_norm", "nvidia-h100", "nvidia-h200")``);
a claimed op is emitted as ``stablehlo.custom_call @<target name>`` and an
unclaimed one is inlined as usual. Claiming is off unless a program opts in.

The hook for the jit (its owner wires it in; nothing here imports the jit)::

    from tlaloc.kernels import registry
    choice = registry.choose(op_name, target, opt_in=program_opts_in, **op_params)
    if choice is None:
        ...inline the op's body as before...
    else:
        spec = choice.specialize(arch=registry.ARCH[target], **shape)   # PTX for the op's shapes
        ...emit custom_call_text(spec, operands) and register spec on the device (tlaloc.kernels.gpu)

``op_params`` are the coarsened op's static parameters (shapes, dtype, causal,
eps ...); a template's ``when`` predicate may decline shapes it does not handle.
Only the forward op is claimed: the reverse transform differentiates the
coarsened op's gradient body, so no backward op is left to claim.
"""
from __future__ import annotations

import contextlib
import threading

#: target name -> the PTX arch its kernels are specialized for.
ARCH = {"nvidia-a100": "sm_80", "nvidia-h100": "sm_90", "nvidia-h200": "sm_90", "nvidia-gb10": "sm_90"}
_local = threading.local()


class KernelRegistry:
    """Templates that may claim coarsened ops; ``choose`` returns one only when enabled."""

    def __init__(self):
        self._templates: list = []
        self.enabled_by_default = False

    def register(self, template) -> None:
        if template not in self._templates:
            self._templates.append(template)

    def templates(self) -> list:
        return list(self._templates)

    @property
    def enabled(self) -> bool:
        return getattr(_local, "enabled", self.enabled_by_default)

    @contextlib.contextmanager
    def opt_in(self, on: bool = True):
        """Enable claiming for programs built inside this block (this thread only)."""
        old = getattr(_local, "enabled", None)
        _local.enabled = on
        try:
            yield self
        finally:
            if old is None:
                del _local.enabled
            else:
                _local.enabled = old

    def choose(self, op_name: str, target: str, *, opt_in=None, **op_params):
        """The first registered template claiming ``op_name`` on ``target``, or ``None``
        (always ``None`` while claiming is off)."""
        on = self.enabled if opt_in is None else bool(opt_in)
        if not on:
            return None
        for t in self._templates:
            if t.claims(op_name, target, **op_params):
                return t
        return None


def custom_call_text(spec, operands, result_types, *, target_name=None) -> str:
    """``stablehlo.custom_call`` of a specialized kernel (typed FFI, ``api_version = 4``).

    operands: ``[(ssa name, tensor type)]``; result_types: tensor types. The call's
    inputs are the kernel's input pointers and its results the output pointers,
    in the order of the template's signature.
    """
    name = target_name or ffi_target_name(spec)
    args = ", ".join(n for n, _ in operands)
    in_t = ", ".join(t for _, t in operands)
    out_t = ", ".join(result_types)
    out_t = out_t if len(result_types) == 1 else f"({out_t})"
    return (f"stablehlo.custom_call @{name}({args}) {{api_version = 4 : i32}} : ({in_t}) -> {out_t}")


def ffi_target_name(spec) -> str:
    """A stable FFI target name per specialization: ``tlaloc_<kernel>_<hash of its PTX>``."""
    import hashlib
    return f"tlaloc_{spec.name}_{hashlib.sha256(spec.ptx.encode()).hexdigest()[:12]}"


registry = KernelRegistry()
