"""Fixtures: the app over a FakeEngine (in-process), and a real uvicorn on 127.0.0.1.

Every server here binds loopback on a free port, and every fixture stops what it
started, even when the test fails.
"""
import socket
import threading
import time

import pytest
import uvicorn
from fastapi.testclient import TestClient

from tlaloc.serving.server import create_app

from .fake_engine import FakeEngine

API_KEY = "sk-test-key"


@pytest.fixture(scope="session")
def tiny_llama_artifact(tmp_path_factory):
    """A seeded tiny Llama exported once per session (batch 1, 4, 16; context 128; 16-token pages),
    shared by every test that starts a real ``tlaloc serve``."""
    from .test_real_engine import _require_runtime, write_tiny_llama
    export, _ = _require_runtime()
    folder = tmp_path_factory.mktemp("tiny-llama-serve")
    write_tiny_llama(folder, hidden=64, layers=2, ffn=128)
    artifact = tmp_path_factory.mktemp("art-serve") / "tiny"
    export(str(folder), str(artifact), batch=(1, 4, 16), context=(128,), block_size=16, progress=False)
    return artifact


@pytest.fixture(scope="session")
def serve_env(tmp_path_factory):
    """Environment for ``tlaloc serve`` subprocesses: one compiled-program cache for the session, so
    the second server over the shared artifact loads its programs instead of compiling them."""
    return {"TLALOC_SERVING_CACHE": str(tmp_path_factory.mktemp("serving-cache"))}


@pytest.fixture
def fake():
    return FakeEngine()


@pytest.fixture
def client(fake):
    with TestClient(create_app(fake)) as c:
        yield c


@pytest.fixture
def encoder():
    return FakeEngine(kind="encoder", model_name="fake-encoder", max_context=64)


@pytest.fixture
def encoder_client(encoder):
    with TestClient(create_app(encoder, embed_window_s=0.01)) as c:
        yield c


class LiveServer:
    """uvicorn serving ``app`` on 127.0.0.1:<free port> in a thread; ``stop()`` always returns."""

    def __init__(self, app, **config):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2,
                                                    **config))
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def start(self):
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start within 10 s")
            time.sleep(0.01)
        return self

    def stop(self):
        self.server.should_exit = True
        self._thread.join(10)
        self._sock.close()


@pytest.fixture
def live():
    """Start a live server over an engine: ``live(engine, uvicorn_config=None, **create_app_kwargs)``."""
    started = []

    def start(engine, uvicorn_config=None, **kwargs):
        server = LiveServer(create_app(engine, **kwargs), **(uvicorn_config or {})).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def wait_for(predicate, timeout=5.0, what="condition"):
    """Poll ``predicate`` (bounded); fail the test naming ``what`` if it never holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
