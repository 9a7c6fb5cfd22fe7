"""Session fixtures for the serving tests: tiny checkpoints, their artifacts, engines and oracles.

Engines compile with ``fast_compile=True`` (XLA backend optimisation level 0: the same
programs, compiled several times faster); identical programs compile once per process.
"""
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """name -> (torch model, HF folder with a byte tokenizer), built once per session."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from models.helpers import torch_threads
    from .fixtures import CASES, make_tiny, write_byte_tokenizer
    built = {}

    def get(name):
        if name not in built:
            model_type, overrides = CASES[name]
            folder = str(tmp_path_factory.mktemp(f"hf_{name}"))
            with torch_threads(1):
                built[name] = (make_tiny(model_type, overrides, folder), folder)
            write_byte_tokenizer(folder)
        return built[name]
    return get


@pytest.fixture(scope="session")
def oracle(tiny):
    """name -> transformers' greedy ids (fp32, eager) for every prompt of PROMPTS."""
    from models.helpers import torch_threads
    from .fixtures import PROMPTS, hf_greedy
    cache = {}

    def get(name):
        if name not in cache:
            hf, _ = tiny(name)
            with torch_threads(1):
                cache[name] = [hf_greedy(hf, p) for p in PROMPTS]
        return cache[name]
    return get


@pytest.fixture(scope="session")
def artifact(tiny, tmp_path_factory):
    """(name, **export options) -> artifact directory, exported once per session."""
    from tlaloc.serving.export import export
    from .fixtures import LADDER
    made = {}

    def get(name, **options):
        key = (name, tuple(sorted(options.items())))
        if key not in made:
            _, folder = tiny(name)
            out = tmp_path_factory.mktemp("art") / name
            made[key] = str(out)
            export(folder, out, **{**LADDER, **options}, progress=False)
        return made[key]
    return get


@pytest.fixture(scope="session")
def engine(artifact):
    """(name, **export options) -> a fresh Engine on that artifact (programs shared per process)."""
    from tlaloc.serving import Engine

    def get(name, engine_options=None, **options):
        return Engine(artifact(name, **options), fast_compile=True, **(engine_options or {}))
    return get
