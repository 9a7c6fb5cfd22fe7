"""Request fields -> prompt token ids, checked against the engine before it sees them.

Completions take a string, a list of strings, a list of token ids or a list of lists
of token ids; chats are rendered with the engine's chat template and encoded without
adding special tokens (the template spells them). Token ids outside the
vocabulary and prompts that do not fit ``engine.max_context`` together with their
``max_tokens`` are refused with a 400 naming the prompt; the engine's own ``ValueError``
stays the final word for anything else.
"""
from __future__ import annotations

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


def chat_prompt(engine, messages: list[dict]) -> str:
    """``messages`` rendered with the engine's chat template, ending with the assistant's turn.

    Uses ``engine.apply_chat_template`` when the engine has it (it knows the artifact's
    BOS/EOS strings), else renders ``engine.chat_template`` with :mod:`tlaloc.serving.chat`.
    """
    if not engine.chat_template:
        raise OpenAIError(400, "this model has no chat template (none in its tokenizer files); use "
                               "/v1/completions with a prompt you format yourself",
                          param="messages", code="no_chat_template")
    import jinja2
    try:
        if hasattr(engine, "apply_chat_template"):
            return engine.apply_chat_template(messages)
        from .chat import render_chat
        return render_chat(engine.chat_template, messages, True,
                           bos_token=getattr(engine, "bos_token", "") or "",
                           eos_token=getattr(engine, "eos_token", "") or "")
    except (jinja2.TemplateError, ValueError) as exc:
        raise OpenAIError(400, f"the chat template refused these messages: {exc}", param="messages",
                          code="invalid_messages") from None
