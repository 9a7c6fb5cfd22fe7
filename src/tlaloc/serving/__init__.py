"""``tlaloc.serving``: running models for users.

Two halves, kept apart so an artifact serves without the compiler:

* **export** (:mod:`tlaloc.serving.export`, compiler side): :func:`~tlaloc.serving.export.export`
  turns a Hugging Face folder or GGUF file into an artifact directory (manifest, one
  StableHLO program per bucket, safetensors weights, tokenizer). Every serving module
  that needs the compiler is in that folder.
* **runtime** (:mod:`tlaloc.serving.runtime`): :class:`Engine` loads an artifact with PJRT
  and serves it: ``generate``, ``embed``, ``score`` (per-token log-probabilities, see
  :func:`perplexity`), and the streaming ``submit``/``step``/``cancel`` API with
  continuous batching, chunked prefill, paged KV and a prefix cache. It imports numpy,
  safetensors, tokenizers and the PJRT client only.

The front doors sit on the runtime: the HTTP server (:mod:`tlaloc.serving.server`) and
the Triton backend (:mod:`tlaloc.serving.triton`). Both halves share the artifact's
format (:mod:`tlaloc.serving.manifest`) and errors (:mod:`tlaloc.serving.errors`).
:mod:`tlaloc.serving.export.reference` is the eager NumPy reference the runtime is tested
against. Names load on first use, so ``from tlaloc.serving import Engine`` pulls in the
runtime and nothing else.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "Engine": ".runtime.engine", "GenerationResult": ".runtime.engine",
    "Event": ".runtime.requests", "TokenLogprobs": ".runtime.requests",
    "ArtifactError": ".errors", "CapacityError": ".errors", "QueueFullError": ".errors",
    "ScoreResult": ".runtime.scoring", "perplexity": ".runtime.scoring", "greedy_agreement": ".runtime.scoring",
    "token_logprobs": ".runtime.scoring",
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
