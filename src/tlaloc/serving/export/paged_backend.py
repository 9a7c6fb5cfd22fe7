"""The paged attention backend the export traces the decoders with.

It has the interface of :mod:`tlaloc.models.kv_cache` (``attend(layer, q, k, v,
positions, window)``), so the model code runs unchanged: each layer's new keys and
values go into that layer's pages with ``kv_cache_write`` at ``slot_mapping``, and the
queries attend over the row's pages with ``paged_attention``. The updated pools are
read back with :meth:`PagedBackend.pools` after the forward pass (they are outputs of
the program, donated from its inputs).

Layout: a key pool and a value pool of (L, P, BS, K, E) (:meth:`PagedBackend.stacked`):
layer ``l`` has P pages of BS token slots. Token ``p`` of a sequence lives in page
``block_table[p // BS]`` at offset ``p % BS``, i.e. slot ``page * BS + p % BS`` of each
layer's pages. In the program the pools are viewed as (L * P, BS, K, E) (a reshape XLA
makes a bitcast) and layer ``l`` passes ``page_offset = l * P`` to both primitives, so
the slots and block tables are the same for every layer. Bfloat16 pools, and the
artifacts exported before the stacked pools, have one key and one value pool (P, BS, K, E)
per layer: the plain constructor (see :mod:`tlaloc.serving.export.programs` for why).
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
        self._stacked = None                  # (L, P) when the pools stack every layer's pages

    @classmethod
    def stacked(cls, k_pool, v_pool, block_tables, seq_lens, slot_mapping) -> "PagedBackend":
        """The backend of one key and one value pool (L, P, BS, K, E) for all L layers."""
        L, P = k_pool.shape[:2]
        flat = (L * P,) + tuple(k_pool.shape[2:])
        self = cls([tnp.reshape(k_pool, flat)], [tnp.reshape(v_pool, flat)], block_tables, seq_lens, slot_mapping)
        self._stacked = (L, P)
        return self

    def _where(self, layer: int) -> tuple:
        """(index into k_pools/v_pools, first page of the layer's pages there)."""
        if self._stacked is None:
            return layer, 0
        return 0, layer * self._stacked[1]

    def attend(self, layer: int, q, k, v, positions, window: int | None):
        """Store k, v (B, T, K, E) at this step's slots, then attend q (B, T, H, E) -> (B, T, H, E)."""
        B, T, K, E = k.shape
        i, first = self._where(layer)
        slots = tnp.reshape(self.slot_mapping, (B * T,))                               # (B*T,)
        self.k_pools[i] = kv_cache_write(self.k_pools[i], tnp.reshape(k, (B * T, K, E)), slots, page_offset=first)
        self.v_pools[i] = kv_cache_write(self.v_pools[i], tnp.reshape(v, (B * T, K, E)), slots, page_offset=first)
        kernel = T == 1 and kernel_op_wanted("paged_attention")                    # decode: the CPU kernel
        return paged_attention(q, self.k_pools[i], self.v_pools[i], self.block_tables, self.seq_lens, positions,
                               window=window, kernel=kernel, page_offset=first)        # (B, T, H, E)

    def pools(self) -> list:
        """The updated pools in the program's output order: ``[k, v]`` (L, P, BS, K, E) when
        stacked, else ``[k_0, v_0, k_1, v_1, ...]``."""
        if self._stacked is not None:
            shape = self._stacked + tuple(self.k_pools[0].shape[1:])
            return [tnp.reshape(self.k_pools[0], shape), tnp.reshape(self.v_pools[0], shape)]
        return [p for pair in zip(self.k_pools, self.v_pools) for p in pair]
