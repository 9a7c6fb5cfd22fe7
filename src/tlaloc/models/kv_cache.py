"""Where a decoder's keys and values live between calls: the attention backends.

A decoder layer hands its new keys and values to a backend, which stores them and
attends its queries against everything stored so far::

    out = backend.attend(layer, q, k, v, positions, window)   # (B, T, H, E)

Two backends exist now:

- :class:`NoCache` attends within the call only (a whole-sequence forward).
- :class:`KVCache` keeps contiguous per-layer buffers for eager decode: the key of
  position ``p`` of row ``b`` lives in slot ``[b, p]``.

A later export step swaps in a paged backend built from the ``kv_cache_write`` and
``paged_attention`` primitives; the model code does not change.
"""
from __future__ import annotations

import numpy as np

from .layers import attention


class NoCache:
    """Attend over the keys of this call only (prefill with nothing kept)."""

    def attend(self, layer: int, q, k, v, positions, window: int | None):
        """q (B, T, H, E), k and v (B, T, K, E), positions (B, T) -> (B, T, H, E)."""
        return attention(q, k, v, positions, positions, window=window)


class KVCache:
    """Contiguous eager KV cache: per layer, k and v of shape (B, max_len, K, E).

    Row ``b``'s positions must be written in order from 0 (prefill, then one token
    at a time); rows may be at different lengths. Writing past ``max_len`` raises
    ``ValueError`` naming the position and the capacity.
    """

    def __init__(self, num_layers: int, batch: int, max_len: int, num_kv_heads: int, head_dim: int,
                 dtype=np.float32):
        shape = (batch, max_len, num_kv_heads, head_dim)
        self.k = [np.zeros(shape, dtype) for _ in range(num_layers)]        # L x (B, S_max, K, E)
        self.v = [np.zeros(shape, dtype) for _ in range(num_layers)]        # L x (B, S_max, K, E)
        self.max_len = max_len

    @classmethod
    def for_config(cls, cfg, batch: int, max_len: int) -> "KVCache":
        return cls(cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim)

    def attend(self, layer: int, q, k, v, positions, window: int | None):
        """Store k, v (B, T, K, E) at ``positions`` (B, T), then attend q (B, T, H, E) -> (B, T, H, E)."""
        positions = np.asarray(positions)
        end = int(positions.max()) + 1
        if end > self.max_len:
            raise ValueError(f"KVCache: position {end - 1} is past the cache capacity max_len={self.max_len}; "
                             "allocate a larger cache")
        rows = np.arange(positions.shape[0])[:, None]                       # (B, 1)
        self.k[layer][rows, positions] = k                                  # (B, T, K, E) into slots
        self.v[layer][rows, positions] = v
        keys = self.k[layer][:, :end]                                       # (B, S, K, E)
        values = self.v[layer][:, :end]                                     # (B, S, K, E)
        k_pos = np.broadcast_to(np.arange(end), (positions.shape[0], end))  # (B, S)
        return attention(q, keys, values, positions, k_pos, window=window)
