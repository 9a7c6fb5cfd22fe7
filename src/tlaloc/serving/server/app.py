"""An OpenAI-compatible HTTP server over a ``tlaloc.serving.Engine``.

    TLALOC_API_KEY=KEY tlaloc serve ARTIFACT [--host 127.0.0.1] [--port 8000] [limits]

or, in Python, ``uvicorn.run(create_app(engine))``. Endpoints:

=============================  =====================================================
``POST /v1/completions``       text completion; ``stream: true`` answers with SSE
``POST /v1/chat/completions``  chat, rendered with the engine's chat template
``POST /v1/embeddings``        encoder artifacts; concurrent requests are batched
``GET /v1/models``             the one model this server holds
``GET /health``                200 while the engine thread runs (never needs a key)
``GET /metrics``               Prometheus text format (see :mod:`.metrics`)
=============================  =====================================================

One thread owns the engine (:mod:`tlaloc.serving.runtime.engine_thread`); handlers await
per-request asyncio queues it feeds; the endpoints are in :mod:`.api`. Tokenising and chat
templating run in worker threads, never on the event loop (detokenising stays on it: about
40 us a token at worst, less than a thread hop). A
client that disconnects has its requests cancelled, which frees their KV pages, and the
rest of a multi-prompt request is not submitted. Every error is a 4xx/5xx with
``{"error": {"message", "type", "param", "code"}}``; client input never causes a 5xx, and
one bad request never stops the server. What one request may ask for is bounded by
:class:`~tlaloc.serving.server.limits.ServerLimits`; transport limits are in
:mod:`.transport`. With ``api_key`` set, every path but ``/health`` needs ``Authorization: Bearer KEY``.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from ..runtime.engine_thread import EngineRunner
from .api import Api
from .choices import ClientGone
from .limits import ServerLimits
from .metrics import CONTENT_TYPE, ServerMetrics
from .openai_schema import OpenAIError
from .transport import Gate, protocol_with_header_timeout

log = logging.getLogger("tlaloc.serving")


def create_app(engine, *, api_key: str | None = None, limits: ServerLimits | None = None,
               embed_window_s: float = 0.002, embed_max_batch: int = 64) -> FastAPI:
    """A FastAPI app serving ``engine``; its lifespan starts and stops the engine thread.

    ``limits`` (default ``ServerLimits()``) bounds what one request may ask for; see
    :mod:`tlaloc.serving.server.limits`.
    """
    limits = limits or ServerLimits()
    runner_box: dict = {}
    metrics = ServerMetrics(lambda: runner_box["runner"].snapshot() if "runner" in runner_box else {})
    runner = EngineRunner(engine, metrics, embed_window_s=embed_window_s, embed_max_batch=embed_max_batch)
    runner_box["runner"] = runner

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        runner.start()
        try:
            yield
        finally:
            runner.stop()

    app = FastAPI(title="tlaloc", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.runner, app.state.metrics, app.state.engine = runner, metrics, engine
    app.add_middleware(Gate, api_key=api_key, metrics=metrics, limits=limits)
    api = Api(engine, runner, limits, created=int(time.time()))

    @app.exception_handler(OpenAIError)
    async def _openai_error(_request, exc: OpenAIError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return JSONResponse(OpenAIError(exc.status_code, str(exc.detail), code=code).body(),
                            status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _crash(_request, exc: Exception):
        error = OpenAIError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error",
                            code="internal_error")
        return JSONResponse(error.body(), status_code=500)

    @app.get("/health")
    async def health():
        if not runner.alive:
            raise OpenAIError(503, runner.failure or "the engine thread is not running",
                              type="server_error", code="engine_unavailable")
        return {"status": "ok", "model": engine.model_name, "kind": engine.kind, **runner.snapshot()}

    @app.get("/metrics")
    async def prometheus():
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [api.model_card()]}

    @app.get("/v1/models/{model:path}")
    async def model(model: str):
        api.check_model(model)
        return api.model_card()

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _guarded(api.completions, request)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await _guarded(api.chat, request)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        return await _guarded(api.embeddings, request)

    return app


async def _guarded(handler, request: Request):
    """Run a route; a client gone is one log line, any other failure a 500 body (never a reset connection).

    Starlette's catch-all handler answers a 500 and then re-raises, so uvicorn logs a traceback
    and drops the keep-alive connection; catching here keeps the connection and the log short.
    """
    try:
        return await handler(request)
    except OpenAIError:
        raise
    except (ClientDisconnect, ClientGone):
        log.info("%s %s: the client disconnected before the answer; its work was cancelled",
                 request.method, request.url.path)
        return JSONResponse(OpenAIError(499, "the client closed the request", code="client_closed").body(),
                            status_code=499)
    except Exception as exc:  # noqa: BLE001 - a bug; answer it as one
        log.exception("%s %s failed", request.method, request.url.path)
        raise OpenAIError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error",
                          code="internal_error") from None


def serve(artifact_dir: str, *, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
          log_level: str = "info", limits: ServerLimits | None = None, max_waiting: int = 1024,
          cpu_kernels: bool | str = "auto", activations: str = "float32", async_scheduling: bool = True) -> None:
    """Load ``artifact_dir`` with ``tlaloc.serving.Engine`` and serve it until interrupted.

    ``max_waiting``, ``cpu_kernels``, ``activations`` and ``async_scheduling`` are the Engine's
    (``tlaloc serve``'s ``--max-waiting``, ``--cpu-kernels``, ``--activations``,
    ``--no-async-scheduling``); a bad value raises ArgumentError before anything listens."""
    from .. import Engine
    engine = Engine(artifact_dir, max_waiting=max_waiting, cpu_kernels=cpu_kernels, activations=activations,
                    async_scheduling=async_scheduling)
    run_server(engine, host=host, port=port, api_key=api_key, log_level=log_level, limits=limits)


def run_server(engine, *, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
               log_level: str = "info", limits: ServerLimits | None = None) -> None:
    """Serve ``engine`` with uvicorn until interrupted (Ctrl-C stops the engine thread too).

    Connections: h11 with a header timeout, keep-alive and header-size limits from ``limits``.
    """
    import uvicorn
    limits = limits or ServerLimits()
    if host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        print(f"tlaloc serve: warning: listening on {host} without --api-key; anyone who can reach "
              f"this address can use the model", file=sys.stderr)
    uvicorn.run(create_app(engine, api_key=api_key, limits=limits), host=host, port=port, log_level=log_level,
                timeout_graceful_shutdown=5, http=protocol_with_header_timeout(limits.header_timeout_s, limits.max_header_bytes),
                timeout_keep_alive=limits.keep_alive_s, h11_max_incomplete_event_size=limits.max_header_bytes)
