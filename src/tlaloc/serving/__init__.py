"""``tlaloc.serving``: running models for users.

Two halves, kept apart so an artifact serves without the compiler:

* **export** (compiler side): :func:`tlaloc.serving.export.export` turns a Hugging Face
  folder or GGUF file into an artifact directory (manifest, one StableHLO program per
  bucket, safetensors weights, tokenizer).
* **runtime**: :class:`Engine` loads an artifact with PJRT and serves it: ``generate``,
  ``embed``, ``score`` (per-token log-probabilities, see :func:`perplexity`), and the
  streaming ``submit``/``step``/``cancel`` API with continuous batching, chunked
  prefill, paged KV and a prefix cache. It imports numpy, safetensors, tokenizers and
  the PJRT client only.

:mod:`tlaloc.serving.generate` is the eager NumPy reference the runtime is tested
against. Names load on first use, so ``from tlaloc.serving import Engine`` pulls in
the runtime and nothing else.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "Engine": ".engine", "GenerationResult": ".engine",
    "Event": ".scheduler",
    "ArtifactError": ".errors", "CapacityError": ".errors", "QueueFullError": ".errors",
    "ScoreResult": ".scoring", "perplexity": ".scoring", "greedy_agreement": ".scoring",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tlaloc.serving' has no attribute {name!r}")
    module = importlib.import_module(_EXPORTS[name], __name__)
    value = globals()[name] = getattr(module, name)
    return value


def __dir__():
    return sorted(__all__)
