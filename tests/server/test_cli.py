"""The ``tlaloc`` command's serving subcommands, over a FakeEngine where an engine is needed."""
import os

import pytest
from typer.testing import CliRunner

from tlaloc import cli

from .fake_engine import FakeEngine, write_fake_artifact

RUNNER = CliRunner()


@pytest.fixture
def engines(monkeypatch):
    """Make ``tlaloc.serving.Engine`` hand out FakeEngines; returns the ones made."""
    made = []

    def fake_load(artifact, **options):
        made.append(FakeEngine(kind="encoder" if "enc" in str(artifact) else "decoder"))
        return made[-1]

    monkeypatch.setattr("tlaloc.serving.Engine", fake_load)
    return made


def test_help_lists_every_command():
    out = RUNNER.invoke(cli.app, ["--help"]).output
    for name in ("export", "generate", "embed", "serve", "export-triton", "bench"):
        assert name in out
    assert set(cli.command_names()) >= {"export", "generate", "embed", "serve", "export-triton", "bench"}


def test_generate_streams_the_text(engines):
    result = RUNNER.invoke(cli.app, ["generate", "art", "--prompt", "hello", "--max-new-tokens", "20"])
    assert result.exit_code == 0, result.output
    engine = engines[0]
    ids = engine.expected_ids(engine.tokenizer.encode("hello").ids, 20)
    assert engine.tokenizer.decode(ids) in result.stdout
    assert "tokens/s" in result.output


def test_generate_chat_and_refusal(engines):
    result = RUNNER.invoke(cli.app, ["generate", "art", "--prompt", "hi", "--chat", "--max-new-tokens", "4"])
    assert result.exit_code == 0, result.output
    assert engines[0].submitted[next(iter(engines[0].submitted))]["prompt_ids"][:1] == [257]   # <|im_start|>
    result = RUNNER.invoke(cli.app, ["generate", "art", "--prompt", "x" * 300])
    assert result.exit_code == 2 and "exceeds" in result.output


def test_generate_refuses_an_artifact_without_a_tokenizer(monkeypatch):
    """Regression: an artifact exported from a GGUF without tokenizer fields crashed `tlaloc
    generate` with "'NoneType' object has no attribute 'encode'"."""
    engine = FakeEngine(kind="decoder")
    engine.tokenizer = None
    monkeypatch.setattr("tlaloc.serving.Engine", lambda artifact, **options: engine)
    result = RUNNER.invoke(cli.app, ["generate", "art", "--prompt", "hi", "--max-new-tokens", "2"])
    assert result.exit_code == 2 and "has no tokenizer" in result.output, result.output
    assert not engine.submitted


def test_generate_passes_no_cpu_kernels(monkeypatch):
    seen = []

    def fake_load(artifact, **options):
        seen.append(options)
        return FakeEngine(kind="decoder")

    monkeypatch.setattr("tlaloc.serving.Engine", fake_load)
    for flag, expected in (([], "auto"), (["--cpu-kernels"], True), (["--no-cpu-kernels"], False)):
        result = RUNNER.invoke(cli.app, ["generate", "art", "--prompt", "hi", "--max-new-tokens", "2", *flag])
        assert result.exit_code == 0, result.output
        assert seen[-1]["cpu_kernels"] == expected and type(seen[-1]["cpu_kernels"]) is type(expected)
    for flag, expected in (([], True), (["--no-async-scheduling"], False)):
        result = RUNNER.invoke(cli.app, ["generate", "art", "--prompt", "hi", "--max-new-tokens", "2", *flag])
        assert result.exit_code == 0, result.output
        assert seen[-1]["async_scheduling"] is expected
    for flag, expected in (([], "float32"), (["--activations", "int8"], "int8")):
        result = RUNNER.invoke(cli.app, ["generate", "art", "--prompt", "hi", "--max-new-tokens", "2", *flag])
        assert result.exit_code == 0, result.output
        assert seen[-1]["activations"] == expected


def test_embed_prints_a_summary(engines):
    result = RUNNER.invoke(cli.app, ["embed", "enc-art", "--text", "a cat", "--text", "a dog"])
    assert result.exit_code == 0, result.output
    assert "dim 8" in result.output and "norm 1.0000" in result.output and "cosine" in result.output
    result = RUNNER.invoke(cli.app, ["embed", "art", "--text", "x"])
    assert result.exit_code == 2 and "decoder artifact" in result.output


def test_serve_passes_its_options(engines, monkeypatch):
    calls = []
    monkeypatch.setattr("tlaloc.serving.server.run_server", lambda engine, **kw: calls.append(kw))
    assert RUNNER.invoke(cli.app, ["serve", "art"]).exit_code == 0
    from tlaloc.serving.limits import ServerLimits
    assert calls[-1] == {"host": "127.0.0.1", "port": 8000, "api_key": None, "log_level": "info",
                         "limits": ServerLimits()}
    result = RUNNER.invoke(cli.app, ["serve", "art", "--port", "9123", "--api-key", "k"])
    assert result.exit_code == 0 and calls[-1]["port"] == 9123 and calls[-1]["api_key"] == "k"
    result = RUNNER.invoke(cli.app, ["serve", "art"], env={"TLALOC_API_KEY": "from-env"})
    assert calls[-1]["api_key"] == "from-env"
    result = RUNNER.invoke(cli.app, ["serve", "art", "--max-request-bytes", "1000", "--max-prompts", "3",
                                     "--header-timeout", "2.5"])
    assert result.exit_code == 0, result.output
    assert calls[-1]["limits"] == ServerLimits(max_request_bytes=1000, max_prompts=3, header_timeout_s=2.5)
    result = RUNNER.invoke(cli.app, ["serve", "art", "--max-n", "0"])
    assert result.exit_code == 2 and "max_n" in result.output
    help_text = " ".join(RUNNER.invoke(cli.app, ["serve", "--help"]).output.split())
    assert "TLALOC_API_KEY" in help_text and "ps" in help_text


def test_load_failure_is_a_clear_exit(tmp_path):
    result = RUNNER.invoke(cli.app, ["generate", str(tmp_path / "missing"), "--prompt", "x"])
    assert result.exit_code == 2 and "cannot load" in result.output


def test_export_triton_command(tmp_path):
    artifact = write_fake_artifact(tmp_path / "art")
    result = RUNNER.invoke(cli.app, ["export-triton", artifact, str(tmp_path / "repo"), "--streaming"])
    assert result.exit_code == 0, result.output
    assert os.path.isfile(tmp_path / "repo" / "fake-tiny" / "1" / "model.py")
    assert "decoupled: true" in (tmp_path / "repo" / "fake-tiny" / "config.pbtxt").read_text()
    result = RUNNER.invoke(cli.app, ["export-triton", str(tmp_path), str(tmp_path / "repo")])
    assert result.exit_code == 2 and "not a tlaloc artifact" in result.output
    result = RUNNER.invoke(cli.app, ["export-triton", artifact, str(tmp_path / "repo8"), "--text-tensors", "utf8"])
    assert result.exit_code == 0, result.output
    config = (tmp_path / "repo8" / "fake-tiny" / "config.pbtxt").read_text()
    assert "TYPE_UINT8" in config and "TYPE_STRING" not in config
    result = RUNNER.invoke(cli.app, ["export-triton", artifact, str(tmp_path / "repo9"), "--text-tensors", "bytes"])
    assert result.exit_code == 2 and "--text-tensors" in result.output


def test_export_passes_the_issue_flags(monkeypatch, tmp_path):
    export = pytest.importorskip("tlaloc.serving.export", reason="tlaloc.serving.export is not there yet")
    calls = []

    class Summary:
        path, kind, num_programs, weight_bytes, total_bytes, seconds = "out", "decoder", 4, 2**20, 2**21, 1.0
        notes = ("out has no tokenizer",)

    monkeypatch.setattr(export, "export", lambda model, out, **kw: calls.append((model, out, kw)) or Summary())
    result = RUNNER.invoke(cli.app, ["export", "model.gguf", "out", "--batch", "1,2", "--context", "64",
                                     "--block-size", "32", "--dtype", "bf16", "--weights", "int8", "--score",
                                     "--top-logprobs", "5", "--no-cpu-kernels"])
    assert result.exit_code == 0, result.output
    assert "note: out has no tokenizer" in result.output
    assert calls == [("model.gguf", "out", {"batch": "1,2", "context": "64", "block_size": 32, "dtype": "bf16",
                                            "weights": "int8", "group": None, "prefill_chunk": None,
                                            "prefill_tokens": None, "name": None, "overwrite": False,
                                            "score": True, "top_logprobs": 5, "cpu_kernels": False})]
    result = RUNNER.invoke(cli.app, ["export", "model.gguf", "out4", "--weights", "int4", "--group", "64"])
    assert result.exit_code == 0, result.output
    assert calls[-1][2]["weights"] == "int4" and calls[-1][2]["group"] == 64
    assert "4 programs" in result.output
