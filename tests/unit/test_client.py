"""``log_block``'s events: every one names the block's session when one is given, none otherwise."""

from __future__ import annotations

from learnerd.client import _block_events


def test_every_event_of_a_logged_block_carries_its_session():
    events = _block_events("ls", exit_code=0, context=["list files"], generated="ls -la", session="term-1")
    assert [e["type"] for e in events] == ["context", "generated", "executed"]
    assert {e["session"] for e in events} == {"term-1"}
    assert all("session" not in e for e in _block_events("ls", exit_code=0))
