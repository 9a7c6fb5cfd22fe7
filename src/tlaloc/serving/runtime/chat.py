"""Chat templates: render a model's Jinja chat template (as transformers does) for the runtime.

The same sandboxed environment as ``tlaloc.models.tokenizer`` (trim_blocks, lstrip_blocks,
``raise_exception``, a ``tojson`` filter), kept here so the runtime needs only jinja2.
"""
from __future__ import annotations

import json


def render_chat(template: str, messages, add_generation_prompt: bool = True, **kwargs) -> str:
    """``messages`` ([{"role", "content"}, ...]) rendered with ``template``."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(
        x, indent=indent, ensure_ascii=ensure_ascii)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                            **kwargs)


__all__ = ["render_chat"]
