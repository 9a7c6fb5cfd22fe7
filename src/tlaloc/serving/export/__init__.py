"""``tlaloc.serving.export``: the compiler side of serving, a model -> an artifact.

    from tlaloc.serving.export import export
    export("SmolLM2.gguf", "smol-art", batch=(1, 2, 4, 8), context=(64, 256, 1024))

Every module that needs the compiler (front ends, the StableHLO emitter, specialisation,
``tlaloc.numpy``, ``tlaloc.models``) lives in this folder, and only here: the runtime
(:mod:`tlaloc.serving.runtime`) and the front doors serve an artifact without it.

- :mod:`.artifact`: :func:`export`, writing the artifact directory atomically;
- :mod:`.programs`: the programs' slots and the functions traced into StableHLO;
- :mod:`.paged_backend`: the paged KV attention backend the decoders are traced with;
- :mod:`.sampling`: token sampling and log-probabilities inside the programs;
- :mod:`.weights_format`: how weights are stored (fused, quantized) and read back;
- :mod:`.reference`: eager NumPy generation, the oracle the runtime is tested against.
"""
from .artifact import ExportSummary, export

__all__ = ["ExportSummary", "export"]
