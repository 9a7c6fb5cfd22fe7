"""The character transformer of ``examples/train_charlm.py`` at its smallest (one pre-norm
block: grouped-query attention with RoPE, SwiGLU, RMSNorm; d_model 32), trained for a few
steps by the multi-process tests: the same windows in every run, so a run on one process is
the oracle of a run on two. Its vocabulary is padded to an even size (as vocabularies are
padded to a multiple of 64 for sharding), so that FSDP splits every parameter in two.
"""
import pathlib
import sys

import numpy as np

from tlaloc import optim
from tlaloc import random as tr

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
import train_charlm  # noqa: E402

BATCH = 8            # windows per step
BLOCK = 16           # characters per window
STEPS = 8


def data():
    """``(ids, targets, vocab size)``: every window of ``BLOCK`` characters of the first 8,000 of
    the corpus as (N, BLOCK) int32, the next characters as targets; the vocabulary rounded up to even."""
    text, vocab = train_charlm.load_corpus(max_chars=8000)
    stoi = {c: i for i, c in enumerate(vocab)}
    ids = np.array([stoi[c] for c in text], dtype=np.int32)
    starts = np.arange(len(ids) - BLOCK - 1)
    windows = starts[:, None] + np.arange(BLOCK)[None, :]
    return ids[windows], ids[windows + 1], len(vocab) + len(vocab) % 2


def schedule(n, steps=STEPS, seed=0):
    """The windows of each step's batch: ``steps`` arrays of ``BATCH`` indices below ``n``."""
    rng = np.random.default_rng(seed)
    return [rng.choice(n, BATCH, replace=False) for _ in range(steps)]


def init(vocab):
    """``(model, optimizer, optimizer state)``, the same in every process."""
    model = train_charlm.CharLM(vocab, d_model=32, num_heads=4, num_kv_heads=2, num_layers=1, key=tr.key(0))
    opt = optim.AdamW(lr=3e-3, weight_decay=1e-4)
    return model, opt, opt.init(model)


def loss_fn(model, ids, targets):
    return train_charlm.loss_fn(model, (ids, targets))
