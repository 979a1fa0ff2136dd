"""Structured replies from an OpenAI-compatible chat-completions endpoint: one request with a strict JSON
schema (OpenAI's structured outputs), validated here, retried with the reason when invalid.

The request carries ``response_format = {"type": "json_schema", "json_schema": {"name", "strict": true,
"schema"}}``. A server that honours strict mode never returns an invalid reply; one that does not (an
older model, a local server) may, so every reply is parsed and checked, and an invalid one is answered
with a user turn naming the problem, up to ``max_attempts`` requests. No temperature is sent (reasoning
models refuse one). The API key comes from the environment variable named by ``api_key_env``; a
placeholder is sent when it is unset (local servers ignore it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import structlog

log = structlog.get_logger(__name__)
T = TypeVar("T")


class StructuredChatError(RuntimeError):
    """The endpoint failed, or gave no valid reply within the allowed attempts."""


class InvalidRepliesError(StructuredChatError):
    """The endpoint answered every attempt, but never with a reply matching the schema."""


def make_client(base_url: str, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 120.0) -> Any:
    """An ``openai.OpenAI`` client for ``base_url`` ("" = the client's default, api.openai.com), with
    the client's own retries (2) for connection errors and 429/5xx answers."""
    import openai

    return openai.OpenAI(
        base_url=base_url or None, api_key=os.environ.get(api_key_env) or "unset", max_retries=2, timeout=timeout_s
    )


def response_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The ``response_format`` of a strict structured-output request."""
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


def structured_chat(
    client: Any,
    *,
    model: str,
    messages: Sequence[dict[str, str]],
    name: str,
    schema: dict[str, Any],
    parse: Callable[[Any], T],
    max_attempts: int = 3,
) -> T:
    """Ask ``model`` for a reply matching ``schema`` and return ``parse(reply as JSON)``.

    Args:
        messages: the conversation (``{"role", "content"}`` dicts).
        parse: validates the decoded JSON and builds the result; raises ``ValueError`` when invalid.
        max_attempts: requests before giving up (each retry appends the invalid reply and the reason).

    Raises:
        StructuredChatError: a request failed (after the client's own retries).
        InvalidRepliesError: every reply violated the schema (or ``parse``).
    """
    import openai

    conversation = [dict(m) for m in messages]
    reason = ""
    for attempt in range(1, max_attempts + 1):
        try:
            completion = client.chat.completions.create(
                model=model, messages=conversation, response_format=response_format(name, schema)
            )
        except openai.OpenAIError as exc:
            raise StructuredChatError(f"chat completion at {client.base_url} failed: {exc}") from exc
        message = completion.choices[0].message if completion.choices else None
        content = (message.content or "") if message is not None else ""
        try:
            if message is None:
                raise ValueError("the reply has no choices")
            if getattr(message, "refusal", None):
                raise ValueError(f"the model refused: {message.refusal}")
            return parse(json.loads(content))
        except ValueError as exc:
            reason = str(exc)
            log.warning(
                "invalid structured reply", schema=name, attempt=attempt, max_attempts=max_attempts, error=reason
            )
            conversation += [
                {"role": "assistant", "content": content},
                {
                    "role": "user",
                    "content": f"That reply is invalid: {reason}. Reply again with JSON matching the schema.",
                },
            ]
    raise InvalidRepliesError(f"no valid {name} reply from {model} in {max_attempts} attempt(s); last: {reason}")
