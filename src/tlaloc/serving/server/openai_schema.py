"""The OpenAI request bodies the server accepts, and its error type.

Requests are validated strictly: a field of the wrong type (``"max_tokens": "5"``) or a
field the API does not have is a 400, never coerced or ignored. Fields the OpenAI API
has but tlaloc does not implement are accepted at their neutral value and refused by
name otherwise (:func:`refuse_unsupported`), so a client never gets a silently
different answer.

Every error the server sends is ``{"error": {"message", "type", "param", "code"}}``
(:class:`OpenAIError`).
"""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

_STRICT = ConfigDict(extra="forbid", strict=True)
INT32_MAX = 2 ** 31 - 1           # token counts reach the engine as int32
INT64_MAX = 2 ** 63 - 1


class OpenAIError(Exception):
    """An error answered to the client as an OpenAI error body with an HTTP status.

    ``type`` is ``invalid_request_error`` (the client's fault, 4xx) or ``server_error``
    (5xx); ``param`` names the offending request field; ``code`` is a stable string
    (``context_length_exceeded``, ``invalid_token_id``, ``model_not_found``, ...).
    """

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


class StreamOptions(BaseModel):
    model_config = _STRICT
    include_usage: bool = False


Prompt = Union[str, list[str], list[int], list[list[int]]]
Stop = Union[str, list[str], None]


class _Sampling(BaseModel):
    """Fields common to completions and chat completions.

    OpenAI's fields are "X or null", and null means the default: a field sent as null is
    read as not sent (so ``"max_tokens": null`` is 16 for completions, ``"temperature": null`` 1).
    """
    model_config = _STRICT

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data):
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None or k not in cls.model_fields}
        return data
    model: Optional[str] = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: Optional[int] = Field(None, ge=1)           # an extension (vLLM has it too); clamped to the vocabulary
    n: int = Field(1, ge=1)                            # the upper bound is ServerLimits.max_n
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    stop: Stop = None
    seed: Optional[int] = Field(None, ge=0, le=INT64_MAX)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Optional[dict[str, float]] = None
    user: Optional[str] = None


class CompletionRequest(_Sampling):
    prompt: Prompt
    max_tokens: Optional[int] = Field(None, ge=1, le=INT32_MAX)     # None (or null): 16, as OpenAI
    logprobs: Optional[int] = Field(None, ge=0, le=5)               # OpenAI's legacy range
    echo: bool = False
    best_of: Optional[int] = None
    suffix: Optional[str] = None


class TextPart(BaseModel):
    model_config = _STRICT
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = _STRICT
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[TextPart], None] = None
    name: Optional[str] = None
    tool_call_id: Optional[str] = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[int] = Field(None, ge=1, le=INT32_MAX)
    max_completion_tokens: Optional[int] = Field(None, ge=1, le=INT32_MAX)
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)           # OpenAI's range
    response_format: Optional[dict] = None
    tools: Optional[list[dict]] = None
    tool_choice: Union[str, dict, None] = None
    parallel_tool_calls: Optional[bool] = None


class EmbeddingRequest(BaseModel):
    model_config = _STRICT
    model: Optional[str] = None
    input: Prompt
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Optional[int] = None
    user: Optional[str] = None


def refuse_unsupported(request: BaseModel) -> None:
    """Raise a 400 naming the first field set to something tlaloc does not implement."""
    checks = [
        ("echo", lambda v: v, "echo is not supported; prepend the prompt yourself"),
        ("best_of", lambda v: v not in (None, 1), "best_of is not supported (it needs logprobs); use n"),
        ("suffix", lambda v: v, "suffix (insertion) is not supported"),
        ("presence_penalty", lambda v: v, "presence_penalty is not supported; send 0 or omit it"),
        ("frequency_penalty", lambda v: v, "frequency_penalty is not supported; send 0 or omit it"),
        ("logit_bias", lambda v: v, "logit_bias is not supported: sampling runs inside the compiled "
                                    "program"),
        ("tools", lambda v: v, "tools (function calling) are not supported"),
        ("tool_choice", lambda v: v not in (None, "none"), "tool_choice is not supported"),
        ("response_format", lambda v: v not in (None, {"type": "text"}),
         "response_format other than {\"type\": \"text\"} is not supported"),
    ]
    for param, unsupported, message in checks:
        if param in type(request).model_fields and unsupported(getattr(request, param)):
            text = message % param if "%s" in message else message     # never str.format: messages hold braces
            raise OpenAIError(400, text, param=param, code="unsupported_parameter")


def parse(model: type[BaseModel], raw: bytes) -> BaseModel:
    """Validate a JSON body, turning every failure into a 400 :class:`OpenAIError`."""
    try:
        return model.model_validate_json(raw or b"")
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            raise OpenAIError(400, f"the request body is not valid JSON: {first['msg']}",
                              code="invalid_json") from None
        param = ".".join(str(p) for p in _clean_loc(first["loc"])) or None
        if first["type"] == "extra_forbidden":
            message = f"unrecognized request argument supplied: {param}"
        else:
            message = f"invalid value for '{param}': {first['msg']}" if param else first["msg"]
            if first["type"] == "model_type":
                message = "the request body must be a JSON object"
        raise OpenAIError(400, message, param=param, code="invalid_value") from None


def _clean_loc(loc) -> list:
    """Drop pydantic's union-member tags (``str``, ``list[int]``, ...) from an error location."""
    return [p for p in loc if isinstance(p, int) or not any(c in str(p) for c in "[]") and p not in
            ("str", "int", "float", "bool", "dict", "list", "function-after", "literal")]
