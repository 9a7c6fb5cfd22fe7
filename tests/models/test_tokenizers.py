"""Tokenizers from a Hugging Face folder and chat templates, against transformers' AutoTokenizer."""
import json

import pytest

from .helpers import require

require("transformers", "tokenizers", "jinja2")

import tlaloc.models as tm  # noqa: E402

TEXTS = ["hello world", "the cat sat on the mat, twice!", "  spaces  and\nnewlines\t"]
CHAT = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}" \
       "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello world"}]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A byte-level BPE trained on a few lines, saved by transformers with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(TEXTS * 20 + ["the quick brown fox jumps over the lazy dog"] * 20, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", bos_token="<|endoftext|>")
    tok.chat_template = CHAT
    path = tmp_path_factory.mktemp("tok")
    tok.save_pretrained(path)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return path


def test_folder_tokenizer_matches_transformers(folder):
    from transformers import AutoTokenizer
    ref = AutoTokenizer.from_pretrained(folder)
    ours = tm.tokenizer.tokenizer_from_folder(str(folder))
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == ref(text).input_ids
        assert ours.decode(ids) == ref.decode(ids)
    assert ours.eos_token == "<|im_end|>"


def test_chat_template_matches_transformers(folder):
    from transformers import AutoTokenizer
    ref = AutoTokenizer.from_pretrained(folder)
    ours = tm.tokenizer.tokenizer_from_folder(str(folder))
    text = ours.apply_chat_template(MESSAGES)
    assert text == ref.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    ids = ours.encode(text, add_special_tokens=False)
    assert ids == ref.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=True, return_dict=False)
    assert ids.count(ours.token_to_id("<|im_start|>")) == 3


def test_no_chat_template_is_refused(folder, tmp_path):
    from tokenizers import Tokenizer
    ours = tm.Tokenizer(Tokenizer.from_file(str(folder / "tokenizer.json")))
    with pytest.raises(tm.UnsupportedModelError, match="no chat template"):
        ours.apply_chat_template(MESSAGES)
