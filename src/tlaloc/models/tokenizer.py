"""Tokenizers: a ``tokenizers.Tokenizer`` plus the special tokens and chat template beside it.

Read from a Hugging Face folder (``tokenizer.json``, ``tokenizer_config.json``,
``chat_template.jinja``) or built from GGUF metadata (byte-level BPE: vocabulary,
merges and token types, see :func:`tokenizer_from_gguf_fields`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Sequence

from .errors import CheckpointError, UnsupportedModelError

# How llama.cpp splits text before BPE, by ``tokenizer.ggml.pre`` (the regexes transformers uses too).
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_PRE_SPLITS = {"default": _GPT2_SPLIT, "gpt2": _GPT2_SPLIT, "smollm": _GPT2_SPLIT,
               "llama3": _LLAMA3_SPLIT, "llama-v3": _LLAMA3_SPLIT, "llama-bpe": _LLAMA3_SPLIT,
               "smaug-bpe": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT, "deepseek-r1-qwen": _QWEN2_SPLIT}
_DIGITS_FIRST = {"smollm"}  # llama.cpp splits every digit on its own before the regex for these
_CONTROL, _USER_DEFINED = 3, 4


@dataclass
class Tokenizer:
    """Text <-> token ids, with the model's special tokens and chat template.

    ``encode`` applies the backend's post-processor (e.g. a BOS) when
    ``add_special_tokens``; chat text from :meth:`apply_chat_template` already spells
    its special tokens and is encoded without adding any.
    """
    backend: object  # tokenizers.Tokenizer
    chat_template: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None
    extra: dict = field(default_factory=dict)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
        return [list(e.ids) for e in self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def apply_chat_template(self, messages: Sequence[dict], add_generation_prompt: bool = True, **kwargs) -> str:
        """Render ``messages`` ([{"role", "content"}, ...]) with the model's Jinja chat template."""
        if not self.chat_template:
            raise UnsupportedModelError("this tokenizer has no chat template (no chat_template in "
                                        "tokenizer_config.json, chat_template.jinja or the GGUF metadata)")
        return _render_chat(self.chat_template, messages, add_generation_prompt,
                            bos_token=self.bos_token or "", eos_token=self.eos_token or "", **kwargs)


def _render_chat(template: str, messages, add_generation_prompt: bool, **kwargs) -> str:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(
        x, indent=indent, ensure_ascii=ensure_ascii)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=list(messages),
                                            add_generation_prompt=add_generation_prompt, **kwargs)


def _token_text(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return value.get("content")  # AddedToken serialized as a dict


def tokenizer_from_folder(folder: str) -> Tokenizer | None:
    """The tokenizer of a Hugging Face folder, or None when it has no ``tokenizer.json``."""
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.exists(path):
        return None
    from tokenizers import Tokenizer as Backend
    backend = Backend.from_file(path)
    backend.no_padding()      # callers pad (and mask) themselves
    backend.no_truncation()   # a too-long input is refused by the caller, never silently cut
    config = {}
    config_path = os.path.join(folder, "tokenizer_config.json")
    if os.path.exists(config_path):
        with open(config_path) as f:
            config = json.load(f)
    template = config.get("chat_template")
    jinja_path = os.path.join(folder, "chat_template.jinja")
    if os.path.exists(jinja_path):
        with open(jinja_path) as f:
            template = f.read()
    if isinstance(template, list):  # named templates: take the default one
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    return Tokenizer(backend, template, _token_text(config.get("bos_token")),
                     _token_text(config.get("eos_token")), extra=config)


def tokenizer_from_gguf_fields(fields: dict) -> Tokenizer:
    """A byte-level BPE tokenizer from GGUF metadata (``tokenizer.ggml.*`` and ``tokenizer.chat_template``).

    fields maps metadata keys to Python values. Tokens of type CONTROL become special
    tokens and USER_DEFINED ones plain added tokens, matched whole. No BOS is added by
    ``encode``: the chat template writes its own control tokens.
    """
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    kind = fields.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise UnsupportedModelError(
            f"GGUF tokenizer.ggml.model={kind!r} is not supported; only byte-level BPE ('gpt2') is")
    pre = fields.get("tokenizer.ggml.pre", "default")
    if pre not in _PRE_SPLITS:
        raise UnsupportedModelError(f"GGUF tokenizer.ggml.pre={pre!r} is not supported; supported: "
                                    f"{', '.join(sorted(_PRE_SPLITS))}")
    tokens = list(fields["tokenizer.ggml.tokens"])
    if fields.get("tokenizer.ggml.merges") is None:
        raise CheckpointError("GGUF metadata lacks tokenizer.ggml.merges: a byte-level BPE ('gpt2') tokenizer "
                              "needs its merge list; re-convert the model with llama.cpp's converter")
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    backend = Backend(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    steps = [pre_tokenizers.Digits(individual_digits=True)] if pre in _DIGITS_FIRST else []
    steps += [pre_tokenizers.Split(Regex(_PRE_SPLITS[pre]), behavior="isolated"),
              pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    backend.pre_tokenizer = pre_tokenizers.Sequence(steps)
    backend.decoder = decoders.ByteLevel()
    types = list(fields.get("tokenizer.ggml.token_type") or [])
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t, ty in zip(tokens, types) if ty == _CONTROL])
    backend.add_tokens([AddedToken(t, special=False, normalized=False)
                        for t, ty in zip(tokens, types) if ty == _USER_DEFINED])

    def special(key):
        i = fields.get(f"tokenizer.ggml.{key}")
        return tokens[int(i)] if i is not None and int(i) < len(tokens) else None

    return Tokenizer(backend, fields.get("tokenizer.chat_template"), special("bos_token_id"),
                     special("eos_token_id"), extra={"pre": pre})
