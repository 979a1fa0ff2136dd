"""The README is a manual that runs: every ``learnerd …`` command its code blocks show parses with the real
command-line parser, its client snippet is the one the integration tests run, its test command is where
``.ci/run`` reads it, and it stays short (links to docs/ carry the rest: tests/unit/test_docs_references.py)."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess

import pytest

from learnerd.cmd.main import build_parser
from tests.conftest import REPO_ROOT
from tests.support.manual import doc_block

README = REPO_ROOT / "README.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MAX_LINES = 200


def code_blocks(language: str | None = None) -> list[str]:
    """The README's fenced code blocks (of ``language``, when given)."""
    text = README.read_text(encoding="utf-8")
    return [body for lang, body in BLOCK.findall(text) if language is None or lang == language]


def learnerd_commands(script: str) -> list[list[str]]:
    """The ``learnerd`` commands of a shell script: each line split at ``&&``, ``||``, ``;`` and ``|``, comments
    dropped, as argv lists without the program name."""
    commands = []
    for line in script.splitlines():
        words = shlex.split(line, comments=True)
        command: list[str] = []
        for word in [*words, ";"]:
            if word in {"&&", "||", ";", "|"}:
                if command[:1] == ["learnerd"]:
                    commands.append(command[1:])
                command = []
            else:
                command.append(word)
    return commands


README_COMMANDS = [argv for block in code_blocks("sh") for argv in learnerd_commands(block)]


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, an argparse error as an assertion instead of an exit."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"learnerd {shlex.join(argv)} does not parse (exit {exc.code})") from exc


def test_the_readme_shows_the_commands_of_its_quick_starts() -> None:
    shown = {argv[0] for argv in README_COMMANDS}
    assert {"init", "run", "search", "train", "generate", "versions"} <= shown


@pytest.mark.parametrize("argv", README_COMMANDS, ids=shlex.join)
def test_every_learnerd_command_in_the_readme_parses(argv: list[str]) -> None:
    args = parse(build_parser(), argv)
    assert args.command == argv[0] and callable(args.func)


def test_a_command_the_parser_refuses_fails_the_check() -> None:
    assert learnerd_commands("pip install -e . && learnerd run --once --no-such-flag  # x\n") == [
        ["run", "--once", "--no-such-flag"]
    ]
    with pytest.raises(AssertionError, match="does not parse"):
        parse(build_parser(), ["run", "--once", "--no-such-flag"])


def test_the_client_snippet_is_the_tested_one() -> None:
    assert code_blocks("python") == [doc_block("chat") + "\n"]


def test_ci_reads_the_test_command_from_the_readme() -> None:
    awk = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").split("cmd=$(")[1].split(" README.md)")[0]
    command = subprocess.run(["bash", "-c", f"{awk} {README}"], capture_output=True, text=True, check=True).stdout
    assert command.startswith("python3 -m venv .venv && ") and "python -m pytest" in command
    assert command.strip() in code_blocks("sh")[-1]


def test_the_readme_is_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= MAX_LINES
