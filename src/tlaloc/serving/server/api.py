"""The OpenAI endpoints behind the server's routes: completions, chat completions, embeddings.

Each handler parses and checks the body (:mod:`.openai_schema`, :mod:`.limits`), turns the
prompt into token ids in a worker thread (:mod:`.prompts`), submits its choices to the
engine thread (:class:`~tlaloc.serving.server.choices.Generation`) and answers with one
JSON body or a stream of server-sent events. Log-probabilities are formatted by
:mod:`.logprobs`.
"""
from __future__ import annotations

import base64
import functools
import json
import time
import uuid

import anyio.to_thread
import numpy as np
from fastapi import Request
from fastapi.responses import StreamingResponse

from . import prompts as _prompts
from .choices import ClientGone, Generation
from .limits import ServerLimits
from .logprobs import TokenText, chat_logprobs, completion_logprobs
from .openai_schema import ChatCompletionRequest, CompletionRequest, EmbeddingRequest, OpenAIError, parse, \
    refuse_unsupported

_DEFAULT_MAX_TOKENS = 16                   # OpenAI's default for /v1/completions (null means the default)
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def _off_loop(fn, *args, **kwargs):
    """Run CPU-heavy request work (tokenising, templating) in a worker thread, not on the event loop."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


class Api:
    """The generation and embedding endpoints (the routes above are thin shims)."""

    def __init__(self, engine, runner, limits: ServerLimits, created: int):
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
        self.limits.check_stop(_stop_list(body))                          # before any tokenising
        prompts = await _off_loop(_prompts.prompt_token_lists, self.tokenizer, body.prompt)
        max_tokens = _prompts.completion_budget(prompts, body.max_tokens, _prompts.max_sequence_tokens(self.engine),
                                                default=_DEFAULT_MAX_TOKENS)
        gen = await self._start(body, prompts, max_tokens, "cmpl", request, logprobs=body.logprobs)

        def logprobs(choice, entries):
            if body.logprobs is None:
                return None
            out, choice.text_offset, choice.text_pending = completion_logprobs(
                entries, self.token_text, choice.text_offset, choice.text_pending)
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
        self.limits.check_stop(_stop_list(body))                          # before any tokenising
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
        stop = _stop_list(body)                                           # checked by the endpoint
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


def _stop_list(body) -> list:
    """The request's stop strings as a list (OpenAI's ``stop`` is a string or a list of them)."""
    return [body.stop] if isinstance(body.stop, str) else list(body.stop or [])


def _encode_vector(vector: np.ndarray, encoding: str):
    if encoding == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector]


def _sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
