"""Helpers for the model tests: skipping on a missing package, finding packaged weights, torch threads."""
import contextlib
import importlib.util

import pytest


def require(*names):
    """Skip the calling test (or module) naming each missing package."""
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (pip install -e '.[test]')", allow_module_level=True)


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
