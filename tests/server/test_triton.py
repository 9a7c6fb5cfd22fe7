"""``tlaloc export-triton``: the repository's files, and model.py run against a Triton stub.

A real Triton (the ``tritonserver`` bundled in nvidia-pytriton) is opt-in: see
``test_real_triton_round_trip``.
"""
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

from tlaloc.serving.triton_repo import config_pbtxt, write_repository

from . import triton_stub
from .conftest import wait_for
from .fake_engine import FakeEngine, write_fake_artifact

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
    assert not model._thread.is_alive()


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


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_real_triton_round_trip(artifacts, tmp_path):
    """Opt-in: TLALOC_PYTRITON_DIR=<folder of `pip install --no-deps --target DIR nvidia-pytriton==0.7.0`>.

    nvidia-pytriton requires numpy<2 and so cannot live in tlaloc's environment; only its
    bundled ``tritonserver`` and Python backend are used, from that folder.
    """
    import httpx
    root = os.environ.get("TLALOC_PYTRITON_DIR")
    if not root:
        pytest.skip("real Triton is opt-in: set TLALOC_PYTRITON_DIR to a folder made with "
                    "`pip install --no-deps --target DIR nvidia-pytriton==0.7.0` (it pins numpy<2, so it "
                    "cannot share tlaloc's environment)")
    server_dir = os.path.join(root, "pytriton", "tritonserver")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = os.path.join(server_dir, "python_backend_stubs", version, "triton_python_backend_stub")
    if not os.path.isfile(stub):
        pytest.skip(f"{root} has no Triton Python-backend stub for Python {version}")
    backends = tmp_path / "backends"
    shutil.copytree(os.path.join(server_dir, "backends"), backends)
    shutil.copy(stub, backends / "python" / "triton_python_backend_stub")
    repo = tmp_path / "repo"
    model_dir = write_repository(artifacts[0], repo, engine_factory="fake_engine:load_fake")
    shutil.copy(os.path.join(os.path.dirname(__file__), "fake_engine.py"), os.path.join(model_dir, "1"))
    port = _free_port()
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(
        [sysconfig.get_config_var("LIBDIR"), os.path.join(root, "nvidia_pytriton.libs")]))
    log = open(tmp_path / "triton.log", "w")
    process = subprocess.Popen([os.path.join(server_dir, "bin", "tritonserver"), f"--model-repository={repo}",
                                f"--backend-directory={backends}", "--http-address=127.0.0.1",
                                f"--http-port={port}", "--allow-grpc=false", "--allow-metrics=false"],
                               stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.skip(f"tritonserver exited with {process.returncode}; see {tmp_path / 'triton.log'}")
            try:
                if httpx.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.skip("tritonserver did not become ready within 60 s")
            time.sleep(0.5)
        body = {"inputs": [{"name": "text_input", "shape": [1, 1], "datatype": "BYTES", "data": ["hello"]},
                           {"name": "max_tokens", "shape": [1, 1], "datatype": "INT32", "data": [12]}]}
        r = httpx.post(f"{url}/v2/models/fake-tiny/infer", json=body, timeout=30)
        if r.status_code != 200 and ("not healthy" in r.text or "shape does not match" in r.text):
            pytest.skip("Triton's Python-backend stub from nvidia-pytriton 0.7.0 is built for NumPy 1.x and "
                        f"mis-reads tensors under NumPy {np.__version__} (tlaloc's pin): {r.text[:200]}")
        assert r.status_code == 200, r.text
        outputs = {o["name"]: o["data"] for o in r.json()["outputs"]}
        engine = FakeEngine()
        ids = engine.expected_ids(engine.tokenizer.encode("hello").ids, 12)
        assert outputs["token_ids"] == ids and outputs["text_output"] == [engine.tokenizer.decode(ids)]
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.close()
