"""``tlaloc export-triton``: the repository's files, model.py against a Triton stub, and a real Triton.

The real Triton is the ``tritonserver`` bundled in nvidia-pytriton 0.7.0, which `make venv`
installs with ``pip install --no-deps --target .venv/pytriton`` (it pins numpy<2, so it cannot
share tlaloc's environment; only its server, backends and stubs are used).
``TLALOC_PYTRITON_DIR`` names another such folder. The test skips, saying why, when the
folder, ``tritonclient`` or a stub for this Python is missing, or the server does not start.
"""
import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time

import numpy as np
import pytest

import tlaloc
from tlaloc.serving.triton import config_pbtxt, write_repository

from . import triton_stub
from .conftest import wait_for
from .fake_engine import FakeEngine, write_fake_artifact
from .test_real_engine import _require_runtime, write_tiny_llama

FACTORY = f"{__package__}.fake_engine:load_fake"


@pytest.fixture
def artifacts(tmp_path):
    return (write_fake_artifact(tmp_path / "decoder-art", "decoder", "fake-tiny"),
            write_fake_artifact(tmp_path / "encoder-art", "encoder", "fake encoder/v2"))


def load_model(model_dir, monkeypatch):
    """Import ``<model_dir>/1/model.py`` against the stub and run ``initialize``."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", triton_stub.as_module())
    spec = importlib.util.spec_from_file_location("triton_model_under_test", os.path.join(model_dir, "1", "model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with open(os.path.join(model_dir, "config.pbtxt")) as f:
        config = triton_stub.parse_pbtxt(f.read())
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config), "model_repository": str(model_dir),
                      "model_version": "1", "model_name": config["name"], "model_instance_kind": "MODEL"})
    return model


def test_repository_layout_and_config(artifacts, tmp_path):
    decoder, encoder = artifacts
    repo = tmp_path / "repo"
    plain = write_repository(decoder, repo, engine_factory=FACTORY)
    streaming = write_repository(decoder, repo, model_name="tiny_stream", streaming=True, copy_artifact=False)
    embed = write_repository(encoder, repo)
    assert sorted(os.listdir(repo)) == ["fake-tiny", "fake_encoder_v2", "tiny_stream"]
    for model_dir in (plain, streaming, embed):
        assert os.path.isfile(os.path.join(model_dir, "config.pbtxt"))
        source = open(os.path.join(model_dir, "1", "model.py")).read()
        assert "class TritonPythonModel" in source and "triton_python_backend_utils" in source
        compile(source, "model.py", "exec")
    with open(os.path.join(plain, "1", "artifact", "manifest.json"), "rb") as copied:
        assert copied.read() == open(os.path.join(decoder, "manifest.json"), "rb").read()

    config = triton_stub.parse_pbtxt(open(os.path.join(plain, "config.pbtxt")).read())
    assert config["name"] == "fake-tiny" and config["backend"] == "python"
    assert config["max_batch_size"] == 8 and "dynamic_batching" in config
    assert [i["name"] for i in config["input"]] == ["text_input", "max_tokens", "temperature", "top_k", "top_p",
                                                     "seed"]
    assert config["input"][0] == {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]}
    assert all(i.get("optional") for i in config["input"][1:])
    assert [o["name"] for o in config["output"]] == ["text_output", "token_ids", "finish_reason"]
    assert config["parameters"]["artifact_dir"] == {"string_value": "artifact"}
    assert config["parameters"]["engine_factory"] == {"string_value": FACTORY}
    assert config["parameters"]["python_site_dirs"] == {"string_value": sysconfig.get_paths()["purelib"]}

    config = triton_stub.parse_pbtxt(open(os.path.join(streaming, "config.pbtxt")).read())
    assert config["model_transaction_policy"] == {"decoupled": True} and config["max_batch_size"] == 0
    assert config["parameters"]["artifact_dir"]["string_value"] == os.path.abspath(decoder)
    assert not os.path.exists(os.path.join(streaming, "1", "artifact"))

    config = triton_stub.parse_pbtxt(open(os.path.join(embed, "config.pbtxt")).read())
    assert [o["name"] for o in config["output"]] == ["embedding"]
    assert config["output"][0]["data_type"] == "TYPE_FP32"


def _config(model_dir):
    with open(os.path.join(model_dir, "config.pbtxt")) as f:
        return triton_stub.parse_pbtxt(f.read())


def test_utf8_text_tensors_config(artifacts, tmp_path):
    decoder, encoder = artifacts
    plain = write_repository(decoder, tmp_path / "repo", text_tensors="utf8")
    config = _config(plain)
    assert config["input"][0] == {"name": "text_input", "data_type": "TYPE_UINT8", "dims": [-1],
                                  "allow_ragged_batch": True}
    assert [(o["name"], o["data_type"]) for o in config["output"]] == [
        ("text_output", "TYPE_UINT8"), ("token_ids", "TYPE_INT32"), ("finish_reason", "TYPE_UINT8")]
    stream = write_repository(decoder, tmp_path / "repo", model_name="s", streaming=True, text_tensors="utf8")
    config = _config(stream)
    assert config["input"][0] == {"name": "text_input", "data_type": "TYPE_UINT8", "dims": [-1]}
    embed = write_repository(encoder, tmp_path / "repo", text_tensors="utf8")
    config = _config(embed)
    assert config["input"][0]["data_type"] == "TYPE_UINT8"
    with pytest.raises(ValueError, match="text_tensors"):
        write_repository(decoder, tmp_path / "repo", text_tensors="bytes")


def test_refusals(artifacts, tmp_path):
    decoder, encoder = artifacts
    with pytest.raises(ValueError, match="not a tlaloc artifact"):
        write_repository(str(tmp_path), tmp_path / "repo")
    with pytest.raises(ValueError, match="decoder artifacts"):
        write_repository(encoder, tmp_path / "repo", streaming=True)
    with pytest.raises(ValueError, match="max_batch_size"):
        config_pbtxt("m", "decoder", max_batch_size=0)


def test_plain_model_batches_requests(artifacts, tmp_path, monkeypatch):
    model_dir = write_repository(artifacts[0], tmp_path / "repo", engine_factory=FACTORY)
    model = load_model(model_dir, monkeypatch)
    engine = model.engine
    requests = [triton_stub.Request(text_input=np.array([[b"hello"]], dtype=object),
                                    max_tokens=np.array([[12]], dtype=np.int32)),
                triton_stub.Request(text_input=np.array([[b"other words"]], dtype=object),
                                    temperature=np.array([[0.5]], dtype=np.float32), seed=np.array([[3]])),
                triton_stub.Request(text_input=np.array([["x" * 300]], dtype=object))]    # over capacity
    responses = model.execute(requests)
    assert len(responses) == 3
    ids = engine.expected_ids(engine.tokenizer.encode("hello").ids, 12)
    assert responses[0].output("text_output")[0, 0].decode() == engine.tokenizer.decode(ids)
    assert responses[0].output("token_ids").tolist() == [ids]
    assert responses[0].output("finish_reason")[0, 0] in (b"stop", b"length")
    second = engine.expected_ids(engine.tokenizer.encode("other words").ids, 64, temperature=0.5, seed=(3, 0))
    assert responses[1].output("token_ids")[0].tolist() == second
    assert responses[2].has_error() and "exceeds" in responses[2].error().message()
    assert engine.stats()["running"] == 0 and engine.stats()["kv_pages_used"] == 0


def _utf8(text, width=None):
    data = np.frombuffer(text.encode(), dtype=np.uint8)
    return np.pad(data, (0, (width or data.size) - data.size)).reshape(1, -1)     # (1, n_bytes)


def test_utf8_model_reads_and_writes_bytes(artifacts, tmp_path, monkeypatch):
    """The TYPE_UINT8 text model works on a stub whose as_numpy is broken (only DLPack is used)."""
    monkeypatch.setattr(triton_stub.Tensor, "numpy1_stub", True)
    model = load_model(write_repository(artifacts[0], tmp_path / "repo", engine_factory=FACTORY,
                                        text_tensors="utf8"), monkeypatch)
    engine = model.engine
    responses = model.execute([triton_stub.Request(text_input=_utf8("héllo"),
                                                   max_tokens=np.array([[9]], dtype=np.int32))])
    ids = engine.expected_ids(engine.tokenizer.encode("héllo").ids, 9)
    out = responses[0].output("text_output")
    assert out.dtype == np.uint8 and out.shape[0] == 1
    assert bytes(out.reshape(-1)).decode() == engine.tokenizer.decode(ids)
    assert responses[0].output("token_ids").tolist() == [ids]
    assert bytes(responses[0].output("finish_reason").reshape(-1)) in (b"stop", b"length")

    model = load_model(write_repository(artifacts[1], tmp_path / "repo", engine_factory=FACTORY,
                                        text_tensors="utf8"), monkeypatch)
    rows = np.concatenate([_utf8("a", 3), _utf8("bcd")])                     # NUL-padded rows
    responses = model.execute([triton_stub.Request(text_input=rows)])
    np.testing.assert_array_equal(responses[0].output("embedding"), FakeEngine(kind="encoder").embed(["a", "bcd"]))


def test_string_model_refused_on_a_numpy1_stub(artifacts, tmp_path, monkeypatch):
    monkeypatch.setattr(triton_stub.Tensor, "numpy1_stub", True)
    model_dir = write_repository(artifacts[0], tmp_path / "repo", engine_factory=FACTORY)
    with pytest.raises(RuntimeError, match=r"pybind11 < 2\.12.*text_tensors='utf8'"):
        load_model(model_dir, monkeypatch)


def test_decoupled_model_streams_and_cancels(artifacts, tmp_path, monkeypatch):
    model_dir = write_repository(artifacts[0], tmp_path / "repo", streaming=True, engine_factory=FACTORY)
    model = load_model(model_dir, monkeypatch)
    model.engine.step_latency_s = 0.002
    model.stop_ids = ()                                      # no EOS: the doomed request outlives its cancel
    try:
        live = triton_stub.Request(text_input=np.array([b"stream this"], dtype=object),
                                   max_tokens=np.array([40], dtype=np.int32))
        doomed = triton_stub.Request(text_input=np.array([b"cancel me"], dtype=object),
                                     max_tokens=np.array([200], dtype=np.int32))
        bad = triton_stub.Request(text_input=np.array([b""], dtype=object))              # empty prompt
        assert model.execute([live, doomed, bad]) is None
        wait_for(lambda: len(doomed.sender.sent) >= 2, what="the second request to stream")
        doomed.cancelled = True
        for request in (live, doomed, bad):
            assert request.sender.done.wait(10), "no final response"
        ids = model.engine.expected_ids(model.engine.tokenizer.encode("stream this").ids, 40, stop_ids=())
        sent = [r for r in live.sender.sent if r is not None]
        text = "".join(r.output("text_output")[0].decode() for r in sent)
        assert text == model.engine.tokenizer.decode(ids)
        assert sum((r.output("token_ids").tolist() for r in sent), []) == ids
        assert any(rid.startswith("fake-") for rid in model.engine.cancelled)
        assert bad.sender.sent[-1].has_error() and "empty" in bad.sender.sent[-1].error().message()
    finally:
        model.finalize()
    assert not model.runner.alive


def test_encoder_model_embeds_a_batch_in_one_call(artifacts, tmp_path, monkeypatch):
    model_dir = write_repository(artifacts[1], tmp_path / "repo", engine_factory=FACTORY)
    model = load_model(model_dir, monkeypatch)
    requests = [triton_stub.Request(text_input=np.array([[b"a"], [b"b"]], dtype=object)),
                triton_stub.Request(text_input=np.array([[b"c"]], dtype=object))]
    responses = model.execute(requests)
    expected = FakeEngine(kind="encoder").embed(["a", "b", "c"])
    np.testing.assert_array_equal(responses[0].output("embedding"), expected[:2])
    np.testing.assert_array_equal(responses[1].output("embedding"), expected[2:])
    assert model.engine.embed_calls == [3]


PYTRITON = "nvidia-pytriton==0.7.0"
START_TIMEOUT_S = 300


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pytriton():
    """(pytriton folder, its tritonserver folder, the stub for this Python); skips naming what is missing."""
    pytest.importorskip("tritonclient.http", reason="tritonclient is not installed (`make venv` installs "
                        "tritonclient==2.73.0 with --no-deps)")
    root = os.environ.get("TLALOC_PYTRITON_DIR") or os.path.join(sys.prefix, "pytriton")
    server_dir = os.path.join(root, "pytriton", "tritonserver")
    if not os.path.isfile(os.path.join(server_dir, "bin", "tritonserver")):
        pytest.skip(f"no tritonserver in {root}: `make venv` installs it with `pip install --no-deps --target "
                    f"{os.path.join(sys.prefix, 'pytriton')} {PYTRITON}` (pip could not, or it was not run); "
                    f"TLALOC_PYTRITON_DIR names another such folder")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = os.path.join(server_dir, "python_backend_stubs", version, "triton_python_backend_stub")
    if not os.path.isfile(stub):
        pytest.skip(f"{PYTRITON} in {root} has no Triton Python-backend stub for Python {version}")
    return root, server_dir, stub


def _log_tail(path, lines=25):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


@contextlib.contextmanager
def _tritonserver(pytriton, repo, work, cache_dir):
    """Run tritonserver on ``repo`` (CPU, HTTP only); yield (tritonclient, log path); always stop it."""
    import tritonclient.http as httpclient
    root, server_dir, stub = pytriton
    backends = work / "backends"
    shutil.copytree(os.path.join(server_dir, "backends"), backends)
    shutil.copy(stub, backends / "python" / "triton_python_backend_stub")
    port = _free_port()
    env = dict(os.environ,
               LD_LIBRARY_PATH=os.pathsep.join([sysconfig.get_config_var("LIBDIR"),
                                                os.path.join(root, "nvidia_pytriton.libs")]),
               PYTHONPATH=sysconfig.get_paths()["purelib"],      # the stub's numpy is this environment's
               TLALOC_SERVING_CACHE=str(cache_dir))
    log_path = work / "triton.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen([os.path.join(server_dir, "bin", "tritonserver"), f"--model-repository={repo}",
                                    f"--backend-directory={backends}", "--http-address=127.0.0.1",
                                    f"--http-port={port}", "--allow-grpc=false", "--allow-metrics=false",
                                    "--exit-on-error=false", "--strict-readiness=false"],
                                   stdout=log, stderr=subprocess.STDOUT, env=env)
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", concurrency=4, network_timeout=120)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:                  # the HTTP endpoint opens once every model has loaded or failed
            if process.poll() is not None:
                pytest.skip(f"tritonserver exited with {process.returncode} before serving:\n{_log_tail(log_path)}")
            with contextlib.suppress(Exception):
                if client.is_server_live():
                    break
            if time.monotonic() > deadline:
                pytest.skip(f"tritonserver did not serve within {START_TIMEOUT_S} s:\n{_log_tail(log_path)}")
            time.sleep(0.5)
        yield client, log_path
    finally:
        client.close()
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _require_ready(client, log_path, name):
    """Fail when our model.py did not load (its traceback names model.py); skip for other reasons."""
    if client.is_model_ready(name):
        return
    reason = next((m.get("reason", "") for m in client.get_model_repository_index() if m["name"] == name), "")
    if "model.py" in reason or "tlaloc" in reason:
        pytest.fail(f"Triton could not load {name}: {reason}")
    pytest.skip(f"Triton could not load {name} on this machine: {reason or _log_tail(log_path)}")


def _infer(client, model, text, max_tokens, *, utf8=True):
    from tritonclient.http import InferInput
    if utf8:
        data, dtype = np.frombuffer(text.encode(), dtype=np.uint8).reshape(1, -1), "UINT8"
    else:
        data, dtype = np.array([[text.encode()]], dtype=object), "BYTES"
    text_input = InferInput("text_input", list(data.shape), dtype)
    text_input.set_data_from_numpy(data)
    tokens = InferInput("max_tokens", [1, 1], "INT32")
    tokens.set_data_from_numpy(np.array([[max_tokens]], dtype=np.int32))
    return client.async_infer(model, [text_input, tokens])


def _decoded(result, name, utf8=True):
    out = result.as_numpy(name)
    return bytes(out.reshape(-1)).decode() if utf8 else out.reshape(-1)[0].decode()


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A tiny exported Llama and an Engine over it (compiled into a cache the server reuses)."""
    export, Engine = _require_runtime()
    folder = tmp_path_factory.mktemp("tiny-llama-triton")
    write_tiny_llama(folder)
    artifact = tmp_path_factory.mktemp("art-triton") / "tiny"
    export(str(folder), str(artifact), batch=(1, 4), context=(64,), block_size=16, progress=False)
    cache = tmp_path_factory.mktemp("triton-xla-cache")
    return artifact, Engine(str(artifact), fast_compile=True, cache_dir=str(cache)), cache


def test_real_triton_round_trip(pytriton, artifacts, tiny_llama, tmp_path, record_property):
    """tritonserver on CPU serves the fake engine and a real tiny Llama; tritonclient asks both.

    The real model's token ids equal ``Engine.generate`` greedy, for two prompts sent at once
    (the dynamic batcher may hand them to ``execute`` together). The TYPE_STRING model either
    round-trips too (a stub that handles NumPy 2) or is refused at load with the reason.
    """
    artifact, engine, cache = tiny_llama
    repo = tmp_path / "repo"
    site_dirs = [os.path.dirname(os.path.dirname(tlaloc.__file__)), sysconfig.get_paths()["purelib"]]  # this tlaloc
    fake_dir = write_repository(artifacts[0], repo, engine_factory="fake_engine:load_fake", text_tensors="utf8",
                                python_site_dirs=site_dirs)
    string_dir = write_repository(artifacts[0], repo, model_name="fake-string",
                                  engine_factory="fake_engine:load_fake", python_site_dirs=site_dirs)
    for model_dir in (fake_dir, string_dir):
        shutil.copy(os.path.join(os.path.dirname(__file__), "fake_engine.py"), os.path.join(model_dir, "1"))
    real_dir = write_repository(str(artifact), repo, model_name="tiny-llama", engine_factory="fast_engine:load",
                                text_tensors="utf8", python_site_dirs=site_dirs)
    with open(os.path.join(real_dir, "1", "fast_engine.py"), "w") as f:   # fast_compile, the test's cache
        f.write("from tlaloc.serving import Engine\n\n\ndef load(artifact):\n"
                "    return Engine(artifact, fast_compile=True)\n")
    started = time.monotonic()
    with _tritonserver(pytriton, repo, tmp_path, cache) as (client, log_path):
        record_property("triton_start_s", round(time.monotonic() - started, 1))
        for name in ("fake-tiny", "tiny-llama"):
            _require_ready(client, log_path, name)

        fake = FakeEngine()
        ids = fake.expected_ids(fake.tokenizer.encode("hello").ids, 12)
        result = _infer(client, "fake-tiny", "hello", 12).get_result()
        assert result.as_numpy("token_ids").tolist() == [ids]
        assert _decoded(result, "text_output") == fake.tokenizer.decode(ids)

        prompts = ["The capital of France is", "héllo wörld"]
        asked = time.monotonic()
        pending = [_infer(client, "tiny-llama", p, 12) for p in prompts]
        results = [p.get_result() for p in pending]
        record_property("triton_two_requests_s", round(time.monotonic() - asked, 2))
        prompt_ids = [engine.tokenizer.encode(p).ids for p in prompts]
        want = engine.generate(prompt_ids, max_new_tokens=12, temperature=0.0)
        for result, expected in zip(results, want):
            assert result.as_numpy("token_ids").reshape(-1).tolist() == list(expected.token_ids)
            assert _decoded(result, "text_output") == engine.tokenizer.decode(list(expected.token_ids),
                                                                              skip_special_tokens=True)
            assert _decoded(result, "finish_reason") in ("stop", "length")
        assert len(set(tuple(r.as_numpy("token_ids").reshape(-1)) for r in results)) == 2

        if client.is_model_ready("fake-string"):
            result = _infer(client, "fake-string", "hello", 12, utf8=False).get_result()
            assert result.as_numpy("token_ids").tolist() == [ids]
            assert _decoded(result, "text_output", utf8=False) == fake.tokenizer.decode(ids)
        else:
            reason = next(m.get("reason", "") for m in client.get_model_repository_index()
                          if m["name"] == "fake-string")
            assert "pybind11 < 2.12" in reason and "text_tensors='utf8'" in reason, reason
