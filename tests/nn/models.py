"""A tiny transformer language model built from tl.nn (shared by the nn and optim tests)."""
from __future__ import annotations

import dataclasses

import numpy as np

from tlaloc import nn

_frozen = dataclasses.dataclass(frozen=True, eq=False, repr=False)


@_frozen
class TinyLM(nn.Module):
    """ids (B, T) -> logits (B, T, vocab)."""
    embed: nn.Embedding
    blocks: tuple
    norm: nn.Module
    head: nn.Linear

    def __init__(self, vocab=11, d=16, heads=4, kv_heads=2, layers=2, mlp="gelu", norm="layernorm",
                 dtype=np.float32, key=0):
        keys = nn._module.split_key(nn._module.as_key(key, "TinyLM"), layers + 2)
        blocks = tuple(nn.TransformerBlock(d, heads, kv_heads, mlp=mlp, norm=norm, dtype=dtype, key=k)
                       for k in keys[2:])
        final = nn.LayerNorm(d, dtype=dtype) if norm == "layernorm" else nn.RMSNorm(d, eps=1e-5, dtype=dtype)
        self._set(embed=nn.Embedding(vocab, d, dtype=dtype, key=keys[0]), blocks=blocks, norm=final,
                  head=nn.Linear(d, vocab, dtype=dtype, key=keys[1]))

    def __call__(self, ids):
        x = self.embed(ids)                      # (B, T, d)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))           # (B, T, vocab)


def lm_loss(model, batch):
    ids, targets = batch
    return nn.cross_entropy(model(ids), targets)
