"""A fake ``tlaloc.serving.Engine``: the streaming protocol the front doors are built on.

It speaks exactly the engine's interface (``submit``/``step``/``cancel``/``has_work``/
``stats``/``embed`` and the attributes ``tokenizer``, ``chat_template``, ``model_name``,
``kind``, ``max_context``), with:

- a real ``tokenizers.Tokenizer`` built in memory: byte-level BPE over the 256 byte
  symbols (so multi-byte characters arrive split across tokens) plus three specials;
- deterministic tokens: a request's output is :data:`PHRASE` encoded and rotated by a
  hash of its prompt (and its seed when ``temperature > 0``); after the phrase's ``.``
  comes ``<|endoftext|>``, which ends the request when it is in ``stop_ids``;
- continuous batching: at most ``max_batch`` requests run, the rest wait; a step emits
  one token per running request (the first step of a request is its "prefill");
- page accounting (``block_size`` tokens a page) so tests can assert nothing leaks;
- a configurable ``step_latency_s``, and a guard that fails loudly when two threads
  call into it at once (the real engine is not thread-safe either).

It records what the server asked of it: ``submitted`` (request id -> kwargs),
``cancelled`` (ids) and ``embed_calls`` (batch sizes).
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import threading
import time

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

PHRASE = "the quick brown 🦊 jumps over the lazy dog. "
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EOS_ID = 256
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@dataclasses.dataclass(frozen=True)
class Event:
    request_id: str
    token_ids: list
    finished: bool
    finish_reason: str | None = None
    error: str | None = None


def byte_level_tokenizer() -> Tokenizer:
    """Byte-level BPE with no merges: ids 0..255 are the bytes, 256.. the specials."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_to_char = _bytes_to_unicode()
    vocab = {byte_to_char[b]: b for b in range(256)}
    assert set(vocab) == set(alphabet)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIALS))
    return tokenizer


def _bytes_to_unicode() -> dict:
    """GPT-2's byte -> printable character table (what ByteLevel uses)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


@dataclasses.dataclass
class _Request:
    request_id: str
    prompt: list
    stream: list            # the ids this request will emit, in order
    max_new_tokens: int
    stop_ids: tuple
    emitted: int = 0
    pages: int = 0


class FakeEngine:
    def __init__(self, *, kind: str = "decoder", max_context: int = 256, max_batch: int = 8,
                 step_latency_s: float = 0.0, block_size: int = 16, kv_pages_total: int = 512,
                 model_name: str = "fake-tiny", chat_template: str | None = CHAT_TEMPLATE,
                 embed_dim: int = 8, embed_latency_s: float = 0.0):
        self.tokenizer = byte_level_tokenizer()
        self.chat_template = chat_template
        self.model_name = model_name
        self.kind = kind
        self.max_context = max_context
        self.eos_token_ids = (EOS_ID,)
        self.bos_token, self.eos_token = "", "<|endoftext|>"
        self.max_batch, self.block_size = max_batch, block_size
        self.step_latency_s, self.embed_latency_s, self.embed_dim = step_latency_s, embed_latency_s, embed_dim
        self.kv_pages_total = kv_pages_total
        self.submitted: dict = {}
        self.cancelled: list = []
        self.embed_calls: list = []
        self.step_calls = 0
        self._running: dict = {}
        self._waiting: list = []
        self._tokens_in = self._tokens_out = 0
        self._ids = itertools.count()
        self._guard = threading.Lock()
        self._phrase_ids = self.tokenizer.encode(PHRASE).ids

    # -- the protocol -------------------------------------------------------------------
    def submit(self, prompt_ids, *, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
               seed=None, stop_ids=(), request_id=None) -> str:
        with self._exclusive():
            vocab = self.tokenizer.get_vocab_size(with_added_tokens=True)
            if self.kind != "decoder":
                raise ValueError(f"{self.model_name} is an encoder artifact; it cannot generate")
            if not prompt_ids:
                raise ValueError("prompt_ids is empty; a prompt needs at least one token")
            bad = [t for t in prompt_ids if not (isinstance(t, int) and 0 <= t < vocab)]
            if bad:
                raise ValueError(f"token id {bad[0]!r} is out of range [0, {vocab})")
            if max_new_tokens < 1:
                raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
            if len(prompt_ids) + max_new_tokens > self.max_context:
                raise ValueError(f"prompt of {len(prompt_ids)} tokens + max_new_tokens={max_new_tokens} "
                                 f"exceeds the largest context bucket ({self.max_context})")
            rid = request_id or f"fake-{next(self._ids)}"
            key = repr((list(prompt_ids), seed if temperature > 0 else None)).encode()
            shift = int.from_bytes(hashlib.sha256(key).digest()[:4], "little") % len(self._phrase_ids)
            stream = self._phrase_ids[shift:] + self._phrase_ids[:shift]
            dot = stream.index(self.tokenizer.token_to_id("."))
            stream = stream[:dot + 1] + [EOS_ID] + stream[dot + 1:]
            self.submitted[rid] = dict(prompt_ids=list(prompt_ids), max_new_tokens=max_new_tokens,
                                       temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                       stop_ids=tuple(stop_ids))
            self._waiting.append(_Request(rid, list(prompt_ids), stream * 8, max_new_tokens,
                                          tuple(stop_ids)))
            self._tokens_in += len(prompt_ids)
            return rid

    def step(self) -> list:
        with self._exclusive():
            self.step_calls += 1
            if self.step_latency_s:
                time.sleep(self.step_latency_s)
            while self._waiting and len(self._running) < self.max_batch:
                request = self._waiting.pop(0)
                self._running[request.request_id] = request
            events = []
            for rid, request in list(self._running.items()):
                token = request.stream[request.emitted % len(request.stream)]
                request.emitted += 1
                request.pages = -(-(len(request.prompt) + request.emitted) // self.block_size)
                self._tokens_out += 1
                reason = "stop" if token in request.stop_ids else \
                    "length" if request.emitted >= request.max_new_tokens else None
                if reason:
                    del self._running[rid]
                events.append(Event(rid, [token], reason is not None, reason, None))
            return events

    def cancel(self, request_id: str) -> None:
        with self._exclusive():
            self.cancelled.append(request_id)
            self._running.pop(request_id, None)
            self._waiting = [r for r in self._waiting if r.request_id != request_id]

    def has_work(self) -> bool:
        return bool(self._running or self._waiting)

    def stats(self) -> dict:
        return dict(running=len(self._running), waiting=len(self._waiting),
                    kv_pages_used=sum(r.pages for r in self._running.values()),
                    kv_pages_total=self.kv_pages_total, tokens_in=self._tokens_in,
                    tokens_out=self._tokens_out)

    def embed(self, texts) -> np.ndarray:
        with self._exclusive():
            if self.kind != "encoder":
                raise ValueError(f"{self.model_name} is a decoder artifact; embed needs an encoder")
            self.embed_calls.append(len(texts))
            if self.embed_latency_s:
                time.sleep(self.embed_latency_s)
            rows = []
            for text in texts:
                seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
                row = np.random.default_rng(seed).standard_normal(self.embed_dim)
                rows.append(row / np.linalg.norm(row))
            return np.asarray(rows, dtype=np.float32).reshape(len(texts), self.embed_dim)  # (n, dim)

    # -- helpers for tests ----------------------------------------------------------------
    def expected_ids(self, prompt_ids, max_new_tokens, *, temperature=0.0, seed=None, stop_ids=(EOS_ID,)):
        """The ids a request would produce run alone (the oracle for the server's answers)."""
        twin = FakeEngine(max_context=self.max_context)
        rid = twin.submit(list(prompt_ids), max_new_tokens=max_new_tokens, temperature=temperature,
                          seed=seed, stop_ids=stop_ids)
        out = []
        while twin.has_work():
            for event in twin.step():
                assert event.request_id == rid
                out += event.token_ids
        return out

    def _exclusive(self):
        if not self._guard.acquire(blocking=False):
            raise AssertionError("FakeEngine called from two threads at once")
        return _Release(self._guard)


class _Release:
    def __init__(self, lock):
        self._lock = lock

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._lock.release()


def load_fake(artifact_dir: str) -> FakeEngine:
    """An ``engine_factory`` for Triton tests: a FakeEngine of the kind the manifest names."""
    import json
    import os
    with open(os.path.join(artifact_dir, "manifest.json")) as f:
        manifest = json.load(f)
    return FakeEngine(kind=manifest.get("kind", "decoder"), model_name=manifest["model"]["name"])


def write_fake_artifact(path, kind: str = "decoder", name: str = "fake-tiny") -> str:
    """A directory that looks like an artifact to ``triton_repo`` (manifest only)."""
    import json
    import os
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump({"schema": "tlaloc.serving.artifact", "schema_version": 1, "kind": kind,
                   "model": {"name": name}}, f)
    return str(path)
