"""Request fields -> prompt token ids, checked against the engine before it sees them.

Completions take a string, a list of strings, a list of token ids or a list of lists
of token ids; chats are rendered with the engine's Jinja chat template (sandboxed) and
encoded without adding special tokens (the template spells them). Token ids outside the
vocabulary and prompts that do not fit ``engine.max_context`` together with their
``max_tokens`` are refused with a 400 naming the prompt; the engine's own ``ValueError``
stays the final word for anything else.
"""
from __future__ import annotations

import json

from .openai_schema import OpenAIError


def vocab_size(tokenizer) -> int:
    return int(tokenizer.get_vocab_size(with_added_tokens=True))


def prompt_token_lists(tokenizer, prompt, *, param: str = "prompt") -> list[list[int]]:
    """The prompts of a completion (or embedding) request as lists of token ids."""
    if isinstance(prompt, str):
        prompts = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        prompts = [list(prompt)]
    else:
        prompts = list(prompt)
    if not prompts:
        raise OpenAIError(400, f"'{param}' is empty", param=param, code="invalid_value")
    out = []
    for index, item in enumerate(prompts):
        ids = list(tokenizer.encode(item).ids) if isinstance(item, str) else list(item)
        where = param if len(prompts) == 1 else f"{param}[{index}]"
        if not ids:
            raise OpenAIError(400, f"{where} has no tokens; send at least one", param=param,
                              code="invalid_value")
        check_token_ids(tokenizer, ids, where, param)
        out.append(ids)
    return out


def check_token_ids(tokenizer, ids: list[int], where: str, param: str) -> None:
    size = vocab_size(tokenizer)
    for position, token in enumerate(ids):
        if not 0 <= token < size:
            raise OpenAIError(400, f"{where} holds token id {token} at position {position}; the "
                                   f"vocabulary has ids 0..{size - 1}", param=param, code="invalid_token_id")


def check_capacity(prompts: list[list[int]], max_tokens: int, max_context: int, *,
                   param: str = "prompt") -> None:
    """Refuse prompt + max_tokens over the engine's largest context (never clamp)."""
    for ids in prompts:
        if len(ids) + max_tokens > max_context:
            raise OpenAIError(
                400, f"this model's maximum context length is {max_context} tokens; you requested "
                     f"{len(ids) + max_tokens} tokens ({len(ids)} in the prompt, {max_tokens} for the "
                     f"completion). Shorten the prompt or lower max_tokens.",
                param=param, code="context_length_exceeded")


def render_chat(template: str | None, messages: list[dict], *, bos_token: str = "",
                eos_token: str = "") -> str:
    """``messages`` rendered with a Hugging Face chat template, ending with the assistant's turn."""
    if not template:
        raise OpenAIError(400, "this model has no chat template (none in its tokenizer files); use "
                               "/v1/completions with a prompt you format yourself",
                          param="messages", code="no_chat_template")
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False, **_: json.dumps(
        x, indent=indent, ensure_ascii=ensure_ascii)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(messages=messages, add_generation_prompt=True,
                                                bos_token=bos_token, eos_token=eos_token)
    except jinja2.exceptions.TemplateError as exc:
        raise OpenAIError(400, f"the chat template refused these messages: {exc}", param="messages",
                          code="invalid_messages") from None
