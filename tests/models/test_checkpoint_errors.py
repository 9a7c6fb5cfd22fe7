"""Refusals of broken checkpoints: each names the file, the key or tensor, and what was expected.

Every hostile input is a tiny one-layer Llama (``tests/models/hostile.py``) with one thing
broken; the clean one loading is the negative control. Non-finite weights and
out-of-range rotary or norm settings would otherwise load and generate garbage.
"""
import json
import os
import struct
import warnings

import numpy as np
import pytest

from .helpers import require

require("gguf", "safetensors")

import tlaloc.models as tm  # noqa: E402
from .hostile import HF_CONFIG, edit_safetensors_header, hf_tensors, write_gguf, write_hf  # noqa: E402

INF_F16 = np.array([np.inf], np.float16).view(np.uint8)


# -- clean inputs load ------------------------------------------------------------------------------

def test_clean_tiny_checkpoints_load(tmp_path):
    hf = tm.load(write_hf(tmp_path / "hf"))
    gg = tm.load(write_gguf(tmp_path / "t.gguf", q4_1="blk.0.attn_q.weight"))
    assert hf.config.num_heads == gg.config.num_heads == 4
    assert all(np.isfinite(hf.logits([[1, 2, 3]])).ravel())


# -- non-finite weights ----------------------------------------------------------------------------

@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_hf_nonfinite_weight_is_refused_by_name(tmp_path, value):
    tensors = hf_tensors(HF_CONFIG)
    tensors["model.embed_tokens.weight"][5, :3] = value
    folder = write_hf(tmp_path / "hf", tensors=tensors)
    with pytest.raises(tm.CheckpointError, match=r"model\.safetensors: tensor model\.embed_tokens\.weight holds "
                                                 r"3 non-finite value"):
        tm.load(folder)


def test_gguf_nonfinite_norm_is_refused_by_name(tmp_path):
    def poison(a):
        a[7] = np.nan
        return a
    path = write_gguf(tmp_path / "nan.gguf", output_norm__weight=poison)
    with pytest.raises(tm.CheckpointError, match=r"nan\.gguf: tensor output_norm\.weight \(model\.norm\.weight\) "
                                                 r"holds 1 non-finite"):
        tm.load(path)


def test_gguf_q4_1_block_with_infinite_scale_is_refused_without_warnings(tmp_path):
    """An inf scale times nibble 0 is NaN: numpy warns inside gguf.dequantize; the load refuses, quietly."""
    def poison(blocks):                      # Q4_1 block: f16 d, f16 m, 16 bytes of nibbles
        blocks[0, 0:2] = INF_F16
        blocks[0, 4:20] = 0
        return blocks
    path = write_gguf(tmp_path / "q.gguf", q4_1="blk.0.attn_q.weight", blk__0__attn_q__weight=poison)
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # a RuntimeWarning leaking from gguf.dequantize fails the test
        with pytest.raises(tm.CheckpointError, match=r"tensor blk\.0\.attn_q\.weight .* holds 32 non-finite"):
            tm.load(path)


# -- out-of-range metadata -------------------------------------------------------------------------

@pytest.mark.parametrize("key, value, expected", [
    ("llama.rope.freq_base", float("nan"), "> 0"),
    ("llama.rope.freq_base", 0.0, "> 0"),
    ("llama.attention.layer_norm_rms_epsilon", -1.0, ">= 0"),
    ("llama.attention.head_count", 0, "positive integer"),
])
def test_gguf_out_of_range_value_is_named(tmp_path, key, value, expected):
    path = write_gguf(tmp_path / "m.gguf", meta={key: value})
    with pytest.raises(tm.CheckpointError) as e:
        tm.load(path)
    assert str(path) in str(e.value) and f"GGUF {key}=" in str(e.value) and expected in str(e.value)


def test_gguf_linear_rope_factor_zero_is_refused(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", meta={"llama.rope.scaling.type": "linear",
                                                  "llama.rope.scaling.factor": 0.0})
    with pytest.raises(tm.CheckpointError, match=r"llama\.rope\.scaling\.factor=0\.0 is out of range: "
                                                 r"expected a finite number > 0"):
        tm.load(path)


def test_gguf_partial_rotary_dimension_is_refused(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", meta={"llama.rope.dimension_count": 8})
    with pytest.raises(tm.UnsupportedModelError, match=r"llama\.rope\.dimension_count=8 differs from the head "
                                                       r"size 16"):
        tm.load(path)


def test_gguf_array_head_count_and_indivisible_heads_are_named(tmp_path):
    with pytest.raises(tm.CheckpointError, match=r"llama\.attention\.head_count is an array"):
        tm.load(write_gguf(tmp_path / "a.gguf", meta={"llama.attention.head_count": [4]}))
    with pytest.raises(tm.CheckpointError, match=r"embedding_length=64 is not divisible by "
                                                 r"llama\.attention\.head_count=7"):
        tm.load(write_gguf(tmp_path / "b.gguf", meta={"llama.attention.head_count": 7,
                                                      "llama.rope.dimension_count": None}))


def test_gguf_without_merges_is_named(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", meta={"tokenizer.ggml.merges": None})
    with pytest.raises(tm.CheckpointError, match=r"m\.gguf: GGUF metadata lacks tokenizer\.ggml\.merges"):
        tm.load(path)


@pytest.mark.parametrize("overrides, match", [
    ({"rope_theta": float("inf")}, r"rope_theta=inf is out of range: expected a finite number > 0"),
    ({"rms_norm_eps": -1e-6}, r"rms_norm_eps=-1e-06 is out of range: expected a finite number >= 0"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 0}}, r"rope_scaling\.factor=0 is out of range"),
    ({"rope_scaling": {"rope_type": "linear"}}, r"rope_scaling \(rope_type 'linear'\) lacks factor"),
    ({"rope_scaling": ["linear", 2.0]}, r"rope_scaling must be an object"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}},
     r"rope_parameters \(rope_type 'llama3'\) lacks low_freq_factor, high_freq_factor, "
     r"original_max_position_embeddings"),
    ({"num_attention_heads": 0}, r"num_attention_heads=0 is not supported: expected a positive integer"),
    ({"num_attention_heads": None}, r"config\.json lacks 'num_attention_heads'"),
    ({"vocab_size": None}, r"config\.json lacks 'vocab_size'"),
])
def test_hf_config_errors_name_the_key(tmp_path, overrides, match):
    folder = write_hf(tmp_path / "hf", **overrides)
    with pytest.raises(tm.CheckpointError, match=match) as e:
        tm.load(folder)
    assert os.path.join(folder, "config.json") in str(e.value)


def test_hf_config_that_is_not_an_object_is_refused(tmp_path):
    folder = write_hf(tmp_path / "hf")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump([1, 2], f)
    with pytest.raises(tm.CheckpointError, match=r"config\.json must hold a JSON object"):
        tm.load(folder)


def test_llama3_rope_with_every_key_still_loads():
    cfg = tm.config_from_hf({**HF_CONFIG,
                             "rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 32}})
    assert cfg.rope.rope_type == "llama3" and cfg.rope.original_max_position_embeddings == 32


# -- malformed safetensors -------------------------------------------------------------------------

def _offsets_overlap(header):
    names = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    a, b = names[0], names[1]
    size = header[b]["data_offsets"][1] - header[b]["data_offsets"][0]
    header[b]["data_offsets"] = [header[a]["data_offsets"][0], header[a]["data_offsets"][0] + size]


def _offset_past_end(header):
    last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    header[last]["data_offsets"] = [o + 1024 for o in header[last]["data_offsets"]]


def _no_dtype(header):
    del header["model.norm.weight"]["dtype"]


@pytest.mark.parametrize("edit, match", [
    (_offsets_overlap, r"overlaps the tensor before it"),
    (_offset_past_end, r"leaves a gap before it"),
    (_no_dtype, r"entry 'model\.norm\.weight' lacks 'dtype'"),
])
def test_malformed_safetensors_header_is_refused(tmp_path, edit, match):
    folder = write_hf(tmp_path / "hf")
    path = os.path.join(folder, "model.safetensors")
    edit_safetensors_header(path, edit)
    with pytest.raises(tm.CheckpointError, match=match) as e:
        tm.load(folder)
    assert path in str(e.value)


def test_safetensors_header_size_past_the_file_is_refused(tmp_path):
    folder = write_hf(tmp_path / "hf")
    path = os.path.join(folder, "model.safetensors")
    with open(path, "r+b") as f:
        f.write(struct.pack("<Q", 2 ** 62))
    with pytest.raises(tm.CheckpointError, match=r"header size field says 4611686018427387904 bytes"):
        tm.load(folder)


def test_index_without_weight_map_is_named(tmp_path):
    folder = write_hf(tmp_path / "hf")
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}}, f)
    with pytest.raises(tm.CheckpointError, match=r"index\.json lacks a 'weight_map' object"):
        tm.load(folder)
