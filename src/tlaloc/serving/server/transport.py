"""The server's transport guards: API key, request counter, body size and time limits, header timeout.

- :class:`Gate` (ASGI middleware): the API key (all paths but ``/health``), the
  ``tlaloc_http_requests_total`` counter, a 413 for a body over
  ``ServerLimits.max_request_bytes`` (from ``Content-Length`` before anything is read,
  else while reading), and a 408 for a body that stalls ``body_timeout_s``.
- :func:`protocol_with_header_timeout`: uvicorn's h11 protocol, closing a connection whose
  request headers are not complete ``header_timeout_s`` after its first byte (uvicorn
  itself only times out idle keep-alive connections, so half-open requests piled up), and
  answering 431 to a request head (request line and headers) over ``max_header_bytes``
  however it arrives (h11's ``max_incomplete_event_size`` only bounds a head that is still
  incomplete, so one sent in a single write passed at any size).
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import re

from fastapi.responses import JSONResponse

from .limits import ServerLimits
from .metrics import ServerMetrics
from .openai_schema import OpenAIError

log = logging.getLogger("tlaloc.serving")
_DRAIN_FACTOR = 16                 # a refused body is read and dropped up to 16 x max_request_bytes
_HEAD_END = re.compile(rb"\n\r?\n")   # the blank line that ends a request head (h11 accepts a bare \n)
ENDPOINTS = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/models", "/health",
             "/metrics")


class Gate:
    """ASGI middleware: the API key check, the request counter and the body limits."""

    def __init__(self, app, api_key: str | None, metrics: ServerMetrics, limits: ServerLimits):
        self.app, self.metrics, self.limits = app, metrics, limits
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
            elif self._declared_length(scope) > self.limits.max_request_bytes:
                await self._drain(receive, 0)
                await JSONResponse(self._too_large().body(), status_code=413,
                                   headers={"Connection": "close"})(scope, receive, counting_send)
            else:
                await self.app(scope, self._limited(receive), counting_send)
        finally:
            endpoint = path if path in ENDPOINTS else ("/v1/models" if path.startswith("/v1/models/")
                                                       else "other")
            self.metrics.http_requests.labels(endpoint=endpoint, status=str(status["code"])).inc()

    def _limited(self, receive):
        """``receive`` with the body limits: raises OpenAIError 413/408 (the route answers it)."""
        state = {"size": 0, "done": False}

        async def limited_receive():
            if state["done"]:
                return await receive()                       # after the body: waiting for a disconnect
            try:
                message = await asyncio.wait_for(receive(), self.limits.body_timeout_s)
            except asyncio.TimeoutError:
                raise OpenAIError(408, f"the request body did not arrive within {self.limits.body_timeout_s:g} s",
                                  code="request_timeout") from None
            if message["type"] == "http.request":
                state["size"] += len(message.get("body", b""))
                if state["size"] > self.limits.max_request_bytes:
                    if message.get("more_body", False):
                        await self._drain(receive, state["size"])
                    state["done"] = True
                    raise self._too_large()
                state["done"] = not message.get("more_body", False)
            else:
                state["done"] = True
            return message
        return limited_receive

    async def _drain(self, receive, size: int) -> None:
        """Read and drop the rest of a refused body, up to _DRAIN_FACTOR x the limit, so the client can
        read the 413 (closing on an unread upload resets the connection before it sees the answer)."""
        cap = _DRAIN_FACTOR * self.limits.max_request_bytes
        while size <= cap:
            try:
                message = await asyncio.wait_for(receive(), self.limits.body_timeout_s)
            except asyncio.TimeoutError:
                return
            if message["type"] != "http.request":
                return
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    def _too_large(self) -> OpenAIError:
        return OpenAIError(413, f"the request body is over {self.limits.max_request_bytes} bytes (the "
                                f"server's --max-request-bytes)", code="request_too_large")

    @staticmethod
    def _declared_length(scope) -> int:
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0                                 # h11 refuses these before we see them
        return 0

    def _authorized(self, scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                return hmac.compare_digest(value, self.expected)
        return False


def protocol_with_header_timeout(header_timeout_s: float, max_header_bytes: int | None = None):
    """uvicorn's ``H11Protocol`` that closes a connection whose request headers stall and, with
    ``max_header_bytes``, answers 431 (and closes) to a request head larger than that."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutH11Protocol(H11Protocol):
        _header_timer = None
        _head = b""                      # the bytes of the request head received so far
        _refused = None                  # after a 431: how many more bytes are read and dropped

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._refused is not None:                # after a 431: drop what is still coming, then close
                self._refused -= len(data)
                if self._refused < 0:
                    self.transport.close()
                return
            if max_header_bytes is not None and self._reading_headers() and self._head_too_large(data):
                return
            super().data_received(data)
            if self._reading_headers():
                if self._header_timer is None:
                    self._arm()
            else:
                self._disarm()

        def _head_too_large(self, data: bytes) -> bool:
            """Count ``data`` into the head being read; True (answered 431, closing) when it is over the limit.

            After the 431 the write side is shut (the client reads the answer, then EOF) and what the
            client still sends is dropped, up to 16 x the limit, for ``header_timeout_s`` at most:
            closing at once, with unread bytes, would reset the connection and lose the answer."""
            if self.transport.is_closing():
                return True
            head = self._head + data
            end = _HEAD_END.search(head)
            size = end.end() if end else len(head)
            if size <= max_header_bytes:
                self._head = b"" if end else head
                return False
            self._head = b""
            log.info("refused a request from %s: its head is over %d bytes", self.client, max_header_bytes)
            message = (f"the request line and headers are over {max_header_bytes} bytes; send smaller "
                       f"headers").encode()
            self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; "
                                 b"charset=utf-8\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
                                 % len(message) + message)
            self._disarm()
            self._refused = _DRAIN_FACTOR * max_header_bytes
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self._header_timer = self.loop.call_later(header_timeout_s, self.transport.close)
            return True

        def connection_lost(self, exc):
            self._disarm()
            super().connection_lost(exc)

        def _reading_headers(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(header_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expire(self) -> None:
            self._header_timer = None
            if self._reading_headers() and not self.transport.is_closing():
                log.info("closed a connection from %s: no complete request headers within %g s",
                         self.client, header_timeout_s)
                self.transport.close()

    return HeaderTimeoutH11Protocol
