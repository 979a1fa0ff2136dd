"""``learnerd init [DIR]``: a commented config and a first ``.dlm`` document, then the command to run next.

``DIR`` defaults to ``$XDG_CONFIG_HOME/learnerd`` (``~/.config/learnerd``), where ``learnerd`` finds
``config.toml`` without ``--config``. Nothing is overwritten: an existing config or document is an error.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import tomllib
from pathlib import Path

from learnerd.cmd._common import CommandError

PROSE = (
    "# Notes for the model\n\n"
    "Write here what the model should know. learnerd adds a `### Q !probe` section below for each example\n"
    "it learns from the commands people run; sections with a `learnerd/` marker are rewritten by learnerd,\n"
    "edit anything else freely."
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init",
        help="write a commented config and a first .dlm document",
        description="Write DIR/config.toml (every setting listed, commented, with its default) and "
        "DIR/docs/learned.dlm (a valid document with a fresh dlm_id and an explicit training block), "
        "then print the command to run next. Existing files are never overwritten.",
    )
    p.add_argument("dir", nargs="?", metavar="DIR", help="where to write (default: $XDG_CONFIG_HOME/learnerd)")
    p.add_argument(
        "--log-dir", action="append", default=[], metavar="DIR", help="a directory of assistant logs (repeatable)"
    )
    p.add_argument("--base-model", metavar="MODEL", help="base_model of the document (default: [probes] base_model)")
    p.add_argument("--json", action="store_true", help="print what was written and the next command as JSON")
    p.set_defaults(func=run)


def render_config(log_dirs: list[str]) -> str:
    """The text of a new config: ``log_dirs`` and ``docs_dirs`` set, every other key listed, commented out."""
    from learnerd.daemon.config import reference

    reference = "".join(f"# {line}".rstrip() + "\n" for line in reference().splitlines())
    return (
        "# learnerd's configuration, written by `learnerd init`. Every key is optional: the block below lists\n"
        "# them all with their defaults. Relative paths are resolved against this file's directory.\n\n"
        f"log_dirs = {json.dumps(log_dirs)}  # directories of assistant logs to watch (empty: nothing is learned)\n"
        'docs_dirs = ["docs"]  # .dlm documents; learned probes go into docs/learned.dlm\n\n'
        "# ---- every setting, with its default ------------------------------------------------------------\n"
        f"{reference}"
    )


def run(args: argparse.Namespace) -> int:
    from learnerd.daemon.config import CONFIG_ENV, config_candidates, config_from_dict
    from learnerd.reconcilers.settings import ProbesConfig
    from learnerd.sections import ConfigError
    from learnerd.store.atomic import atomic_write_text
    from learnerd.store.dlm import DocumentError, TrainingConfig, new_document

    default_config = config_candidates()[0]
    target = Path(args.dir).expanduser().absolute() if args.dir else default_config.parent
    config = target / "config.toml"
    document = target / "docs" / ProbesConfig().document
    for path in (config, document):
        if path.exists():
            raise CommandError(f"{path} already exists: not overwritten (move it aside to start afresh)")
    log_dirs = [str(Path(d).expanduser().absolute()) for d in args.log_dir]
    text = render_config(log_dirs)
    try:
        config_from_dict(tomllib.loads(text), base=target, path=config)
        training = {k: v for k, v in TrainingConfig().to_dict().items() if v is not None}  # dlm's keys, explicit
        doc = new_document(args.base_model or ProbesConfig().base_model, prose=PROSE, training=training, path=document)
    except (ConfigError, DocumentError) as exc:
        raise CommandError(str(exc)) from None
    try:
        document.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(document, doc.to_text())
        atomic_write_text(config, text)
    except OSError as exc:
        raise CommandError(f"cannot write into {target}: {exc.strerror or exc}") from None

    found = config == default_config and not os.environ.get(CONFIG_ENV)
    command = "learnerd run" if found else f"learnerd run --config {shlex.quote(str(config))}"
    if not log_dirs:
        command += " --log-dir DIR"
    if args.json:
        written = {"config": str(config), "document": str(document), "dlm_id": doc.frontmatter.dlm_id}
        print(json.dumps({**written, "log_dirs": log_dirs, "next": command}, indent=2))
        return 0
    print(f"wrote {config}")
    print(f"wrote {document} (dlm_id {doc.frontmatter.dlm_id})")
    if not log_dirs:
        print(f"no log directory yet: add your assistant's log directory to log_dirs in {config}, or run")
    print(f"next: {command}")
    return 0
