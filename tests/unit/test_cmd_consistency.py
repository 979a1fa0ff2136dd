"""The command line is consistent: every (sub)command has a description, no help text carries Sphinx
markup, every command prints JSON with ``--json`` (``eval`` aside: its flags are its own), and ``--since``
takes compound durations."""

from __future__ import annotations

import argparse
import re

import pytest

from learnerd.cmd._common import CommandError, parse_since, plain
from learnerd.cmd.main import build_parser

SPHINX = re.compile(r"``|:[a-z]+:`")


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(path, parser)`` for every command and subcommand below ``parser``, leaves flagged."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in subs:
        for name, sub in action.choices.items():
            inner = any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
            yield (*path, name), sub, not inner
            yield from commands(sub, (*path, name))


ALL = list(commands(build_parser()))


def test_the_walk_sees_every_command() -> None:
    names = {" ".join(path) for path, _, _ in ALL}
    assert {"run", "harvest", "generate", "evolve", "ctl", "ctl metrics", "ctl requeue", "eval"} <= names


@pytest.mark.parametrize(("path", "parser", "leaf"), ALL, ids=[" ".join(p) for p, _, _ in ALL])
def test_description_and_plain_help(path: tuple[str, ...], parser: argparse.ArgumentParser, leaf: bool) -> None:
    assert parser.description and parser.description.strip(), f"{' '.join(path)} has no description"
    text = parser.format_help()
    assert not SPHINX.search(text), f"{' '.join(path)}: Sphinx markup in --help: {SPHINX.search(text)[0]!r}"
    if leaf and path != ("eval",):
        assert "--json" in parser._option_string_actions, f"{' '.join(path)} has no --json"


def test_plain_turns_roles_and_literals_into_text() -> None:
    doc = "``learnerd x``: uses :mod:`learnerd.steering` and :func:`~learnerd.eval.harvest.auto_harvest`.\n\nMore."
    assert plain(doc) == "learnerd x: uses learnerd.steering and auto_harvest."


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("6h", 6 * 3600),
        ("2h30m", 2 * 3600 + 1800),
        ("1d 12h", 36 * 3600),
        ("1.5h", 5400),
        ("1w2d3h4m5s", 7 * 86400 + 2 * 86400 + 3 * 3600 + 4 * 60 + 5),
    ],
)
def test_since_takes_compound_durations(text: str, seconds: float) -> None:
    assert parse_since(text, 1_000_000.0) == 1_000_000.0 - seconds


@pytest.mark.parametrize("text", ["2x", "h2", "2h30", "", "30m ago", "-2h"])
def test_since_refuses_what_is_no_duration_nor_a_time(text: str) -> None:
    with pytest.raises(CommandError) as err:
        parse_since(text, 0.0)
    assert err.value.exit_code == 2 and "2h30m" in str(err.value)


def test_since_still_takes_iso_times() -> None:
    assert parse_since("1970-01-02T00:00:00Z", 0.0) == 86400.0
