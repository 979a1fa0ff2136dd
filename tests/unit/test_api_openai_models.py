"""The chat request's session id: ``metadata["session"]`` first, else ``user`` (OpenAI's end-user id)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from learnerd.api.openai_models import ChatCompletionRequest

MESSAGES = [{"role": "user", "content": "list the pods"}]


@pytest.mark.parametrize(
    ("extra", "session"),
    [
        ({}, None),
        ({"metadata": {"session": "term-1"}}, "term-1"),
        ({"metadata": {"session": "term-1"}, "user": "alice"}, "term-1"),
        ({"metadata": {"team": "ops"}, "user": "alice"}, "alice"),
        ({"metadata": {"session": "  "}}, None),
    ],
)
def test_the_session_is_the_metadata_session_else_the_user(extra, session):
    assert ChatCompletionRequest.model_validate({"model": "m", "messages": MESSAGES, **extra}).session() == session


@pytest.mark.parametrize(
    "extra",
    [{"metadata": {"session": 1}}, {"metadata": {f"k{i}": "v" for i in range(17)}}, {"user": "u" * 257}],
)
def test_metadata_that_is_not_string_pairs_or_too_long_is_refused(extra):
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate({"model": "m", "messages": MESSAGES, **extra})
