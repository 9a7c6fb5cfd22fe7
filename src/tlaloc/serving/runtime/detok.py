"""Token ids -> text, incrementally, with stop strings: what one choice of a stream prints.

Text is released only when it is final:

- a token that ends inside a multi-byte character decodes to U+FFFD; it is held until
  the character completes (byte-level BPE splits emoji across several tokens);
- text that could be the start of a stop string is held until it cannot be.

The deltas a :class:`TextStream` releases concatenate to
``tokenizer.decode(all_ids, skip_special_tokens=True)`` cut before the first stop
string, the same text a non-streamed answer gets. Decoding works on a sliding window
(``_prefix``..end), so a long answer costs O(length), not O(length^2).
"""
from __future__ import annotations

from typing import Sequence

_REPLACEMENT = "\ufffd"


class TextStream:
    """The text of one generated sequence, released as it becomes final.

    Arguments:
        tokenizer: a ``tokenizers.Tokenizer``.
        stop: stop strings; the text ends before the first one found.
    """

    def __init__(self, tokenizer, stop: Sequence[str] = ()):
        self._tokenizer = tokenizer
        self._stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self.token_ids: list[int] = []
        self._prefix = 0         # window start: ids before it are already final text
        self._read = 0           # ids up to here are decoded into self._text
        self._text = ""          # all final text so far (released or held)
        self._released = 0       # chars of self._text handed out
        self.stopped = False     # a stop string was found

    def push(self, ids: Sequence[int]) -> str:
        """Add new token ids; return the text that became final (maybe "")."""
        if self.stopped:
            return ""
        self.token_ids.extend(int(i) for i in ids)
        self._decode_window(final=False)
        return self._release(final=False)

    def finish(self) -> str:
        """The sequence ended: return all text still held."""
        if not self.stopped:
            self._decode_window(final=True)
        return self._release(final=True)

    @property
    def text(self) -> str:
        """All text released so far."""
        return self._text[:self._released]

    def _decode_window(self, final: bool) -> None:
        decode = self._tokenizer.decode
        before = decode(self.token_ids[self._prefix:self._read], skip_special_tokens=True)
        after = decode(self.token_ids[self._prefix:], skip_special_tokens=True)
        if len(after) <= len(before) or (after.endswith(_REPLACEMENT) and not final):
            return           # nothing new, or a character still incomplete
        self._text += after[len(before):]
        self._prefix, self._read = self._read, len(self.token_ids)
        self._find_stop()

    def _find_stop(self) -> None:
        if not self._stop:
            return
        start = max(0, self._released - self._hold)
        hits = [i for i in (self._text.find(s, start) for s in self._stop) if i >= 0]
        if hits:
            self._text = self._text[:min(hits)]
            self.stopped = True

    def _release(self, final: bool) -> str:
        end = len(self._text) if (final or self.stopped) else self._safe_end()
        delta = self._text[self._released:end]
        self._released = end
        return delta

    def _safe_end(self) -> int:
        """Release all but the longest tail that is a proper prefix of some stop string."""
        for cut in range(max(len(self._text) - self._hold, self._released), len(self._text)):
            tail = self._text[cut:]
            if any(s.startswith(tail) for s in self._stop):
                return cut
        return len(self._text)
