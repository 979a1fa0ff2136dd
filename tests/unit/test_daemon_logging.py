"""Log output: one JSON object per line (library records and exceptions included), readable console
output with tracebacks but no local variables, live level changes, no progress bars, no terminal escapes in JSON."""

from __future__ import annotations

import io
import json
import logging
import os
import warnings

import pytest
import structlog

from learnerd.daemon.logging import adopt_library_loggers, configure_logging, current_level, set_log_level

pytestmark = pytest.mark.usefixtures("restore_log_level")


def _boom(secret: str) -> None:
    raise ValueError("the disk is on fire")


def test_json_lines_carry_exceptions_and_library_records() -> None:
    out = io.StringIO()
    logging.captureWarnings(False)  # pytest hooks warnings per test; let configure_logging hook them again
    configure_logging("info", json=True, stream=out)
    log = structlog.get_logger("learnerd.test")
    log.info("hello", key="b1")
    try:
        _boom("hunter2")
    except ValueError:
        log.exception("reconcile failed", key="b2")
    logging.getLogger("transformers.modeling_utils").warning("weights not initialised: %s", "lm_head")
    logging.getLogger("aiohttp.access").info("an info line from a library is below the threshold")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("deprecated thing", DeprecationWarning, stacklevel=1)
    log.debug("not shown at info")

    events = [json.loads(line) for line in out.getvalue().splitlines()]  # every line is one JSON object
    assert [e["event"] for e in events[:2]] == ["hello", "reconcile failed"]
    assert events[0]["key"] == "b1" and events[0]["level"] == "info" and events[0]["timestamp"].endswith("Z")
    failure = events[1]
    assert failure["level"] == "error" and failure["key"] == "b2"
    assert "Traceback" in failure["exception"] and "ValueError: the disk is on fire" in failure["exception"]
    library = events[2]
    assert library["event"] == "weights not initialised: lm_head" and library["level"] == "warning"
    assert library["logger"] == "transformers.modeling_utils"
    assert "deprecated thing" in events[3]["event"] and events[3]["logger"] == "py.warnings"
    assert len(events) == 4


def test_console_output_shows_the_traceback_without_locals() -> None:
    out = io.StringIO()
    configure_logging("info", json=False, stream=out)
    try:
        _boom("hun" + "ter2")  # a local of _boom that only exists at run time
    except ValueError:
        structlog.get_logger("learnerd.test").exception("reconcile failed", key="b2")
    text = out.getvalue()
    assert "reconcile failed" in text and "key=b2" in text
    assert "ValueError" in text and "the disk is on fire" in text and "_boom" in text
    assert "hunter2" not in text, "local variables (tokens, payloads) stay out of the log"
    assert "\x1b[" not in text, "no colour codes when the stream is not a terminal"
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.splitlines()[0])


def test_the_level_changes_at_once_and_keeps_the_format() -> None:
    out = io.StringIO()
    configure_logging("info", json=True, stream=out)
    log = structlog.get_logger("learnerd.test")
    log.debug("hidden")
    assert set_log_level("debug") == "info"
    log.debug("shown")
    assert current_level() == "debug"
    with pytest.raises(ValueError, match="unknown log level"):
        set_log_level("loud")
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["shown"]


def test_hugging_face_progress_bars_are_off() -> None:
    configure_logging("info", json=True, stream=io.StringIO())
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    from transformers.utils import logging as tf_logging

    configure_logging("info", json=True, stream=io.StringIO())  # with transformers imported now
    assert not tf_logging.is_progress_bar_enabled()
    assert logging.getLogger("transformers").propagate, "transformers' records go through our handler"


def test_a_json_log_holds_no_terminal_escapes(tiny_model_dir) -> None:
    """transformers titles its LOAD REPORT in bold whatever the stream; the JSON line carries the text only."""
    out = io.StringIO()
    configure_logging("info", json=True, stream=out)
    from transformers import AutoModelForSequenceClassification

    adopt_library_loggers()  # as the daemon does once transformers is imported
    AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, local_files_only=True)  # a new "score" head
    structlog.get_logger("learnerd.test").warning("\x1b[31mred\x1b[0m and \x1b]8;;https://x\x1b\\linked\x1b]8;;\x1b\\")

    lines = out.getvalue().splitlines()
    events = [json.loads(line) for line in lines]
    report = next(e["event"] for e in events if "LOAD REPORT" in e["event"])
    assert report.startswith("LlamaForSequenceClassification LOAD REPORT from: ") and "score.weight" in report
    assert events[-1]["event"] == "red and linked"
    assert not any("\x1b" in line or "\\u001b" in line for line in lines)


def test_debug_events_pass_the_secret_redactor() -> None:
    """The OpenAI endpoint logs a request's prompt at debug: what a person typed passes the redactor first (the
    daemon's, with its [privacy] settings, once it is set); info events are left as they are."""
    from learnerd.daemon.logging import use_redactor
    from learnerd.privacy.redact import Redactor
    from learnerd.privacy.settings import PrivacyConfig

    out = io.StringIO()
    configure_logging("debug", json=True, stream=out)
    log = structlog.get_logger("learnerd.api.openai_app")
    prompt = [{"role": "user", "content": "export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE; deploy ticket-123456"}]
    try:
        use_redactor(None)  # before the daemon sets its own: the default [privacy]
        log.debug("chat prompt", model="notes", prompt=prompt)
        use_redactor(Redactor(PrivacyConfig(extra_patterns=[r"ticket-(?P<secret>\d{6})"])))
        log.debug("chat prompt", model="notes", prompt=prompt)
        log.info("chat completion", model="notes", retrieved=["ticket-123456"])
    finally:
        use_redactor(None)
    default, configured, info = (json.loads(line) for line in out.getvalue().splitlines())
    assert "AKIAIOSFODNN7EXAMPLE" not in json.dumps(default) and "ticket-123456" in json.dumps(default)
    assert "AKIAIOSFODNN7EXAMPLE" not in json.dumps(configured) and "123456" not in json.dumps(configured)
    assert configured["prompt"][0]["role"] == "user" and configured["model"] == "notes"
    assert info["retrieved"] == ["ticket-123456"], "only debug events are redacted"
