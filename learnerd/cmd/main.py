"""Entry point of the ``learnerd`` command: finds the subcommand modules and dispatches.

Every module ``learnerd/cmd/<name>.py`` (not starting with ``_``) defines
``register(subparsers) -> None``, which adds its parser and sets ``func`` to a callable taking the
parsed arguments and returning the exit status. Modules import the config, the store and heavy
libraries (numpy, torch, transformers) inside ``func``, so ``learnerd --help`` stays fast
(tests/unit/test_cmd_imports.py).

The command (:func:`entry`: the ``learnerd`` script and ``python -m learnerd``) runs under the umask
:data:`PRIVATE_UMASK`: every file and directory it creates — the database and its WAL, models, adapters, what
transformers and peft write, the training worker's files — is its user's only (0600 / 0700), as
docs/privacy.md says; what another program must read (a vLLM export) is given its mode explicitly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

import learnerd
import learnerd.cmd
from learnerd.cmd._common import CommandError
from learnerd.ml.threads import passive_openmp

PRIVATE_UMASK = 0o077
"""The process umask of every ``learnerd`` command: files 0600, directories 0700."""


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
    """Run ``learnerd`` with ``argv`` (default ``sys.argv[1:]``); return the exit status. OpenMP's threads wait
    passively in this process and its children (:func:`learnerd.ml.threads.passive_openmp`, before torch loads)."""
    passive_openmp()
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CommandError as exc:
        print(f"learnerd {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def entry() -> None:
    """The ``learnerd`` command: :func:`main` under :data:`PRIVATE_UMASK`, exiting with its status."""
    os.umask(PRIVATE_UMASK)
    sys.exit(main())


if __name__ == "__main__":
    entry()
