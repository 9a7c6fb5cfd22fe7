"""The library kernels: PTX templates specialized by shape (f32).

=====================  ===============================================  =================
template               computes                                         grid
=====================  ===============================================  =================
rmsnorm_fwd            y, rstd = RMSNorm(x, w)                          one block per row
rmsnorm_bwd_dx         dx of RMSNorm                                    one block per row
rmsnorm_bwd_dw         dw of RMSNorm                                    columns
rope                   rotary embedding (half-split layout)             (token, head)
cross_entropy_fwd      loss, lse of softmax cross-entropy               one block per row
cross_entropy_bwd      dlogits                                          one block per row
attention              softmax(q k^T * scale [causal]) v                (batch, head)
paged_attention        decode attention over a paged KV cache, GQA      (kv head, sequence)
=====================  ===============================================  =================

``reference.py`` holds the same computations in ``tlaloc.numpy``.
"""
from .rmsnorm import rmsnorm_fwd, rmsnorm_bwd_dx, rmsnorm_bwd_dw
from .rope import rope
from .cross_entropy import cross_entropy_fwd, cross_entropy_bwd
from .attention import attention
from .paged_attention import paged_attention
from . import reference

TEMPLATES = {t.name: t for t in (rmsnorm_fwd, rmsnorm_bwd_dx, rmsnorm_bwd_dw, rope, cross_entropy_fwd,
                                  cross_entropy_bwd, attention, paged_attention)}

__all__ = ["rmsnorm_fwd", "rmsnorm_bwd_dx", "rmsnorm_bwd_dw", "rope", "cross_entropy_fwd", "cross_entropy_bwd",
           "attention", "paged_attention", "reference", "TEMPLATES"]
