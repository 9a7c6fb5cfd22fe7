"""An OpenAI-compatible HTTP server over a ``tlaloc.serving.Engine``.

    tlaloc serve ARTIFACT [--host 127.0.0.1] [--port 8000] [--api-key KEY]

or, in Python, ``uvicorn.run(create_app(engine))``. Endpoints:

=============================  =====================================================
``POST /v1/completions``       text completion; ``stream: true`` answers with SSE
``POST /v1/chat/completions``  chat, rendered with the engine's chat template
``POST /v1/embeddings``        encoder artifacts; concurrent requests are batched
``GET /v1/models``             the one model this server holds
``GET /health``                200 while the engine thread runs (never needs a key)
``GET /metrics``               Prometheus text format (see :mod:`.metrics`)
=============================  =====================================================

One thread owns the engine (:mod:`._engine_loop`); handlers await per-request asyncio
queues it feeds. A client that disconnects has its requests cancelled, which frees
their KV pages. Every error is a 4xx/5xx with ``{"error": {"message", "type", "param",
"code"}}``, and one bad request never stops the server. With ``api_key`` set, every
path but ``/health`` needs ``Authorization: Bearer KEY``.
"""
from __future__ import annotations

import base64
import contextlib
import hmac
import json
import sys
import time
import uuid

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import _prompts
from ._engine_loop import EngineRunner
from ._generation import ClientGone, Generation
from .metrics import CONTENT_TYPE, ServerMetrics
from .openai_schema import (ChatCompletionRequest, CompletionRequest, EmbeddingRequest, OpenAIError,
                            parse, refuse_unsupported)

_ENDPOINTS = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/models", "/health",
              "/metrics")
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def create_app(engine, *, api_key: str | None = None, embed_window_s: float = 0.002,
               embed_max_batch: int = 64) -> FastAPI:
    """A FastAPI app serving ``engine``; its lifespan starts and stops the engine thread."""
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
    app.add_middleware(_Gate, api_key=api_key, metrics=metrics)
    api = _Api(engine, runner, created=int(time.time()))

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
        return await api.completions(request)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await api.chat(request)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        return await api.embeddings(request)

    return app


class _Api:
    """The generation and embedding endpoints (the routes above are thin shims)."""

    def __init__(self, engine, runner: EngineRunner, created: int):
        self.engine, self.runner, self.created = engine, runner, created
        self.tokenizer = engine.tokenizer
        self.stop_ids = tuple(int(i) for i in (getattr(engine, "eos_token_ids", None) or ()))

    def model_card(self) -> dict:
        return {"id": self.engine.model_name, "object": "model", "created": self.created,
                "owned_by": "tlaloc", "kind": self.engine.kind, "max_model_len": self.engine.max_context}

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.engine.model_name:
            raise OpenAIError(404, f"the model '{name}' does not exist; this server serves "
                                   f"'{self.engine.model_name}'", param="model", code="model_not_found")

    def check_kind(self, kind: str, endpoint: str) -> None:
        if self.engine.kind != kind:
            raise OpenAIError(400, f"{endpoint} needs {_article(kind)} artifact; '{self.engine.model_name}' "
                                   f"is {_article(self.engine.kind)}", param="model", code="wrong_model_kind")

    # -- completions and chat ------------------------------------------------------------------
    async def completions(self, request: Request):
        body = parse(CompletionRequest, await request.body())
        self.check_model(body.model)
        refuse_unsupported(body)
        self.check_kind("decoder", "/v1/completions")
        prompts = _prompts.prompt_token_lists(self.tokenizer, body.prompt)
        _prompts.check_capacity(prompts, body.max_tokens, self.engine.max_context)
        gen = await self._start(body, prompts, body.max_tokens, "cmpl")

        def chunk(index, text, reason):
            return {"id": gen.request_id, "object": "text_completion", "created": int(time.time()),
                    "model": self.engine.model_name,
                    "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": reason}]}

        if body.stream:
            return self._stream(gen, body, chunk, first=None)
        choices = await self._collect(gen, request)
        return {"id": gen.request_id, "object": "text_completion", "created": int(time.time()),
                "model": self.engine.model_name, "usage": gen.usage(),
                "choices": [{"index": c.index, "text": c.text.text, "logprobs": None,
                             "finish_reason": c.finish_reason} for c in choices]}

    async def chat(self, request: Request):
        body = parse(ChatCompletionRequest, await request.body())
        self.check_model(body.model)
        refuse_unsupported(body)
        self.check_kind("decoder", "/v1/chat/completions")
        messages = [{"role": m.role, "content": m.text(), **({"name": m.name} if m.name else {})}
                    for m in body.messages]
        text = _prompts.chat_prompt(self.engine, messages)
        ids = list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        _prompts.check_token_ids(self.tokenizer, ids, "the rendered chat", "messages")
        max_tokens = body.max_completion_tokens or body.max_tokens or self.engine.max_context - len(ids)
        if max_tokens < 1:
            max_tokens = 1                      # so check_capacity names the real problem: the prompt
        _prompts.check_capacity([ids], max_tokens, self.engine.max_context, param="messages")
        gen = await self._start(body, [ids], max_tokens, "chatcmpl")

        def chunk(index, text, reason):
            delta = {} if text is None else {"content": text}
            return {"id": gen.request_id, "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": self.engine.model_name,
                    "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}]}

        def first(index):
            out = chunk(index, "", None)
            out["choices"][0]["delta"] = {"role": "assistant", "content": ""}
            return out

        if body.stream:
            return self._stream(gen, body, chunk, first=first)
        choices = await self._collect(gen, request)
        return {"id": gen.request_id, "object": "chat.completion", "created": int(time.time()),
                "model": self.engine.model_name, "usage": gen.usage(),
                "choices": [{"index": c.index, "message": {"role": "assistant", "content": c.text.text},
                             "logprobs": None, "finish_reason": c.finish_reason} for c in choices]}

    async def _start(self, body, prompts, max_tokens: int, prefix: str) -> Generation:
        stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        if len(stop) > 4:
            raise OpenAIError(400, f"'stop' holds {len(stop)} strings; at most 4 are allowed", param="stop",
                              code="invalid_value")
        sampling = dict(max_new_tokens=max_tokens, temperature=body.temperature, top_k=body.top_k,
                        top_p=body.top_p if body.top_p < 1.0 else None, seed=body.seed, stop_ids=self.stop_ids)
        gen = Generation(self.runner, self.tokenizer, request_id=f"{prefix}-{uuid.uuid4().hex}",
                         prompts=prompts, n=body.n, sampling=sampling, stop=stop)
        await gen.start()
        return gen

    async def _collect(self, gen: Generation, request: Request):
        try:
            async for _ in gen.deltas(is_disconnected=request.is_disconnected):
                pass
        except ClientGone:
            return []                           # nobody to answer; close() cancelled the rest
        finally:
            gen.close()
        return gen.choices

    def _stream(self, gen: Generation, body, chunk, first) -> StreamingResponse:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        async def events():
            try:
                if first is not None:
                    for choice in gen.choices:
                        yield _sse(first(choice.index))
                async for choice, delta, reason in gen.deltas():
                    if delta:
                        yield _sse(chunk(choice.index, delta, None))
                    if reason is not None:
                        yield _sse(chunk(choice.index, None if first else "", reason))
                if include_usage:
                    final = chunk(0, "", None)
                    final["choices"], final["usage"] = [], gen.usage()
                    yield _sse(final)
            except OpenAIError as exc:
                yield _sse(exc.body())
            finally:
                gen.close()                     # a disconnect lands here too: cancel, free pages
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers=_SSE_HEADERS)

    # -- embeddings ------------------------------------------------------------------------------
    async def embeddings(self, request: Request):
        body = parse(EmbeddingRequest, await request.body())
        self.check_model(body.model)
        self.check_kind("encoder", "/v1/embeddings")
        texts = [body.input] if isinstance(body.input, str) else list(body.input)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise OpenAIError(400, "'input' must be a string or a non-empty list of strings (token-id input "
                                   "is not supported for embeddings)", param="input", code="invalid_value")
        if any(not t for t in texts):
            raise OpenAIError(400, "'input' holds an empty string", param="input", code="invalid_value")
        lengths = [len(e.ids) for e in self.tokenizer.encode_batch(texts)]
        for index, length in enumerate(lengths):
            if length > self.engine.max_context:
                raise OpenAIError(400, f"input[{index}] has {length} tokens; this model takes at most "
                                       f"{self.engine.max_context}", param="input", code="context_length_exceeded")
        try:
            vectors = await self.runner.embed(texts)                          # (n, dim)
        except ValueError as exc:
            raise OpenAIError(400, str(exc), param="input", code="invalid_input") from None
        except RuntimeError as exc:
            raise OpenAIError(503, str(exc), type="server_error", code="engine_unavailable") from None
        if body.dimensions is not None and body.dimensions != vectors.shape[1]:
            raise OpenAIError(400, f"'dimensions' is {body.dimensions}, but this model's embeddings have "
                                   f"{vectors.shape[1]}; omit it", param="dimensions", code="invalid_value")
        data = [{"object": "embedding", "index": i, "embedding": _encode_vector(v, body.encoding_format)}
                for i, v in enumerate(vectors)]
        total = int(sum(lengths))
        return {"object": "list", "data": data, "model": self.engine.model_name,
                "usage": {"prompt_tokens": total, "total_tokens": total}}


def _article(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"


def _encode_vector(vector: np.ndarray, encoding: str):
    if encoding == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector]


def _sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


class _Gate:
    """ASGI middleware: the API key check (all paths but /health) and the request counter."""

    def __init__(self, app, api_key: str | None, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics
        self.expected = f"Bearer {api_key}".encode() if api_key else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = {"code": 0}

        async def counting_send(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        path = scope.get("path", "")
        try:
            if self.expected and path != "/health" and not self._authorized(scope):
                error = OpenAIError(401, "missing or wrong API key: send 'Authorization: Bearer KEY'",
                                    code="invalid_api_key")
                await JSONResponse(error.body(), status_code=401,
                                   headers={"WWW-Authenticate": "Bearer"})(scope, receive, counting_send)
            else:
                await self.app(scope, receive, counting_send)
        finally:
            endpoint = path if path in _ENDPOINTS else ("/v1/models" if path.startswith("/v1/models/")
                                                        else "other")
            self.metrics.http_requests.labels(endpoint=endpoint, status=str(status["code"])).inc()

    def _authorized(self, scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                return hmac.compare_digest(value, self.expected)
        return False


def serve(artifact_dir: str, *, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
          log_level: str = "info") -> None:
    """Load ``artifact_dir`` with ``tlaloc.serving.Engine`` and serve it until interrupted."""
    from ._load import load_engine
    run_server(load_engine(artifact_dir), host=host, port=port, api_key=api_key, log_level=log_level)


def run_server(engine, *, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
               log_level: str = "info") -> None:
    """Serve ``engine`` with uvicorn until interrupted (Ctrl-C stops the engine thread too)."""
    import uvicorn
    if host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        print(f"tlaloc serve: warning: listening on {host} without --api-key; anyone who can reach "
              f"this address can use the model", file=sys.stderr)
    uvicorn.run(create_app(engine, api_key=api_key), host=host, port=port, log_level=log_level,
                timeout_graceful_shutdown=5)
