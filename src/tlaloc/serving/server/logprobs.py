"""OpenAI's ``logprobs`` response fields from the engine's per-token log-probabilities.

The engine gives, per generated token, a :class:`~tlaloc.serving.runtime.requests.TokenLogprobs`
(ids and float32 log-probabilities in nats). Here they become OpenAI's two layouts:

- ``/v1/completions`` (legacy ``logprobs: int``, 0..5): ``{"tokens", "token_logprobs",
  "top_logprobs", "text_offset"}``, where ``top_logprobs[i]`` maps token text to logprob
  (tokens with the same text keep the most likely) and ``text_offset[i]`` is where token
  ``i``'s text starts in the completion (vLLM's convention without ``echo``): the length
  of the text its predecessors decode to, a character they leave unfinished excluded, so
  the pieces of a character split over several tokens all point at that character in
  ``text`` (their ``tokens`` entries are each U+FFFD, as ``tokenizer.decode([id])`` gives);
- ``/v1/chat/completions`` (``logprobs: true``, ``top_logprobs`` 0..20): ``{"content":
  [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}],
  "refusal": None}``.

A token's text is ``tokenizer.decode([id])``; its ``bytes`` are its UTF-8 bytes, or, for
a byte-level BPE piece that ends inside a character (its text then holds U+FFFD), the
raw bytes the piece stands for.
"""
from __future__ import annotations

import functools

_REPLACEMENT = "\ufffd"


@functools.lru_cache(maxsize=1)
def _byte_level_inverse() -> dict:
    """GPT-2's byte-level alphabet, inverted: the printable character that stands for each byte -> the byte."""
    direct = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in direct:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class TokenText:
    """Token id -> (text, UTF-8 bytes), cached per tokenizer."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._cache: dict = {}

    def __call__(self, token_id: int) -> tuple:
        hit = self._cache.get(token_id)
        if hit is None:
            text = self._tokenizer.decode([token_id]) if self._tokenizer is not None else ""
            raw = text.encode("utf-8")
            if _REPLACEMENT in text:
                piece = self._tokenizer.id_to_token(token_id) or ""
                inverse = _byte_level_inverse()
                if piece and all(c in inverse for c in piece):
                    raw = bytes(inverse[c] for c in piece)
            hit = self._cache[token_id] = (text, list(raw))
        return hit


def completion_logprobs(entries: list, token_text: TokenText, offset: int = 0, pending: bytes = b"") -> tuple:
    """The legacy completions ``logprobs`` object of ``entries`` (TokenLogprobs), whose first token
    starts at character ``offset`` of the completion, after the bytes ``pending`` of a character
    not yet finished; returns ``(object, offset after the last, bytes still pending)`` for the next call.

    Offsets count the characters the tokens' bytes decode to (UTF-8, each invalid part replaced by
    one U+FFFD, as the tokenizer's decode does), the bytes of an unfinished character excluded, so
    the pieces of a character split over several tokens all start at that character."""
    tokens, values, tops, offsets = [], [], [], []
    for e in entries:
        text, raw = token_text(e.token_id)
        tokens.append(text)
        values.append(e.logprob)
        top: dict = {}
        for tid, lp in e.top:
            top.setdefault(token_text(tid)[0], lp)          # most likely first: the first of a text wins
        tops.append(top)
        raw = bytes(raw)
        broken = bool(pending and raw) and not _next_ok(pending, raw[0])    # it breaks an unfinished
        offsets.append(offset + 1 if broken else offset)                     # character: one U+FFFD first
        data = pending + raw
        cut = len(data) - _unfinished(data)
        offset += len(data[:cut].decode("utf-8", "replace"))
        pending = data[cut:]
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}, offset, pending


def _second(lead: int) -> tuple:
    """The range of the byte after ``lead`` in a valid UTF-8 character (UTF-8's table: no overlongs, surrogates
    or code points over U+10FFFF)."""
    return {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(lead, (0x80, 0xBF))


def _next_ok(pending: bytes, byte: int) -> bool:
    """Whether ``byte`` validly goes on with the unfinished character ``pending``."""
    low, high = _second(pending[0]) if len(pending) == 1 else (0x80, 0xBF)
    return low <= byte <= high


def _unfinished(data: bytes) -> int:
    """How many bytes at the end of ``data`` begin a UTF-8 character validly without finishing it."""
    for n in range(1, min(3, len(data)) + 1):
        lead = data[-n]
        if lead < 0xC0:
            continue                                     # a continuation byte (or ASCII): look further back
        size = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF4 else 0
        if n >= size:
            return 0                                     # finished (or not a lead byte at all)
        low, high = _second(lead)
        rest = data[len(data) - n + 1:]
        ok = all(0x80 <= b <= 0xBF for b in rest) and (not rest or low <= rest[0] <= high)
        return n if ok else 0
    return 0


def chat_logprobs(entries: list, token_text: TokenText) -> dict:
    """The chat ``logprobs`` object (``{"content": [...], "refusal": None}``) of ``entries``."""
    content = []
    for e in entries:
        text, raw = token_text(e.token_id)
        top = [{"token": token_text(tid)[0], "logprob": lp, "bytes": token_text(tid)[1]} for tid, lp in e.top]
        content.append({"token": text, "logprob": e.logprob, "bytes": raw, "top_logprobs": top})
    return {"content": content, "refusal": None}


__all__ = ["TokenText", "completion_logprobs", "chat_logprobs"]
