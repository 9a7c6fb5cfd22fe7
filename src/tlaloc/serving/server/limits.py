"""The server's limits on what one client may ask for, with their defaults.

Every limit is a ``tlaloc serve`` flag (``--max-request-bytes`` ...) and a field of
:class:`ServerLimits`, which ``create_app(engine, limits=...)`` takes. A request over a
limit is refused with a 4xx naming the field (``param``) before any work is done for it:

=========================  ===========  ===================================================
field (flag)               default      refused with
=========================  ===========  ===================================================
``max_request_bytes``      4 MiB        413 ``request_too_large`` (before the body is read
                                        when ``Content-Length`` says so)
``max_prompts``            64           400 ``too_many_prompts``, param ``prompt``
``max_embedding_inputs``   2048         400 ``too_many_inputs``, param ``input`` (OpenAI's limit)
``max_n``                  16           400 ``invalid_value``, param ``n``
``max_sequences``          64           400 ``invalid_value``, param ``n`` (prompts x n)
``max_stop``               4            400 ``invalid_value``, param ``stop`` (OpenAI's limit)
``max_stop_chars``         256          400 ``invalid_value``, param ``stop`` (each string)
``header_timeout_s``       10 s         the connection is closed (headers incomplete)
``body_timeout_s``         30 s         408 ``request_timeout`` (a body stalled this long)
``keep_alive_s``           5 s          an idle keep-alive connection is closed
``max_header_bytes``       16 KiB       431 and the connection closed (a request head over this)
=========================  ===========  ===================================================
"""
from __future__ import annotations

import dataclasses

from .openai_schema import OpenAIError


@dataclasses.dataclass(frozen=True)
class ServerLimits:
    """Per-request limits of the HTTP server; see the module docstring for each default."""
    max_request_bytes: int = 4 * 1024 * 1024
    max_prompts: int = 64
    max_embedding_inputs: int = 2048
    max_n: int = 16
    max_sequences: int = 64
    max_stop: int = 4
    max_stop_chars: int = 256
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    max_header_bytes: int = 16 * 1024

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"ServerLimits.{field.name} must be a positive number, got {value!r}")

    def check_stop(self, stop: list[str]) -> None:
        if len(stop) > self.max_stop:
            raise OpenAIError(400, f"'stop' holds {len(stop)} strings; at most {self.max_stop} are allowed",
                              param="stop", code="invalid_value")
        for index, text in enumerate(stop):
            if len(text) > self.max_stop_chars:
                raise OpenAIError(400, f"stop[{index}] is {len(text)} characters long; at most "
                                       f"{self.max_stop_chars} are allowed", param="stop", code="invalid_value")

    def check_choices(self, prompts: int, n: int) -> None:
        """``prompts`` prompts with ``n`` choices each: refuse more than the limits allow."""
        if prompts > self.max_prompts:
            raise OpenAIError(400, f"'prompt' is a list of {prompts} prompts; at most {self.max_prompts} are "
                                   f"allowed in one request (send several requests)", param="prompt",
                              code="too_many_prompts")
        if n > self.max_n:
            raise OpenAIError(400, f"'n' is {n}; at most {self.max_n} choices are allowed", param="n",
                              code="invalid_value")
        if prompts * n > self.max_sequences:
            raise OpenAIError(400, f"{prompts} prompts x n={n} = {prompts * n} sequences; at most "
                                   f"{self.max_sequences} are allowed in one request", param="n",
                              code="invalid_value")


__all__ = ["ServerLimits"]
