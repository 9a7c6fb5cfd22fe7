"""The paged attention backend the export traces the decoders with.

It has the interface of :mod:`tlaloc.models.kv_cache` (``attend(layer, q, k, v,
positions, window)``), so the model code runs unchanged: each layer's new keys and
values go into that layer's pools with ``kv_cache_write`` at ``slot_mapping``, and the
queries attend over the row's pages with ``paged_attention``. The updated pools are
read back from ``k_pools``/``v_pools`` after the forward pass (they are outputs of the
program, donated from its inputs).

Layout: per layer, one key pool and one value pool, each (P, BS, K, E): P pages of
BS token slots. Token ``p`` of a sequence lives in page ``block_table[p // BS]`` at
offset ``p % BS``, i.e. slot ``page * BS + p % BS``.
"""
from __future__ import annotations

from ... import numpy as tnp
from ..._prims.serving import kv_cache_write, paged_attention
from ..._prims.stored_matmul import kernel_op_wanted


class PagedBackend:
    """Paged KV storage for one traced step.

    k_pools, v_pools: one (P, BS, K, E) array per layer; block_tables (B, M) int32;
    seq_lens (B,) int32 (keys valid after this step's writes); slot_mapping (B, T) int32
    (-1 for padding tokens).
    """

    def __init__(self, k_pools, v_pools, block_tables, seq_lens, slot_mapping):
        self.k_pools = list(k_pools)
        self.v_pools = list(v_pools)
        self.block_tables = block_tables
        self.seq_lens = seq_lens
        self.slot_mapping = slot_mapping

    def attend(self, layer: int, q, k, v, positions, window: int | None):
        """Store k, v (B, T, K, E) at this step's slots, then attend q (B, T, H, E) -> (B, T, H, E)."""
        B, T, K, E = k.shape
        slots = tnp.reshape(self.slot_mapping, (B * T,))                               # (B*T,)
        self.k_pools[layer] = kv_cache_write(self.k_pools[layer], tnp.reshape(k, (B * T, K, E)), slots)
        self.v_pools[layer] = kv_cache_write(self.v_pools[layer], tnp.reshape(v, (B * T, K, E)), slots)
        kernel = T == 1 and kernel_op_wanted("paged_attention")                    # decode: the CPU kernel
        return paged_attention(q, self.k_pools[layer], self.v_pools[layer], self.block_tables,
                               self.seq_lens, positions, window=window, kernel=kernel)  # (B, T, H, E)
