"""OpenAI's ``logprobs`` response fields from the engine's per-token log-probabilities.

The engine gives, per generated token, a :class:`~tlaloc.serving.runtime.requests.TokenLogprobs`
(ids and float32 log-probabilities in nats). Here they become OpenAI's two layouts:

- ``/v1/completions`` (legacy ``logprobs: int``, 0..5): ``{"tokens", "token_logprobs",
  "top_logprobs", "text_offset"}``, where ``top_logprobs[i]`` maps token text to logprob
  (tokens with the same text keep the most likely) and ``text_offset[i]`` is where token
  ``i``'s text starts in the completion (vLLM's convention without ``echo``);
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


def completion_logprobs(entries: list, token_text: TokenText, offset: int = 0) -> tuple:
    """The legacy completions ``logprobs`` object of ``entries`` (TokenLogprobs), whose first token
    starts at character ``offset`` of the completion; returns ``(object, offset after the last)``."""
    tokens, values, tops, offsets = [], [], [], []
    for e in entries:
        text = token_text(e.token_id)[0]
        tokens.append(text)
        values.append(e.logprob)
        top: dict = {}
        for tid, lp in e.top:
            top.setdefault(token_text(tid)[0], lp)          # most likely first: the first of a text wins
        tops.append(top)
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}, offset


def chat_logprobs(entries: list, token_text: TokenText) -> dict:
    """The chat ``logprobs`` object (``{"content": [...], "refusal": None}``) of ``entries``."""
    content = []
    for e in entries:
        text, raw = token_text(e.token_id)
        top = [{"token": token_text(tid)[0], "logprob": lp, "bytes": token_text(tid)[1]} for tid, lp in e.top]
        content.append({"token": text, "logprob": e.logprob, "bytes": raw, "top_logprobs": top})
    return {"content": content, "refusal": None}


__all__ = ["TokenText", "completion_logprobs", "chat_logprobs"]
