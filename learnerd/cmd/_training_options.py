"""``learnerd run``'s training options: ``--no-train`` and ``--listen-rpc HOST:PORT``."""

from __future__ import annotations

import argparse

from learnerd.api.settings import RPC_TOKEN_ENV as TOKEN_ENV
from learnerd.api.settings import parse_host_port
from learnerd.api.tcp_endpoints import MIN_TOKEN_CHARS
from learnerd.cmd._common import CommandError
from learnerd.daemon.config import Config, Environment
from learnerd.sections import ConfigError


def add_training_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-train", action="store_true", help="never train adapters ([training] enabled = false)")
    parser.add_argument(
        "--listen-rpc",
        metavar="HOST:PORT",
        help=f"serve inject_probe on POST /rpc (bearer token: ${TOKEN_ENV}); overrides [rpc] listen",
    )


def apply_training_options(args: argparse.Namespace, cfg: Config) -> str | None:
    """Apply ``--no-train`` / ``--listen-rpc`` to ``cfg``; return the RPC token (None when RPC is off).

    Raises:
        CommandError: a malformed address (exit 2); RPC without ``$LEARNERD_PROBE_TOKEN``, with a token
            shorter than :data:`~learnerd.api.tcp_endpoints.MIN_TOKEN_CHARS` (the search token's floor),
            or with training off (exit 1).
    """
    if args.no_train:
        cfg.training.enabled = False
    if args.listen_rpc is not None:
        try:
            parse_host_port(args.listen_rpc, "--listen-rpc")
        except ConfigError as exc:
            raise CommandError(str(exc), exit_code=2) from exc
        cfg.rpc.listen = args.listen_rpc
    if not cfg.rpc.listen:
        return None
    token = Environment().probe_token
    if not token:
        raise CommandError(f"the RPC server needs a bearer token: set {TOKEN_ENV} (refusing to start without it)")
    if len(token) < MIN_TOKEN_CHARS:
        raise CommandError(f"${TOKEN_ENV} must be at least {MIN_TOKEN_CHARS} characters long")
    if not cfg.training.enabled:
        raise CommandError("the RPC server feeds training: it cannot run with --no-train / [training] enabled = false")
    return token
