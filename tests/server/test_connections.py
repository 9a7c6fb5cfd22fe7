"""Connection limits over a real uvicorn on 127.0.0.1: header and body timeouts, body size, dropped bodies.

Raw sockets, so the test controls exactly which bytes arrive. Every wait is bounded by a
socket timeout far above the server's limit (a hang fails; nothing asserts a duration).
"""
import logging
import socket

import pytest

from tlaloc.serving.server.transport import protocol_with_header_timeout
from tlaloc.serving.limits import ServerLimits

from .conftest import wait_for
from .fake_engine import FakeEngine

LIMITS = ServerLimits(header_timeout_s=0.3, body_timeout_s=0.3, max_request_bytes=2000)
GOOD = b'{"prompt": "hi", "max_tokens": 2}'


@pytest.fixture
def server(live):
    return live(FakeEngine(), limits=LIMITS,
                uvicorn_config={"http": protocol_with_header_timeout(LIMITS.header_timeout_s,
                                                                     LIMITS.max_header_bytes)})


def _connect(server):
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=15)
    return sock


def _read_all(sock) -> bytes:
    out = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return out
        out += chunk


def _request(body: bytes, length: int | None = None, extra: bytes = b"") -> bytes:
    length = len(body) if length is None else length
    return (b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + extra + b"Content-Length: %d\r\n\r\n" % length + body)


def test_a_complete_request_is_answered(server):                   # the control for the tests below
    with _connect(server) as sock:
        sock.sendall(_request(GOOD))
        assert _read_all(sock).startswith(b"HTTP/1.1 200")


def test_incomplete_headers_are_timed_out(server):
    with _connect(server) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n")           # never finished
        assert _read_all(sock) == b""                                            # closed by the server


def test_a_stalled_body_gets_a_408(server):
    with _connect(server) as sock:
        sock.sendall(_request(GOOD[:10], length=len(GOOD)))
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408") and b"request_timeout" in answer


def test_a_body_over_the_limit_gets_a_413_declared_or_chunked(server):
    with _connect(server) as sock:
        sock.sendall(_request(b"", length=5000))
        assert _read_all(sock).startswith(b"HTTP/1.1 413")
    chunk = b'{"prompt": "' + b"a" * 3000 + b'"}'
    with _connect(server) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(chunk) + chunk + b"\r\n0\r\n\r\n")
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 413") and b"request_too_large" in answer


def test_a_dropped_body_logs_one_line_and_no_traceback(server, caplog):
    caplog.set_level(logging.INFO)
    with _connect(server) as sock:
        sock.sendall(_request(GOOD[:10], length=len(GOOD)))
    with _connect(server) as sock:                          # the server still answers, after the drop
        sock.sendall(_request(GOOD))
        assert _read_all(sock).startswith(b"HTTP/1.1 200")
    wait_for(lambda: any("disconnected" in r.getMessage() for r in caplog.records), 10, "the drop's log line")
    dropped = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert len(dropped) == 1, [r.getMessage() for r in caplog.records]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], \
        [r.getMessage() for r in caplog.records]


def _padded(size: int) -> bytes:
    """A request whose head (request line and headers, blank line included) is ``size`` bytes."""
    short = _request(GOOD, extra=b"X-Pad: \r\n")
    head = short.index(b"\r\n\r\n") + 4
    return _request(GOOD, extra=b"X-Pad: " + b"a" * (size - head) + b"\r\n")


@pytest.mark.parametrize("pieces", [1, 7])
def test_a_request_head_over_max_header_bytes_gets_a_431_however_it_is_sent(server, pieces):
    limit = LIMITS.max_header_bytes
    for size, status in [(limit, b"HTTP/1.1 200"), (limit + 1, b"HTTP/1.1 431"), (10 * limit, b"HTTP/1.1 431")]:
        request = _padded(size)
        assert request.index(b"\r\n\r\n") + 4 == size
        with _connect(server) as sock:
            step = -(-len(request) // pieces)
            for start in range(0, len(request), step):
                sock.sendall(request[start:start + step])
            answer = _read_all(sock)
        assert answer.startswith(status), (size, answer[:80])

