"""``learnerd run``'s training options: ``--no-train`` and ``--listen-rpc HOST:PORT``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from learnerd.api.settings import RPC_TOKEN_ENV as TOKEN_ENV
from learnerd.api.settings import parse_host_port
from learnerd.cmd._common import CommandError

if TYPE_CHECKING:
    from learnerd.daemon.config import Config


def add_training_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-train", action="store_true", help="never train adapters ([training] enabled = false)")
    parser.add_argument(
        "--listen-rpc",
        metavar="HOST:PORT",
        help=f"serve inject_probe and POST /v1/blocks (bearer token: ${TOKEN_ENV}, else the token file of "
        "`learnerd init`); overrides [rpc] listen",
    )


def apply_training_flags(args: argparse.Namespace, cfg: Config) -> Config:
    """``cfg`` with ``--no-train`` and ``--listen-rpc`` applied (also to a reloaded config, so a reload does not
    report them as changes); returns ``cfg``.

    Raises:
        CommandError: a malformed address (exit 2).
    """
    from learnerd.sections import ConfigError

    if args.no_train:
        cfg.training.enabled = False
    if args.listen_rpc is not None:
        try:
            parse_host_port(args.listen_rpc, "--listen-rpc")
        except ConfigError as exc:
            raise CommandError(str(exc), exit_code=2) from exc
        cfg.rpc.listen = args.listen_rpc
    return cfg


def apply_training_options(args: argparse.Namespace, cfg: Config) -> str | None:
    """Apply ``--no-train`` / ``--listen-rpc`` to ``cfg`` (:func:`apply_training_flags`); return the RPC token
    (``$LEARNERD_PROBE_TOKEN``, else the token file: :func:`~learnerd.api.tokens.surface_token`; None when RPC is
    off).

    Raises:
        CommandError: a malformed address (exit 2); RPC without a token, with a token shorter than
            :data:`~learnerd.api.tokens.MIN_TOKEN_CHARS`, with an unsafe token file, or with training off (exit 1).
    """
    from learnerd.api.tokens import TokenError, check_token, surface_token, token_path

    apply_training_flags(args, cfg)
    if not cfg.rpc.listen:
        return None
    try:
        token = check_token(surface_token(TOKEN_ENV, cfg.path)[0], TOKEN_ENV, "the RPC server", token_path(cfg.path))
    except TokenError as exc:
        raise CommandError(str(exc)) from None
    if not cfg.training.enabled:
        raise CommandError("the RPC server feeds training: it cannot run with --no-train / [training] enabled = false")
    return token
