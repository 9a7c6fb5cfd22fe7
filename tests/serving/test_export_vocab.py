"""export refuses a tokenizer that can produce ids past the end of the model's embedding table."""
import os

import pytest

pytest.importorskip("gguf")
pytest.importorskip("safetensors")

import tlaloc.models as tm  # noqa: E402
from models.gguf_writer import tiny_vocab  # noqa: E402
from models.hostile import write_gguf, write_hf  # noqa: E402
from tlaloc.serving.export import export  # noqa: E402
from tlaloc.serving.export.artifact import _check_tokenizer_fits  # noqa: E402

from .fixtures import write_byte_tokenizer  # noqa: E402


def test_hf_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path):
    folder = write_hf(tmp_path / "hf", config={"vocab_size": 128})
    write_byte_tokenizer(folder)                                   # 256 ids
    with pytest.raises(tm.CheckpointError, match=r"has 256 token ids but the model's vocabulary holds 128"):
        export(folder, str(tmp_path / "art"), batch=(1,), context=(16,), block_size=8)
    assert not os.path.exists(tmp_path / "art")


def test_gguf_with_more_tokens_than_vocab_size_is_refused(tmp_path):
    tokens, types = tiny_vocab()
    path = write_gguf(tmp_path / "m.gguf", meta={"llama.vocab_size": len(tokens),
                                                  "tokenizer.ggml.tokens": tokens + ["<x1>", "<x2>", "<x3>"],
                                                  "tokenizer.ggml.token_type": types + [3, 3, 3]})
    with pytest.raises(tm.CheckpointError, match=rf"has {len(tokens) + 3} token ids but the model's vocabulary "
                                                 rf"holds {len(tokens)}"):
        export(path, str(tmp_path / "art"), batch=(1,), context=(16,), block_size=8)


def test_tokenizer_no_larger_than_the_vocabulary_passes(tmp_path):
    folder = write_hf(tmp_path / "hf")                             # vocab_size 263 >= 256 ids
    write_byte_tokenizer(folder)
    _check_tokenizer_fits(tm.load(folder), folder)
    path = write_gguf(tmp_path / "m.gguf")
    _check_tokenizer_fits(tm.load(path), path)


def test_an_export_without_a_tokenizer_says_so(tmp_path):
    """Regression: a GGUF without tokenizer fields exported without a word, and the artifact then
    refused every text prompt. The export's summary (and ``tlaloc export``) now notes it; the
    control, the same model with its tokenizer, has no note."""
    meta = {k: None for k in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                              "tokenizer.ggml.token_type", "tokenizer.ggml.merges")}
    meta["llama.vocab_size"] = len(tiny_vocab()[0])
    bare = write_gguf(tmp_path / "bare.gguf", meta=meta)
    summary = export(bare, str(tmp_path / "bare-art"), batch=(1,), context=(16,), block_size=8)
    assert len(summary.notes) == 1 and "has no tokenizer" in summary.notes[0], summary.notes
    full = export(write_gguf(tmp_path / "full.gguf"), str(tmp_path / "full-art"), batch=(1,), context=(16,),
                  block_size=8)
    assert full.notes == ()
