"""``tlaloc.serving.runtime``: serving an artifact without the compiler.

Nothing in this folder imports the compiler (front ends, transforms, the emitter, jit,
the primitive table, ``tlaloc.numpy``, ``tlaloc.models``) or :mod:`tlaloc.serving.export`:
it imports numpy, safetensors, tokenizers and the PJRT client only.
``tests/serving/test_runtime_imports.py`` checks this as a folder rule on the import
graph and runs an artifact under an import guard.

- :mod:`.engine`: :class:`~tlaloc.serving.Engine`, loading and the streaming and offline APIs;
- :mod:`.scheduler`, :mod:`.batch`, :mod:`.requests`, :mod:`.page_allocator`: continuous
  batching (vLLM v1's ``schedule``/``update``), program inputs, request state, KV pages;
- :mod:`.executor`, :mod:`.device`: the programs, weights and KV pools on the PJRT device;
- :mod:`.loop`, :mod:`.engine_thread`: the one loop that routes events to the front doors,
  and the thread that owns the engine behind the HTTP server and Triton;
- :mod:`.scoring`, :mod:`.chat`, :mod:`.detok`: per-token log-probabilities, chat
  templates, incremental detokenisation.
"""
