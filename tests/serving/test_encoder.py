"""Encoder artifacts: a tiny seeded BERT exported and served by Engine.embed, against transformers and eager."""
import numpy as np
import pytest


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from models.helpers import torch_threads
    from .fixtures import write_byte_tokenizer
    config = transformers.BertConfig(vocab_size=256, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, max_position_embeddings=64, initializer_range=0.2)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    with torch_threads(1):
        model = transformers.BertModel(config).eval()
    folder = tmp_path_factory.mktemp("bert")
    model.save_pretrained(folder)
    write_byte_tokenizer(folder)
    return model, str(folder)


def _mean_pool(hf, rows):
    import torch
    T = max(map(len, rows))
    ids = torch.tensor([r + [0] * (T - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in rows])
    with torch.no_grad():
        states = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask[..., None].float()
    pooled = (states * m).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def test_embed_matches_transformers_and_eager(tiny_bert, tmp_path):
    import tlaloc.models as tm
    from tlaloc.serving import CapacityError, Engine
    from tlaloc.serving.errors import ArgumentError
    from tlaloc.serving.export import export
    hf, folder = tiny_bert
    export(folder, tmp_path / "art", batch=(1, 4), context=(16, 32), progress=False)
    eng = Engine(tmp_path / "art", fast_compile=True)
    assert eng.kind == "encoder"
    rows = [[2, 5, 9, 11, 40, 3], [2, 7, 3], [2] + list(range(100, 120)) + [3], [2, 3], [9] * 5]   # 5 rows: 2 batches
    got = eng.embed(rows)
    assert got.shape == (5, 48) and got.dtype == np.float32
    cos = (got * _mean_pool(hf, rows)).sum(-1)
    assert cos.min() >= 0.9999, cos
    np.testing.assert_allclose(got, tm.load(folder).embed(rows), atol=2e-5)
    text = eng.embed(["hello there"])
    np.testing.assert_allclose(text, tm.load(folder).embed(["hello there"]), atol=2e-5)
    with pytest.raises(CapacityError, match="40 tokens, over the artifact's largest context 32"):
        eng.embed([[5] * 40])
    with pytest.raises(ArgumentError, match="encoder artifact; use embed"):
        eng.generate([[1, 2]])
