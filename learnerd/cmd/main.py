"""Entry point of the ``learnerd`` command: finds the subcommand modules and dispatches.

Every module ``learnerd/cmd/<name>.py`` (not starting with ``_``) defines
``register(subparsers) -> None``, which adds its parser and sets ``func`` to a callable taking the
parsed arguments and returning the exit status. Modules import the config, the store and heavy
libraries (numpy, torch, transformers) inside ``func``, so ``learnerd --help`` stays fast
(tests/unit/test_cmd_imports.py).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import learnerd
import learnerd.cmd
from learnerd.cmd._common import CommandError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="learnerd",
        description="A continuous-learning daemon for LLM assistants.",
    )
    parser.add_argument("--version", action="version", version=f"learnerd {learnerd.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(learnerd.cmd.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "main":
            continue
        importlib.import_module(f"learnerd.cmd.{info.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``learnerd`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CommandError as exc:
        print(f"learnerd {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
