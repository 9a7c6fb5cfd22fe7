"""TextStream: incremental text equals whole decoding, cut before the first stop string."""
import pytest

from tlaloc.serving.runtime.detok import TextStream

from .fake_engine import EOS_ID, byte_level_tokenizer

TOKENIZER = byte_level_tokenizer()
TEXTS = ["plain ascii text", "the quick brown 🦊 jumps", "日本語のテキスト and more", "é🦊é🦊 🦊🦊", "a"]


def run(text, chunk, stop=(), extra=()):
    ids = TOKENIZER.encode(text).ids + list(extra)
    stream, deltas = TextStream(TOKENIZER, stop), []
    for start in range(0, len(ids), chunk):
        deltas.append(stream.push(ids[start:start + chunk]))
        if stream.stopped:
            break
    deltas.append(stream.finish())
    return deltas, stream


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
@pytest.mark.parametrize("text", TEXTS)
def test_deltas_concatenate_to_the_whole_decode(text, chunk):
    deltas, stream = run(text, chunk, extra=[EOS_ID])
    assert "".join(deltas) == text == stream.text
    assert all("\ufffd" not in d for d in deltas)                 # never half a character
    assert not stream.stopped


@pytest.mark.parametrize("chunk", [1, 4])
@pytest.mark.parametrize("text, stop, expected", [
    ("the quick brown fox", ["brown"], "the quick "),
    ("the quick brown fox", ["zzz", "k b"], "the quic"),
    ("the quick brown fox", ["quiet", "fox"], "the quick brown "),   # "qui" starts a stop, then doesn't
    ("a 🦊 b", ["🦊"], "a "),
    ("no stop here", ["xyz"], "no stop here"),
    ("stop at start", ["stop"], ""),
])
def test_stop_strings(text, stop, expected, chunk):
    deltas, stream = run(text, chunk, stop)
    assert "".join(deltas) == expected == stream.text
    assert stream.stopped == (expected != text)


def test_held_text_is_only_a_possible_stop_prefix():
    stream = TextStream(TOKENIZER, ["lazy dog"])
    released = "".join(stream.push([i]) for i in TOKENIZER.encode("over the la").ids)
    assert released == "over the "                                 # "la" might begin "lazy dog"
    assert stream.push(TOKENIZER.encode("b").ids) == "lab"         # it didn't
