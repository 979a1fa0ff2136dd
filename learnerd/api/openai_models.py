"""Request and response bodies of the OpenAI-compatible endpoint (pydantic v2), after OpenAI's API reference
(https://platform.openai.com/docs/api-reference/chat): only the fields learnerd honours are modelled;
unknown request fields are ignored, as OpenAI-compatible servers commonly do, except the function-calling
fields (:data:`UNSUPPORTED_FIELDS`), which are refused: a client that sends tools expects tool calls back,
and an answer that silently ignored them would look like the model chose not to call one.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

UNSUPPORTED_FIELDS = ("tools", "tool_choice", "functions", "function_call")
"""Request fields refused with 400 (learnerd serves no function calling); ``null`` counts as absent."""
MIN_TEMPERATURE = 1e-5
"""The smallest non-zero ``temperature`` accepted (vLLM's ``_SAMPLING_EPS``): below it, logits divided by the
temperature overflow to inf and sampling fails; 0 asks for greedy decoding."""
SEED_RANGE = (-(2**63), 2**63 - 1)
"""``seed`` is an int64, as in OpenAI's API reference (torch's generator takes any such value)."""


class ContentPart(BaseModel):
    """One part of a message's content; only ``text`` parts are accepted."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class ChatMessageIn(BaseModel):
    """A message of the conversation (``developer`` is read as ``system``)."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class LearnerdOptions(BaseModel):
    """learnerd's extension: ``rag_k`` retrieved examples, quoted in the system message (None: ``[serve] rag_k``)."""

    model_config = ConfigDict(extra="forbid")
    rag_k: int | None = Field(default=None, ge=0)


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``. ``max_tokens`` (or ``max_completion_tokens``) in tokens; ``n`` must be 1."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1)
    messages: list[ChatMessageIn] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """None: the endpoint's ``[serve] temperature``."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    n: int = Field(default=1, ge=1, le=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    learnerd: LearnerdOptions | None = None
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    user: str | None = Field(default=None, max_length=256)

    def session(self) -> str | None:
        """The client's session id: ``metadata["session"]``, else ``user``, else None (a blank one is none).
        An execution the same client logs in that session (learnerd's block log) later resolves the answer
        (:mod:`learnerd.store.suggestions`)."""
        session = (self.metadata or {}).get("session") or self.user
        return (session.strip()[:256] or None) if session else None

    @model_validator(mode="before")
    @classmethod
    def _no_function_calling(cls, body: Any) -> Any:
        if isinstance(body, dict):
            sent = [name for name in UNSUPPORTED_FIELDS if body.get(name) is not None]
            if sent:
                raise ValueError(f"unsupported: learnerd serves no function calling ({', '.join(sent)})")
        return body

    @field_validator("temperature")
    @classmethod
    def _greedy_or_sampling(cls, value: float | None) -> float | None:
        if value is not None and 0 < value < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}, not {value}")
        return value

    @field_validator("stop")
    @classmethod
    def _at_most_four(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("at most 4 stop sequences")
        return value

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ModelCard(BaseModel):
    """One entry of ``GET /v1/models``; ``learnerd`` says what it serves (base, document, adapter version) and,
    for a document, the candidate the promotion gate ``rejected`` (``{"version", "reasons"}``, or None)."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "learnerd"
    learnerd: dict[str, Any]


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
