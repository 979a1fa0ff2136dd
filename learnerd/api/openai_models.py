"""Request and response bodies of the OpenAI-compatible endpoint (pydantic v2), after OpenAI's API reference
(https://platform.openai.com/docs/api-reference/chat): only the fields learnerd honours are modelled;
unknown request fields are ignored, as OpenAI-compatible servers commonly do.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


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
    """learnerd's extension: ``rag_k`` retrieved examples before the last user turn (None: ``[serve] rag_k``)."""

    model_config = ConfigDict(extra="forbid")
    rag_k: int | None = Field(default=None, ge=0)


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``. ``max_tokens`` (or ``max_completion_tokens``) in tokens; ``n`` must be 1."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1)
    messages: list[ChatMessageIn] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    learnerd: LearnerdOptions | None = None

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
