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

One thread owns the engine (:mod:`._engine_loop`); handlers await per-request asyncio
queues it feeds. Tokenising and chat templating run in worker threads, never on the event
loop (detokenising stays on it: about 40 us a token at worst, less than a thread hop). A
client that disconnects has its requests cancelled, which frees their KV pages, and the
rest of a multi-prompt request is not submitted. Every error is a 4xx/5xx with
``{"error": {"message", "type", "param", "code"}}``; client input never causes a 5xx, and
one bad request never stops the server. What one request may ask for is bounded by
:class:`~tlaloc.serving.limits.ServerLimits`; transport limits are in :mod:`._http`. With
``api_key`` set, every path but ``/health`` needs ``Authorization: Bearer KEY``.
"""
from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import sys
import time
import uuid

import anyio.to_thread
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from . import _prompts
from ._logprobs import TokenText, chat_logprobs, completion_logprobs
from ._engine_loop import EngineRunner
from ._generation import ClientGone, Generation
from ._http import Gate, protocol_with_header_timeout
from .limits import ServerLimits
from .metrics import CONTENT_TYPE, ServerMetrics
from .openai_schema import (ChatCompletionRequest, CompletionRequest, EmbeddingRequest, OpenAIError,
                            parse, refuse_unsupported)

log = logging.getLogger("tlaloc.serving")
_DEFAULT_MAX_TOKENS = 16                   # OpenAI's default for /v1/completions (null means the default)
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def create_app(engine, *, api_key: str | None = None, limits: ServerLimits | None = None,
               embed_window_s: float = 0.002, embed_max_batch: int = 64) -> FastAPI:
    """A FastAPI app serving ``engine``; its lifespan starts and stops the engine thread.

    ``limits`` (default ``ServerLimits()``) bounds what one request may ask for; see
    :mod:`tlaloc.serving.limits`.
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
    api = _Api(engine, runner, limits, created=int(time.time()))

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


async def _off_loop(fn, *args, **kwargs):
    """Run CPU-heavy request work (tokenising, templating) in a worker thread, not on the event loop."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


class _Api:
    """The generation and embedding endpoints (the routes above are thin shims)."""

    def __init__(self, engine, runner: EngineRunner, limits: ServerLimits, created: int):
        self.engine, self.runner, self.limits, self.created = engine, runner, limits, created
        self.tokenizer = engine.tokenizer
        self.token_text = TokenText(engine.tokenizer)
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

    def check_logprobs(self, top: int | None, param: str) -> None:
        """Refuse (400, ``param``) log-probabilities this engine's programs cannot give."""
        if top is None:
            return
        most = int(getattr(self.engine, "max_logprobs", 0) or 0)
        if not most:
            raise OpenAIError(400, f"{param}: the artifact '{self.engine.model_name}' was exported without "
                                   f"log-probability outputs (top_logprobs=0, or an older tlaloc); re-export it "
                                   f"with `tlaloc export --top-logprobs 20` to use '{param}'",
                              param=param, code="unsupported_parameter")
        if top > most:
            raise OpenAIError(400, f"'{param}' is {top}; this artifact returns at most {most} top log-probabilities "
                                   f"per token (re-export with a larger --top-logprobs)", param=param,
                              code="invalid_value")

    # -- completions and chat ------------------------------------------------------------------
    async def completions(self, request: Request):
        body = parse(CompletionRequest, await request.body())
        self.check_model(body.model)
        refuse_unsupported(body)
        self.check_kind("decoder", "/v1/completions")
        self.check_logprobs(body.logprobs, "logprobs")
        self.limits.check_choices(_prompts.prompt_count(body.prompt), body.n)
        prompts = await _off_loop(_prompts.prompt_token_lists, self.tokenizer, body.prompt)
        max_tokens = _prompts.completion_budget(prompts, body.max_tokens, _prompts.max_sequence_tokens(self.engine),
                                                default=_DEFAULT_MAX_TOKENS)
        gen = await self._start(body, prompts, max_tokens, "cmpl", request, logprobs=body.logprobs)

        def logprobs(choice, entries):
            if body.logprobs is None:
                return None
            out, choice.text_offset = completion_logprobs(entries, self.token_text, choice.text_offset)
            return out

        def chunk(choice, text, reason, entries=()):
            return {"id": gen.request_id, "object": "text_completion", "created": int(time.time()),
                    "model": self.engine.model_name,
                    "choices": [{"index": choice.index, "text": text, "logprobs": logprobs(choice, entries),
                                 "finish_reason": reason}]}

        if body.stream:
            return self._stream(gen, body, chunk, first=None)
        choices = await self._collect(gen, request)
        return {"id": gen.request_id, "object": "text_completion", "created": int(time.time()),
                "model": self.engine.model_name, "usage": gen.usage(),
                "choices": [{"index": c.index, "text": c.text.text, "logprobs": logprobs(c, c.logprobs),
                             "finish_reason": c.finish_reason} for c in choices]}

    async def chat(self, request: Request):
        body = parse(ChatCompletionRequest, await request.body())
        self.check_model(body.model)
        refuse_unsupported(body)
        self.check_kind("decoder", "/v1/chat/completions")
        if body.top_logprobs is not None and not body.logprobs:
            raise OpenAIError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs",
                              code="invalid_value")
        top = (body.top_logprobs or 0) if body.logprobs else None
        self.check_logprobs(top, "top_logprobs" if body.top_logprobs else "logprobs")
        self.limits.check_choices(1, body.n)
        messages = [{"role": m.role, "content": m.text(), **({"name": m.name} if m.name else {})}
                    for m in body.messages]
        ids = await _off_loop(_prompts.chat_token_ids, self.engine, messages)
        explicit = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        max_tokens = _prompts.completion_budget(
            [ids], explicit, _prompts.max_sequence_tokens(self.engine), default=None, param="messages",
            tokens_param="max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens")
        gen = await self._start(body, [ids], max_tokens, "chatcmpl", request, logprobs=top)

        def logprobs(entries):
            return None if top is None else chat_logprobs(entries, self.token_text)

        def chunk(choice, text, reason, entries=()):
            delta = {} if text is None else {"content": text}
            return {"id": gen.request_id, "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": self.engine.model_name,
                    "choices": [{"index": choice.index, "delta": delta, "logprobs": logprobs(entries) if entries
                                 else None, "finish_reason": reason}]}

        def first(choice):
            out = chunk(choice, "", None)
            out["choices"][0]["delta"] = {"role": "assistant", "content": ""}
            return out

        if body.stream:
            return self._stream(gen, body, chunk, first=first)
        choices = await self._collect(gen, request)
        return {"id": gen.request_id, "object": "chat.completion", "created": int(time.time()),
                "model": self.engine.model_name, "usage": gen.usage(),
                "choices": [{"index": c.index, "message": {"role": "assistant", "content": c.text.text},
                             "logprobs": logprobs(c.logprobs), "finish_reason": c.finish_reason} for c in choices]}

    async def _start(self, body, prompts, max_tokens: int, prefix: str, request: Request,
                     logprobs: int | None = None) -> Generation:
        stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        self.limits.check_stop(stop)
        vocab = _prompts.vocab_size(self.tokenizer)
        top_k = None if body.top_k is None else min(body.top_k, vocab)      # >= vocabulary: all tokens
        sampling = dict(max_new_tokens=max_tokens, temperature=body.temperature, top_k=top_k,
                        top_p=body.top_p if body.top_p < 1.0 else None, seed=body.seed, stop_ids=self.stop_ids)
        if logprobs is not None:
            sampling["logprobs"] = logprobs
        gen = Generation(self.runner, self.tokenizer, request_id=f"{prefix}-{uuid.uuid4().hex}",
                         prompts=prompts, n=body.n, sampling=sampling, stop=stop)
        await gen.start(is_disconnected=request.is_disconnected)
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
                        yield _sse(first(choice))
                async for choice, delta, reason in gen.deltas():
                    entries = choice.take_logprobs()          # the logprobs of this chunk's tokens
                    if delta:
                        yield _sse(chunk(choice, delta, None, entries))
                        entries = []
                    if reason is not None:
                        yield _sse(chunk(choice, None if first else "", reason, entries))
                if include_usage:
                    final = chunk(gen.choices[0], "", None)
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
        if len(texts) > self.limits.max_embedding_inputs:
            raise OpenAIError(400, f"'input' holds {len(texts)} texts; at most {self.limits.max_embedding_inputs} "
                                   f"are allowed in one request", param="input", code="too_many_inputs")
        lengths = [len(e.ids) for e in await _off_loop(self.tokenizer.encode_batch, texts)]
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


def serve(artifact_dir: str, *, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
          log_level: str = "info", limits: ServerLimits | None = None, max_waiting: int = 1024) -> None:
    """Load ``artifact_dir`` with ``tlaloc.serving.Engine`` and serve it until interrupted."""
    from ._load import load_engine
    run_server(load_engine(artifact_dir, max_waiting=max_waiting), host=host, port=port, api_key=api_key,
               log_level=log_level, limits=limits)


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
                timeout_graceful_shutdown=5, http=protocol_with_header_timeout(limits.header_timeout_s),
                timeout_keep_alive=limits.keep_alive_s, h11_max_incomplete_event_size=limits.max_header_bytes)
