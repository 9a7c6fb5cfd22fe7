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


def prompt_count(prompt) -> int:
    """How many prompts a completion's ``prompt`` field holds (checked against the limits first)."""
    if isinstance(prompt, str) or (prompt and all(isinstance(p, int) for p in prompt)):
        return 1
    return len(prompt)


def prompt_token_lists(tokenizer, prompt, *, param: str = "prompt") -> list[list[int]]:
    """The prompts of a completion (or embedding) request as lists of token ids.

    CPU-heavy (an 8 MB prompt takes seconds): the server runs it in a worker thread. Text
    goes through ``encode_batch``, which releases the GIL (``encode`` holds it).
    """
    if isinstance(prompt, str):
        prompts = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        prompts = [list(prompt)]
    else:
        prompts = list(prompt)
    if not prompts:
        raise OpenAIError(400, f"'{param}' is empty", param=param, code="invalid_value")
    texts = [item for item in prompts if isinstance(item, str)]
    encoded = iter(tokenizer.encode_batch(texts) if texts else [])
    out = []
    for index, item in enumerate(prompts):
        ids = list(next(encoded).ids) if isinstance(item, str) else list(item)
        where = param if len(prompts) == 1 else f"{param}[{index}]"
        if not ids:
            raise OpenAIError(400, f"{where} has no tokens; send at least one", param=param,
                              code="invalid_value")
        check_token_ids(tokenizer, ids, where, param)
        out.append(ids)
    return out


def chat_token_ids(engine, messages: list[dict]) -> list[int]:
    """``messages`` rendered with the chat template and encoded (no added specials); off the loop too."""
    text = chat_prompt(engine, messages)
    ids = list(engine.tokenizer.encode_batch([text], add_special_tokens=False)[0].ids)
    check_token_ids(engine.tokenizer, ids, "the rendered chat", "messages")
    return ids


def check_token_ids(tokenizer, ids: list[int], where: str, param: str) -> None:
    size = vocab_size(tokenizer)
    for position, token in enumerate(ids):
        if not 0 <= token < size:
            raise OpenAIError(400, f"{where} holds token id {token} at position {position}; the "
                                   f"vocabulary has ids 0..{size - 1}", param=param, code="invalid_token_id")


def max_sequence_tokens(engine) -> int:
    """The most tokens (prompt + completion) one sequence can hold: the largest context, or
    fewer when the KV page pool is smaller (``engine.max_sequence_tokens``)."""
    return int(getattr(engine, "max_sequence_tokens", None) or engine.max_context)


def completion_budget(prompts: list[list[int]], max_tokens: int | None, cap: int, *, default: int | None,
                      param: str = "prompt", tokens_param: str = "max_tokens") -> int:
    """The ``max_tokens`` to run with: the request's, or ``default`` clamped to what fits (vLLM's rule:
    context minus prompt; None means all that fits). Refuses (never clamps) an explicit value that
    does not fit, naming ``tokens_param`` when it alone is over ``cap`` and the prompt otherwise."""
    longest = max(len(ids) for ids in prompts)
    if max_tokens is None:
        room = cap - longest
        max_tokens = room if default is None else min(default, room)
        if max_tokens >= 1:
            return max_tokens
        max_tokens = 1                                       # the prompt alone fills the context
    if max_tokens >= cap:
        raise OpenAIError(400, f"{tokens_param}={max_tokens} leaves no room for a prompt: this model holds at "
                               f"most {cap} tokens per sequence (prompt and completion together)",
                          param=tokens_param, code="context_length_exceeded")
    if longest + max_tokens > cap:
        raise OpenAIError(
            400, f"this model's maximum context length is {cap} tokens; you requested "
                 f"{longest + max_tokens} tokens ({longest} in the prompt, {max_tokens} for the "
                 f"completion). Shorten the prompt or lower max_tokens.",
            param=param, code="context_length_exceeded")
    return max_tokens


def chat_prompt(engine, messages: list[dict]) -> str:
    """``messages`` rendered with the engine's chat template, ending with the assistant's turn.

    Uses ``engine.apply_chat_template`` when the engine has it (it knows the artifact's
    BOS/EOS strings), else renders ``engine.chat_template`` with :mod:`tlaloc.serving.runtime.chat`.
    """
    if not engine.chat_template:
        raise OpenAIError(400, "this model has no chat template (none in its tokenizer files); use "
                               "/v1/completions with a prompt you format yourself",
                          param="messages", code="no_chat_template")
    import jinja2
    try:
        if hasattr(engine, "apply_chat_template"):
            return engine.apply_chat_template(messages)
        from ..runtime.chat import render_chat
        return render_chat(engine.chat_template, messages, True,
                           bos_token=getattr(engine, "bos_token", "") or "",
                           eos_token=getattr(engine, "eos_token", "") or "")
    except (jinja2.TemplateError, ValueError) as exc:
        raise OpenAIError(400, f"the chat template refused these messages: {exc}", param="messages",
                          code="invalid_messages") from None
