"""``tlaloc.serving.server``: the OpenAI-compatible HTTP server (``tlaloc serve``).

    from tlaloc.serving.server import ServerLimits, create_app
    uvicorn.run(create_app(engine, limits=ServerLimits(max_n=4)))

- :mod:`.app`: :func:`create_app` (routes, error bodies), :func:`serve`, :func:`run_server`;
- :mod:`.api`: the completions, chat and embeddings endpoints;
- :mod:`.choices`: one request's choices, submitted to the engine thread and streamed back;
- :mod:`.prompts`, :mod:`.logprobs`, :mod:`.openai_schema`: request fields in, response fields out;
- :mod:`.limits`, :mod:`.transport`, :mod:`.metrics`: what a client may ask for, the
  transport guards (API key, body and header limits), Prometheus metrics.

The engine runs on the runtime's engine thread (:mod:`tlaloc.serving.runtime.engine_thread`).
"""
from .app import create_app, run_server, serve
from .limits import ServerLimits

__all__ = ["ServerLimits", "create_app", "run_server", "serve"]
